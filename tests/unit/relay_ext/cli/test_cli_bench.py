"""quantfuse bench on the shared tuned work dir (tests/conftest.py): table, report, chart, the
load warning; bad input."""

import json
import re

import pytest

from relay_ext import cli
from relay_ext.lowering import targets
from relay_ext.latency import run as latency_bench
from relay_ext.workdir.files import CHART_FILE, REPORT_FILE
from relay_ext.tuning import SUMMARY_FILE
from conftest import AVX2, TINY_32, TUNED_TRIALS
from helpers import one_error_line

MAX_STEPS = 3


def test_a_tune_spreads_its_budget_over_the_tasks(tiny_tuned):
    """16 trials over tiny_resnet's tasks (its int16 convs tuned too, helpers.every_task_designed):
    every task gets a candidate before any gets a second one, so (almost) every task is measured;
    the closing line and the summary say so."""
    work_dir, out = tiny_tuned
    summary = json.loads((work_dir / SUMMARY_FILE).read_text())
    tasks = len(summary["tasks"])
    assert tasks >= 5 and summary["records"] == TUNED_TRIALS < 2 * tasks + 3, summary
    assert summary["tasks_measured"] >= tasks - 2, summary
    assert summary["tasks_measured"] == sum(task["measured"] for task in summary["tasks"])
    left = summary["left_to_default_schedule"]
    assert sorted(left) == sorted(t["name"] for t in summary["tasks"] if not t["measured"])
    closing = f"{summary['tasks_measured']} of {tasks} tasks have a valid measurement"
    assert closing in out, out
    assert (f"{len(left)} left to TVM's default schedule" in out) == bool(left), out


def test_bench_writes_report_and_chart(tiny_tuned, capsys):
    work_dir, _ = tiny_tuned
    assert cli.main(["bench", *TINY_32, "--target", AVX2, "--work-dir", str(work_dir),
                     "--repeats", "3", "--number", "5", "--threads", "1",
                     "--keep-slower-records"]) == 0  # the rule: test_bench_json
    out = capsys.readouterr().out
    for label in ("TVM tuned (ours)", "TVM untuned", "PyTorch int8", "/ TVM tuned", "/ PyTorch"):
        assert label in out, out
    assert re.search(r"PyTorch int8\s+[\d.]+\s+[\d.]+\s+[\d.]+x\s+1\.00x", out), out
    steps = float(re.search(r"max ([\d.]+) output quantization steps", out).group(1))
    assert steps <= MAX_STEPS, out
    report = (work_dir / REPORT_FILE).read_text()
    assert "random" in report and "Machine:" in report and "| TVM untuned |" in report
    assert "Load average before the bench" in report
    chart = work_dir / CHART_FILE
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 1000


def test_bench_on_a_busy_machine_warns_in_the_table_and_the_report(tiny_tuned, capsys,
                                                                    monkeypatch):
    work_dir, _ = tiny_tuned
    monkeypatch.setattr(latency_bench, "load_average", lambda: 7.5)
    assert cli.main(["bench", *TINY_32, "--target", AVX2, "--work-dir", str(work_dir),
                     "--repeats", "1", "--number", "1", "--threads", "2",
                     "--keep-slower-records", "--no-peers"]) == 0
    out = capsys.readouterr().out
    assert "load average was 7.50" in out and "not trustworthy" in out, out
    # --no-peers: neither OpenVINO nor Inductor is tried (tests/test_bench_peers.py has them)
    assert "OpenVINO" not in out and "Inductor" not in out, out
    assert "not trustworthy" in (work_dir / REPORT_FILE).read_text()


