"""quantfuse demo, end to end on a small budget: fusion table, tune, accuracy check, bench."""

import re

from relay_ext import cli
from relay_ext.latency_bench import CHART_FILE, REPORT_FILE


def test_demo_runs_the_whole_job(tmp_path, capsys):
    work_dir = tmp_path / "demo"
    assert cli.main(["demo", "--work-dir", str(work_dir), "--trials", "8",
                     "--image-size", "16"]) == 0
    out = capsys.readouterr().out
    steps = [line for line in out.splitlines() if line.startswith("== [")]
    assert len(steps) == 4, out  # fusion, tune, bench, done
    assert re.search(r"TOTAL\s+\d+ tasks", out), out  # the fusion table's totals
    assert "8 records" in out
    assert "PyTorch int8" in out and "TVM untuned" in out
    assert re.search(r"done: TVM tuned is [\d.]+ quantization steps from PyTorch \(OK\)", out), out
    assert (work_dir / REPORT_FILE).exists() and (work_dir / CHART_FILE).exists()
