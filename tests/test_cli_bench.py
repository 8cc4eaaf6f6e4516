"""quantfuse bench: TVM tuned vs untuned vs PyTorch on a tiny tuned work dir; bad input."""

import re

import pytest

from relay_ext import cli
from relay_ext.latency_bench import CHART_FILE, REPORT_FILE
from helpers import small_search, one_error_line

LLVM = "llvm -num-cores 2"
TINY = ["--model", "tiny_resnet", "--image-size", "16"]
MAX_STEPS = 3




@pytest.fixture(scope="module")
def tuned_dir(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("bench")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "_search_strategy", small_search)
        assert cli.main(["tune", *TINY, "--target", LLVM, "--work-dir", str(work_dir),
                         "--trials", "8", "--seed", "0"]) == 0
    return work_dir


def test_bench_writes_report_and_chart(tuned_dir, capsys):
    assert cli.main(["bench", *TINY, "--target", LLVM, "--work-dir", str(tuned_dir),
                     "--repeats", "3", "--number", "5", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    for label in ("TVM tuned (ours)", "TVM untuned", "PyTorch int8", "/ TVM tuned", "/ PyTorch"):
        assert label in out, out
    assert re.search(r"PyTorch int8\s+[\d.]+\s+[\d.]+\s+[\d.]+x\s+1\.00x", out), out
    steps = float(re.search(r"max ([\d.]+) output quantization steps", out).group(1))
    assert steps <= MAX_STEPS, out
    report = (tuned_dir / REPORT_FILE).read_text()
    assert "random" in report and "Machine:" in report and "| TVM untuned |" in report
    chart = tuned_dir / CHART_FILE
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 1000


def test_bench_without_database_is_one_line(tmp_path, capsys):
    assert cli.main(["bench", *TINY, "--target", LLVM, "--work-dir", str(tmp_path)]) == 2
    one_error_line(capsys, "no tuning database", "quantfuse tune")
    assert cli.main(["bench", *TINY, "--target", LLVM, "--work-dir", str(tmp_path / "none")]) == 2
    one_error_line(capsys, "does not exist")


def test_bench_refuses_another_model_than_tuned(tuned_dir, capsys):
    assert cli.main(["bench", "--model", "tiny_resnet", "--image-size", "32", "--target", LLVM,
                     "--work-dir", str(tuned_dir)]) == 2
    one_error_line(capsys, "image_size 16")


@pytest.mark.parametrize("command", ["bench", "demo"])
def test_help(command, capsys):
    assert cli.main([command, "--help"]) == 0
    assert f"usage: quantfuse {command}" in capsys.readouterr().out