def test_bench_json_is_one_object_and_never_slower_than_the_default(tiny_tuned, capsys):
    """--json: stdout is one JSON object (docs/bench.md); the per-task choice compared
    every task that has a record (tiny_resnet's 10, all measured) with TVM's default schedule,
    and report.md says what it chose."""
    work_dir, _ = tiny_tuned
    assert cli.main(["bench", *TINY_32, "--target", AVX2, "--work-dir", str(work_dir),
                     "--repeats", "2", "--number", "2", "--threads", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)  # nothing else on stdout
    assert result["model"] == "tiny_resnet" and result["threads"] == 1
    assert "-mcpu=core-avx2" in result["target"]
    assert "avx2" in result["host_flags"] and set(result["host_flags"]) <= set(
        targets.host_cpu_flags())
    names = [row["configuration"] for row in result["rows"]]
    assert names[:4] == ["TVM tuned (ours)", "TVM no-search (ours)", "TVM untuned",
                         "PyTorch int8"], names
    for row in result["rows"]:
        if row["median_ms"] is None:  # a peer that could not run here says why
            assert row["reason"], row
            continue
        assert 0 < row["min_ms"] <= row["median_ms"] <= row["max_ms"], row
    assert 0 <= result["max_steps"] <= MAX_STEPS
    summary = json.loads((work_dir / SUMMARY_FILE).read_text())
    compared = result["tasks_vs_default"]
    # every task with a tuned record, and the others with their no-search schedule
    tuned = [task for task in compared if task["record_source"] == "tuned"]
    if result["whole_model"]["uses_no_search"]:  # the no-search build's choices are reported
        assert tuned == [], compared
    else:
        assert len(tuned) == summary["tasks_measured"], compared
    assert all(task["record_source"] == "no-search" for task in compared if task not in tuned)
    for task in compared:
        assert task["record_ms"] > 0 and task["default_ms"] > 0
        best = min(task["record_ms"], task["no_search_ms"] or task["record_ms"])
        assert task["uses_default"] == (best > 1.05 * task["default_ms"]), task
    report = (work_dir / REPORT_FILE).read_text()
    used = sum(task["uses_default"] for task in compared)
    assert f"never slower than TVM's default: {used} of {len(compared)} tasks" in report


def test_bench_without_database_is_one_line(tmp_path, capsys):
    assert cli.main(["bench", *TINY_32, "--target", AVX2, "--work-dir", str(tmp_path)]) == 2
    one_error_line(capsys, "no tuning database", "quantfuse tune")
    assert cli.main(["bench", *TINY_32, "--target", AVX2,
                     "--work-dir", str(tmp_path / "none")]) == 2
    one_error_line(capsys, "does not exist")


def test_bench_refuses_another_model_than_tuned(tiny_tuned, capsys):
    work_dir, _ = tiny_tuned
    assert cli.main(["bench", "--model", "tiny_resnet", "--image-size", "16", "--target", AVX2,
                     "--work-dir", str(work_dir)]) == 2
    one_error_line(capsys, "image_size 32")


@pytest.mark.parametrize("command", ["bench", "demo"])
def test_help(command, capsys):
    assert cli.main([command, "--help"]) == 0
    assert f"usage: quantfuse {command}" in capsys.readouterr().out


def test_the_cli_prints_what_the_library_bench_returns(tiny_tuned, capsys, monkeypatch):
    """``quantfuse bench`` is relay_ext.bench and printing: the CLI reaches the library's one
    bench function with what it checked, and prints the result it returns (--json: to_dict)."""
    from relay_ext.latency import run as bench_run
    from relay_ext.latency.result import TUNED, UNTUNED, BenchResult
    from relay_ext.measure.timing import Timing

    work_dir, _ = tiny_tuned
    seen = {}

    def fake_bench(model, **options):
        seen.update(options, model=model)
        return BenchResult(
            model=model.name, input_shape=tuple(model.input_shape), target=str(options["target"]),
            variant=options["variant"], threads=1, repeats=1, number=1,
            timings={TUNED: Timing([0.001]), UNTUNED: Timing([0.002]),
                     "PyTorch int8": Timing([0.004])},
            reference="PyTorch int8", max_steps=1.0, mean_steps=0.1, fraction_equal=0.9,
            untuned_max_steps=2.0, machine="test", date="today", notes=["(a note)"])

    monkeypatch.setattr(bench_run, "bench", fake_bench)
    assert cli.main(["bench", *TINY_32, "--target", AVX2, "--work-dir", str(work_dir),
                     "--threads", "1", "--no-peers", "--keep-slower-records", "--json"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["rows"][0]["configuration"] == "TVM tuned (ours)" and result["max_steps"] == 1.0
    assert "(a note)" in captured.err
    assert seen["model"].name == "tiny_resnet" and seen["work_dir"] == work_dir
    assert seen["records"] is not None and seen["threads"] == 1
    assert seen["peers"] is False and seen["choose_per_task"] is False
