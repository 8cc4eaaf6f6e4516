"""``quantfuse bench`` without a work dir (the no-search build beside TVM's untuned one) and with
one (the per-task choice's timings kept there: a second bench times no task again)."""

import json

import pytest

from relay_ext import cli
from relay_ext.schedules import task_choice
from relay_ext.workdir.files import TASK_TIMINGS_FILE, REPORT_FILE

from conftest import AVX2, TINY_32
from helpers import cannot_run_here

MAX_STEPS = 3  # output quantization steps from PyTorch int8


@pytest.fixture
def avx2_here():
    if cannot_run_here(AVX2):
        pytest.skip(cannot_run_here(AVX2))


CHEAP = ["--target", AVX2, "--repeats", "2", "--number", "1", "--threads", "1", "--no-peers"]


def test_bench_without_a_work_dir_times_the_no_search_and_the_untuned_build(avx2_here, capsys):
    """Both TVM rows in the table and in --json, each within 3 steps of PyTorch int8; the ratios
    and the summary use the no-search row; no report is written."""
    assert cli.main(["bench", *TINY_32, *CHEAP, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    names = [row["configuration"] for row in result["rows"]]
    assert names[:3] == ["TVM no-search (ours)", "TVM untuned", "PyTorch int8"], names
    assert result["main"] == "TVM no-search (ours)"
    assert 0 <= result["max_steps"] <= MAX_STEPS and 0 <= result["untuned_max_steps"] <= MAX_STEPS
    rows = {row["configuration"]: row for row in result["rows"]}
    best = result["fastest_peer"]
    assert best["tvm_tuned_ratio"] == (rows["TVM no-search (ours)"]["median_ms"]
                                       / best["median_ms"])

    assert cli.main(["bench", *TINY_32, *CHEAP]) == 0
    out = capsys.readouterr().out
    assert "TVM no-search (ours) " in out and "TVM untuned " in out, out
    assert "TVM tuned" not in out, out
    assert "/ TVM no-search" in out and "TVM no-search is " in out, out
    assert "TVM no-search vs PyTorch int8: max" in out, out
    assert "no report.md" in out, out


def test_a_second_bench_of_a_work_dir_times_no_task_again(tiny_tuned, capsys, monkeypatch):
    """The per-task choice's timings are kept in the work dir: the second bench, and an export
    after it, call ``time_task`` for no task and make the same choices."""
    work_dir, _ = tiny_tuned
    calls = []  # the tasks timed, inside the model or alone
    timed, profiled = task_choice.time_task, task_choice.measure_in_model
    monkeypatch.setattr(task_choice, "time_task",
                        lambda *args, **kwargs: calls.append(args[0]) or timed(*args, **kwargs))
    monkeypatch.setattr(task_choice, "measure_in_model",
                        lambda plans, *args: calls.extend(plans) or profiled(plans, *args))
    command = ["bench", *TINY_32, *CHEAP, "--work-dir", str(work_dir), "--json"]
    assert cli.main(command) == 0
    first = json.loads(capsys.readouterr().out)
    assert calls and (work_dir / TASK_TIMINGS_FILE).exists()
    # every task with a tuned record or a no-search schedule was timed (the tuned choices, or
    # the no-search build's where the whole-model check replaced the tuned build)
    assert len(calls) >= len(first["tasks_vs_default"]) > 0
    whole = first["whole_model"]
    assert whole["tuned_ms"] > 0 and whole["no_search_ms"] > 0
    assert whole["uses_no_search"] == (whole["ratio"] > 1.0)
    if whole["uses_no_search"]:
        assert all(t["record_source"] == "no-search" for t in first["tasks_vs_default"])
    # with a work dir: the tuned row, the no-search row beside it, then TVM's default
    names = [row["configuration"] for row in first["rows"]]
    assert names[:4] == ["TVM tuned (ours)", "TVM no-search (ours)", "TVM untuned",
                         "PyTorch int8"], names
    assert first["main"] == "TVM tuned (ours)"
    assert 0 <= first["max_steps"] <= MAX_STEPS and 0 <= first["no_search_max_steps"] <= MAX_STEPS
    # every task of the work dir's model is compared (a task without a tuned record with its
    # no-search schedule), and each comparison's choice is the fastest of what it timed
    for task in first["tasks_vs_default"]:
        timed = {"tuned" if task["record_source"] == "tuned" else "no-search": task["record_ms"],
                 "default": task["default_ms"] * (1 + task_choice.MARGIN)}
        if task["no_search_ms"] is not None:
            timed["no-search"] = min(timed.get("no-search", 1e9), task["no_search_ms"])
        assert task["choice"] == min(timed, key=timed.get) or (
            task["choice"] == "tuned" and timed.get("no-search") == timed.get("tuned")), task
    calls.clear()
    assert cli.main(command) == 0
    second = json.loads(capsys.readouterr().out)
    assert calls == []
    assert second["tasks_vs_default"] == first["tasks_vs_default"]
    assert second["max_steps"] == first["max_steps"]
    assert [row["configuration"] for row in second["rows"]] == [
        row["configuration"] for row in first["rows"]]
    assert (work_dir / REPORT_FILE).exists()

    # export builds what bench timed, from the same cache (same threads: --threads 1)
    library = work_dir / "tiny.so"
    assert cli.main(["export", *TINY_32, "--target", AVX2, "--work-dir", str(work_dir),
                     "--threads", "1", "--out", str(library)]) == 0
    assert calls == [] and library.exists()
    manifest = json.loads(library.with_suffix(".json").read_text())
    assert sorted(manifest["records"]["defaults"]) == sorted(
        task["task"] for task in first["tasks_vs_default"] if task["uses_default"])
    assert sorted(manifest["records"]["no_search"]) == sorted(
        task["task"] for task in first["tasks_vs_default"] if task["choice"] == "no-search")
