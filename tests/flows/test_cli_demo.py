"""quantfuse demo, end to end on a small budget, in a child process as a user runs it: fusion
table, tune, accuracy check, bench; TVM's native log lines go to the work dir, not the terminal."""

import re
import subprocess
import sys
import textwrap

from relay_ext.workdir.files import CHART_FILE, REPORT_FILE
from host_flags import AMD_AVX2_VM
from conftest import ROOT, needs_c_compiler

TVM_LOG_LINE = re.compile(r"\[\d\d:\d\d:\d\d\] \S+\.cc:\d+")


def _quantfuse(args, flags=None, timeout=900):
    """Run the CLI in a child process (code built for a chosen -mcpu cannot kill the test run);
    ``flags``: the CPU flags the child believes its OS enables."""
    code = textwrap.dedent(f"""
        import sys
        from relay_ext import cli
        from relay_ext.lowering import targets
        if {flags is not None}:
            targets.host_cpu_flags = lambda: frozenset({sorted(flags or ())!r})
        sys.exit(cli.main({list(args)!r}))
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, check=False)


@needs_c_compiler
def test_demo_on_an_avx2_host_runs_the_whole_job_and_keeps_tvm_logs_out_of_stderr(tmp_path):
    work_dir = tmp_path / "demo"
    child = _quantfuse(["demo", "--work-dir", str(work_dir), "--trials", "8",
                        "--image-size", "16"], flags=AMD_AVX2_VM)
    assert child.returncode == 0, child.stderr[-3000:]
    out, err = child.stdout, child.stderr
    steps = [line for line in out.splitlines() if line.startswith("== [")]
    assert len(steps) == 4, out  # fusion, tune, bench, done
    assert "-mcpu=core-avx2" in steps[1], steps[1]  # the OS's flags decide, not the CPU's name
    assert re.search(r"TOTAL\s+\d+ tasks", out), out  # the fusion table's totals
    measured, tasks = map(int, re.search(
        r"8 records; (\d+) of (\d+) tasks have a valid measurement", out).groups())
    # 8 trials: one candidate for each task (7 on core-avx2 with the saturation-free legalization)
    assert tasks >= 7 and measured >= min(tasks, 8) - 1, out
    assert "PyTorch int8" in out and "TVM untuned" in out
    assert re.search(r"done: TVM tuned is [\d.]+ quantization steps from PyTorch \(OK\)", out), out
    assert (work_dir / REPORT_FILE).exists() and (work_dir / CHART_FILE).exists()
    # TVM's C++ warnings went to the work dir's log, with one summary line on stderr.
    assert not TVM_LOG_LINE.search(err), err
    log = work_dir / "logs" / "tvm.log"
    warnings = len(re.findall(r"\.cc:\d+: Warning", log.read_text()))
    assert warnings > 0
    assert f"quantfuse: {warnings} TVM warnings" in err and f"in {log}" in err, err


def test_verbose_shows_tvm_logs_as_they_come(tmp_path):
    args = ["fusion", "--model", "tiny_resnet", "--image-size", "16", "--target",
            "nvidia/nvidia-a100", "--variants", "ours"]
    quiet, verbose = _quantfuse(args), _quantfuse([*args, "--verbose"])
    assert quiet.returncode == verbose.returncode == 0, quiet.stderr[-2000:]
    assert not TVM_LOG_LINE.search(quiet.stderr), quiet.stderr
    assert re.search(r"quantfuse: \d+ TVM warnings?, in \S+tvm\.log", quiet.stderr), quiet.stderr
    assert TVM_LOG_LINE.search(verbose.stderr), verbose.stderr[-2000:]
    assert quiet.stdout.splitlines()[-1] == verbose.stdout.splitlines()[-1]  # the same totals
