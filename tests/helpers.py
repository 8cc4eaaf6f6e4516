"""Helpers shared by the tests that tune, drive the CLI or check a rule's design."""

import contextlib
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import tvm
from tvm import meta_schedule as ms
from tvm import te, tir


def only_design_after_postprocs(workload: tvm.IRModule, target: tvm.target.Target) -> tir.Schedule:
    """The one design space ``ours`` generates for ``workload`` (asserted to be one), with every
    postproc applied (each asserted to accept it), as the search would build it."""
    import meta_rules  # pylint: disable=import-outside-toplevel

    context = ms.TuneContext(mod=workload, target=target,
                             space_generator=meta_rules.space_generator(target, "ours"),
                             rand_state=1)
    spaces = context.generate_design_space()
    assert len(spaces) == 1
    sch = spaces[0].copy()
    for postproc in context.space_generator.postprocs:
        assert postproc.apply(sch), str(postproc)
    return sch


def assert_only_cpu_keys_change(workload: tvm.IRModule, rule_name: str) -> None:
    """A custom rule registered for every key: for GPU keys it leaves ``T_layout_trans`` as
    ``"None"`` did, for ``cpu`` it schedules it."""
    sch = tir.Schedule(workload)
    block = sch.get_block("T_layout_trans")
    before = sch.mod.script()
    for key in ("cuda", "gpu", "rocm"):
        result = tvm.get_global_func(f"meta_schedule.{key}.{rule_name}")(sch, block)
        assert len(result) == 1 and result[0].mod.script() == before
    cpu = tvm.get_global_func(f"meta_schedule.cpu.{rule_name}")(sch, block)
    assert cpu[0].mod.script() != before


def small_search() -> ms.search_strategy.EvolutionarySearch:
    """An evolutionary search small enough for a tiny tuning budget in a test."""
    return ms.search_strategy.EvolutionarySearch(
        population_size=16, init_measured_ratio=0.5, init_min_unmeasured=4,
        genetic_num_iters=1, genetic_max_fail_count=2)


