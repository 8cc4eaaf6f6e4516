"""Resuming a tune measures only new candidates, tasks with the fewest records first; progress is
reported per batch; Ctrl-C keeps a loadable database that the same command resumes."""

import dataclasses
import io
import json
import os
import signal
import threading
import time

import tvm
from tvm import meta_schedule as ms

from relay_ext import cli
from relay_ext.cli.progress_bar import ProgressPrinter
from relay_ext.cli import commands as cli_commands
from relay_ext.workdir.files import RECORD_FILE
from relay_ext.workdir.records import records_by_workload, trace_key, workload_hash
from relay_ext.tuning import SUMMARY_FILE, extract_tasks, tune
from relay_ext.tuning.progress import ProgressSnapshot, describe
from conftest import needs_c_compiler
from helpers import small_search

LLVM = "llvm -num-cores 2"
TINY = ["--model", "tiny_resnet", "--image-size", "16"]


def _records_per_task(database, tasks):
    groups = records_by_workload(database)
    return {t.task_name: groups.get(workload_hash(t.dispatched[0]), []) for t in tasks}


@needs_c_compiler
def test_resume_measures_new_candidates_and_least_tuned_tasks_first(tiny, tmp_path):
    tasks = extract_tasks(tiny.mod, tiny.params, LLVM, "ours")
    assert len(tasks) == 8
    first_snapshots, second_snapshots = [], []

    # 5 trials for 8 tasks: one candidate each for the 5 tasks that cost the model most.
    # The search's own order is under test: no rule designs measured first.
    database = tune(tiny.mod, tiny.params, LLVM, tmp_path, strategy=small_search(),
                    progress=first_snapshots.append, max_trials=5, num_trials_per_iter=4, seed=0,
                    measure_rule_designs_first=False)
    assert len(database) == 5  # the budget is exact: MetaSchedule alone overshoots by a batch
    after_first = {name: len(r) for name, r in _records_per_task(database, tasks).items()}
    untouched = {name for name, n in after_first.items() if n == 0}
    assert sorted(after_first.values()) == [0, 0, 0, 1, 1, 1, 1, 1], after_first
    cost = {t.task_name: t.weight * tvm.tir.analysis.estimate_tir_flops(t.dispatched[0])
            for t in tasks}
    assert max(cost[name] for name in untouched) <= min(
        cost[name] for name in after_first if name not in untouched), cost

    database = tune(tiny.mod, tiny.params, LLVM, tmp_path, strategy=small_search(),
                    progress=second_snapshots.append, max_trials=10, num_trials_per_iter=4,
                    seed=0, measure_rule_designs_first=False)
    assert len(database) == 15
    per_task = _records_per_task(database, tasks)
    for name, records in per_task.items():
        keys = [trace_key(r.trace) for r in records]
        assert len(keys) == len(set(keys)), f"{name}: a candidate was measured twice"
    # The second run started with the tasks the first one never reached.
    first_picks = [s.last_task for s in second_snapshots[:len(untouched)]]
    assert set(first_picks) == untouched, (first_picks, untouched)
    assert all(len(per_task[name]) > 0 for name in untouched)

    # Progress: records already there count, one snapshot per batch, the total is the work dir's.
    assert first_snapshots[-1].trials_done == 5 and first_snapshots[-1].trials_total == 5
    assert second_snapshots[0].trials_total == 15 and second_snapshots[-1].trials_done == 15
    done = [s.trials_done for s in first_snapshots + second_snapshots]
    assert done == sorted(done) and len(set(done)) == len(done)
    final = second_snapshots[-1]
    assert final.tasks_measured == final.tasks_total == len(tasks)
    assert final.estimated_latency_s is not None and 0 < final.estimated_latency_s < 1
    assert "trials 15/15" in describe(final) and " ms" in describe(final)
    assert first_snapshots[0].estimated_latency_s is None  # not every task measured yet


def _interrupt_when_records(work_dir, count, timeout_s=600):
    """A thread that sends this process SIGINT once the work dir holds ``count`` records."""
    def watch():
        path = work_dir / RECORD_FILE
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if path.exists() and path.read_text().count("\n") >= count:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.2)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@needs_c_compiler
def test_ctrl_c_keeps_a_loadable_database_that_the_same_command_resumes(tmp_path, capsys,
                                                                       monkeypatch):
    monkeypatch.setattr(cli_commands, "search_strategy", small_search)
    work_dir = tmp_path / "work"
    command = ["tune", *TINY, "--target", LLVM, "--work-dir", str(work_dir), "--seed", "1"]
    handler_before = signal.getsignal(signal.SIGINT)
    watcher = _interrupt_when_records(work_dir, 1)
    # 40 trials over 8 tasks: the first batches are small (5), so the first record comes early.
    assert cli.main([*command, "--trials", "40"]) == cli.EXIT_INTERRUPTED
    watcher.join(timeout=5)
    err = capsys.readouterr().err
    assert "run the same command again to resume" in err and "Traceback" not in err
    kept = len(ms.database.JSONDatabase(work_dir=str(work_dir)))
    assert 1 <= kept < 40
    assert kept == (work_dir / RECORD_FILE).read_text().count("\n")  # no half-written line
    summary = json.loads((work_dir / SUMMARY_FILE).read_text())
    assert summary["interrupted"] is True and summary["records"] == kept
    assert signal.getsignal(signal.SIGINT) == handler_before  # tune's own handler is gone again

    assert cli.main([*command, "--trials", str(kept + 3)]) == 0
    out = capsys.readouterr().out
    assert f"resuming: {kept} records" in out
    assert len(ms.database.JSONDatabase(work_dir=str(work_dir))) == kept + 3


def test_progress_printer_redraws_on_a_terminal_and_prints_lines_otherwise():
    snapshot = ProgressSnapshot(trials_done=6, trials_total=24, tasks_measured=2, tasks_total=8,
                                estimated_latency_s=None, last_task="t", last_batch_failed=0,
                                last_batch_size=4)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    plain, terminal = io.StringIO(), Terminal()
    for stream in (plain, terminal):
        printer = ProgressPrinter(stream)
        printer.show(snapshot)
        printer.show(dataclasses.replace(snapshot, trials_done=24, tasks_measured=8,
                                         estimated_latency_s=0.00125))
        printer.close()
    assert plain.getvalue().splitlines() == [
        "[######..................] trials 6/24 | tasks 2/8 measured | est. latency -",
        "[########################] trials 24/24 | tasks 8/8 measured | est. latency 1.250 ms"]
    assert terminal.getvalue().count("\r") == 2 and terminal.getvalue().endswith("\n")
    assert terminal.getvalue().count("\n") == 1