def one_error_line(capsys, *fragments) -> str:
    """The CLI wrote exactly one error line to stderr, no traceback, containing ``fragments``."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("quantfuse: error: ") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def fusion_tune_and_bench(model_args, reference: str, work_dir, capsys, monkeypatch,
                          trials: int = 4, max_steps: float = 3,
                          compared_with: Optional[str] = None, fusion: bool = True) -> None:
    """A model file through ``quantfuse fusion``, a ``tune`` of ``trials`` trials and ``bench``:
    exit 0 each; bench shows ``reference`` (the model's own runtime) in its table, report.md and
    chart, and the tuned build is within ``max_steps`` output quantization steps of what the model
    is checked against (``compared_with``, default ``reference``), on bench's input and on more.
    ``fusion=False`` leaves the fusion step out (a test that runs it on another target)."""
    import re

    from relay_ext import cli
    from relay_ext.cli import commands as cli_commands
    from relay_ext.cli.inputs import load_model
    from relay_ext.cli.parser import build_parser
    from relay_ext.build import compile
    from relay_ext.workdir.files import CHART_FILE, REPORT_FILE
    from quantized_test_nets import worst_steps

    tolerance = 1e-3  # whole steps, up to float rounding
    if fusion:
        assert cli.main(["fusion", *model_args, "--variants", "ours"]) == 0
        assert re.search(r"TOTAL\s+\d+ tasks", capsys.readouterr().out)

    monkeypatch.setattr(cli_commands, "search_strategy", small_search)
    assert cli.main(["tune", *model_args, "--work-dir", str(work_dir), "--trials", str(trials),
                     "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"{trials} records in .*tasks have a valid measurement", out), out

    # --keep-slower-records: the per-task choice's second build of each task is tested in
    # test_cli_bench.py and test_task_choice.py, not needed here; --no-peers: OpenVINO and
    # Inductor (a compile of the model) are tested in test_bench_peers.py
    assert cli.main(["bench", *model_args, "--work-dir", str(work_dir), "--repeats", "2",
                     "--number", "2", "--threads", "1", "--keep-slower-records",
                     "--no-peers"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^{reference}\s+[\d.]+", out, re.M), out  # the reference's own row
    compared_with = compared_with or reference
    steps = float(re.search(rf"TVM tuned vs {re.escape(compared_with)}: max ([\d.]+) output quantization",
                            out)[1])
    assert steps <= max_steps + tolerance, out
    assert f"| {reference} |" in (work_dir / REPORT_FILE).read_text()
    assert (work_dir / CHART_FILE).stat().st_size > 1000

    # The tuned build agrees with the reference on more inputs than bench's one.
    loaded = load_model(build_parser().parse_args(["fusion", *model_args]))
    target = model_args[model_args.index("--target") + 1]
    lib = compile(loaded, target=target, records=work_dir, choose_per_task=False).lib
    assert worst_steps(loaded, lib) <= max_steps + tolerance


def small_database(work_dir: Path, records: int) -> None:
    """A JSON database of ``records`` records of one small workload, made without tuning."""
    a = te.placeholder((8, 8), "float32", name="a")
    b = te.compute((8, 8), lambda i, j: a[i, j] * 2.0, name="b")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b])})
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    workload = database.commit_workload(mod)
    trace = tir.Schedule(mod).trace
    for i in range(records):
        database.commit_tuning_record(ms.database.TuningRecord(
            trace, workload, [1e-3 * (i + 1)], tvm.target.Target("llvm"),
            ms.arg_info.ArgInfo.from_prim_func(mod["main"])))


# The VNNI tests' target; what the OS enables decides whether this host runs it, not the name LLVM
# gives the CPU (relay_ext.lowering.targets).
VNNI = "llvm -mcpu=cascadelake -num-cores 2"
# AVX-512 without VNNI: int8 convs on int16 pairs, 16 lanes.
AVX512_NO_VNNI = "llvm -mcpu=skylake-avx512 -num-cores 2"


def exact_qnn_conv(data, weights, zx, zw, stride: int = 1, pad: int = 0, dilation: int = 1):
    """sum((x - zx) * (w - zw)) over the window, the input padded with zx: what qnn.conv2d means
    (``data`` NCHW, ``weights`` OIHW, ``zw`` a scalar or one per output channel), in int64."""
    padded = np.pad(data.astype(np.int64) - zx, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kernel = weights.astype(np.int64) - np.reshape(zw, (-1, 1, 1, 1))
    k = weights.shape[2]
    span = dilation * (k - 1) + 1
    out_h = (data.shape[2] + 2 * pad - span) // stride + 1
    out_w = (data.shape[3] + 2 * pad - span) // stride + 1
    out = np.zeros((data.shape[0], weights.shape[0], out_h, out_w), np.int64)
    for i in range(k):
        for j in range(k):
            top, left = i * dilation, j * dilation
            window = padded[:, :, top:top + stride * out_h:stride, left:left + stride * out_w:stride]
            out += np.einsum("nchw,oc->nohw", window, kernel[:, :, i, j])
    return out


def cannot_run_here(target: str) -> str:
    """Why this host cannot run code built for ``target``: what its OS does not enable, or that
    its CPU flags are unreadable (``targets.missing_here``, which vouches for nothing it cannot
    read); '' where it can. The one check of the tests that run built code."""
    from relay_ext.lowering import targets

    missing = targets.missing_here(target)
    return f"this host cannot run {target}: its OS does not enable {', '.join(missing)}" if missing else ""


def needs_host_for(target: str) -> pytest.MarkDecorator:
    """A skip mark for tests that run code built for ``target``, with :func:`cannot_run_here`'s
    reason."""
    reason = cannot_run_here(target)
    return pytest.mark.skipif(bool(reason), reason=reason or f"runs code built for {target}")


def host_has_vnni() -> bool:
    return not cannot_run_here(VNNI)


def run_child(code: str) -> str:
    """Run ``code`` in a fresh interpreter from the checkout (VNNI code that aborts or dies with
    SIGILL takes only the child); its stdout, after asserting it exited 0."""
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                           text=True, timeout=900, check=False,
                           cwd=Path(__file__).resolve().parents[1])
    assert child.returncode == 0, f"child exited {child.returncode}:\n{child.stderr[-3000:]}"
    return child.stdout


def conv_block(sch: tir.Schedule) -> tir.schedule.BlockRV:
    """The conv block of a conv task's schedule (a padded conv's zero pad, inside its task on
    x86 targets without VNNI, comes before it)."""
    (conv,) = [block for block in sch.get_child_blocks(sch.get_block("root"))
               if sch.get(block).name_hint.startswith("conv2d")]
    return conv


def slow_conv_database(model, target):
    """(tasks, task, database): ``model``'s tasks on ``target`` (normalised), one of its convs
    (the same every run), and a database whose only record is a deliberately slow schedule of it
    (the loops in reverse order: reduction outermost, no vectorization, no parallel loop),
    claiming 1 ns."""
    from relay_ext.latency.layer_pairing import conv_signature
    from relay_ext.lowering.tasks import extract_tasks

    tasks = extract_tasks(model.mod, model.params, target)
    # a conv of the network, not its classifier run as a 1x1 conv (targets without VNNI)
    task = max((t for t in tasks if conv_signature(t) is not None), key=lambda t: t.task_name)
    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(task.dispatched[0])
    slow = tir.Schedule(task.dispatched[0])
    conv = conv_block(slow)
    slow.reorder(*reversed(slow.get_loops(conv)))
    (func,) = task.dispatched[0].functions.values()
    database.commit_tuning_record(ms.database.TuningRecord(
        slow.trace, workload, [1e-9], target, ms.arg_info.ArgInfo.from_prim_func(func)))
    return tasks, task, database


@contextlib.contextmanager
def every_task_designed():
    """MetaSchedule designs and tunes every task, the int16 convs of x86 targets without VNNI too,
    which otherwise keep TOPI's schedule (relay_ext/schedules/topi_only.py, tested in
    test_topi_only.py): the tests of the tuning machinery run on tiny_resnet's AVX2 convs, AVX2
    being the target every host runs."""
    from relay_ext.schedules import rule_designs
    from relay_ext.tuning import contexts

    with pytest.MonkeyPatch.context() as patch:
        for module in (rule_designs, contexts):
            patch.setattr(module, "topi_only", lambda workload: None)
        yield
