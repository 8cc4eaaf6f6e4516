"""Tuning a user can wait for: a task whose design space is exhausted ends and leaves its
trials to the others; ``--minutes`` stops cleanly, exits 0 and the same command resumes; the
progress line shows the time elapsed and left."""

import json
import re

import pytest
import tvm
from tvm import relay
from tvm import meta_schedule as ms

import meta_rules
from relay_ext import cli
from relay_ext.cli import commands as cli_commands
from relay_ext.tuning import SUMMARY_FILE, extract_tasks, tune
from relay_ext.tuning import budget as budget_module
from relay_ext.tuning.progress import ProgressSnapshot, TuningProgress, describe, progress_bar
from relay_ext.tuning.strategy import SIZED_DEFAULTS, default_search
from relay_ext.tuning.budget import TrialBudget
from relay_ext.tuning.skip_measured_search import SkipMeasuredSearch
from relay_ext.workdir.records import records_by_workload, trace_key, workload_hash
from relay_ext.workdir.files import LOG_DIR
from conftest import needs_c_compiler
from helpers import one_error_line, small_search

LLVM = "llvm -num-cores 2"
TINY = ["--model", "tiny_resnet", "--image-size", "16"]


def _small_and_large_task_module() -> tvm.IRModule:
    """Two tasks: an elementwise add + relu (a design space of a handful of candidates) and a
    dense layer (thousands)."""
    x = relay.var("x", shape=(1, 64), dtype="float32")
    w = relay.var("w", shape=(32, 64), dtype="float32")
    hidden = relay.nn.relu(x + relay.const(1.0))
    out = relay.nn.dense(hidden, w)
    return tvm.IRModule.from_expr(relay.Function([x, w], out))


def _tasks(mod):
    tasks = extract_tasks(mod, None, LLVM, "ours")
    assert len(tasks) == 2
    return (next(t for t in tasks if "dense" not in t.task_name),
            next(t for t in tasks if "dense" in t.task_name))


def _context(task, strategy) -> ms.TuneContext:
    context = ms.TuneContext(mod=task.dispatched[0], target=tvm.target.Target(LLVM),
                             space_generator=meta_rules.space_generator(LLVM, "ours"),
                             search_strategy=strategy, task_name=task.task_name, rand_state=0,
                             num_threads=1)
    return context


def test_an_exhausted_search_ends_without_another_round_and_retires_from_the_budget():
    small, _ = _tasks(_small_and_large_task_module())
    budget = TrialBudget(16, tasks=2)
    search = SkipMeasuredSearch(small_search(), budget)
    context = _context(small, search)
    spaces = context.generate_design_space()
    context.pre_tuning(max_trials=16, num_trials_per_iter=4, design_spaces=spaces,
                       database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    first = search.generate_measure_candidates()
    assert first is not None and 1 <= len(first) < 4  # the add + relu has a handful at most
    search.notify_runner_results(first, [ms.runner.RunnerResult([1e-6], None) for _ in first])
    assert search.ended is None and budget.tasks == 2
    # The search came back short with a population 4x the batch: the space is used up, so the
    # task ends at its next call, without another round of sampling a population.
    assert search.generate_measure_candidates() is None
    assert "exhausted" in search.ended and search.rounds == 1
    assert budget.tasks == 1 and budget.ended_tasks == [(small.task_name, search.ended)]
    assert search.generate_measure_candidates() is None and search.rounds == 1
    context.post_tuning()


class _CountingSearch:
    """Wraps a search strategy and counts the rounds it is asked for."""

    def __init__(self, inner):
        self.inner, self.rounds = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate_measure_candidates(self):
        self.rounds += 1
        return self.inner.generate_measure_candidates()


def test_under_a_time_budget_a_new_tasks_first_batch_is_drawn_at_random_not_searched():
    _, large = _tasks(_small_and_large_task_module())
    budget = TrialBudget(100, tasks=2, first_batch_cap=2)
    inner = _CountingSearch(small_search())
    search = SkipMeasuredSearch(inner, budget)
    context = _context(large, search)
    spaces = context.generate_design_space()
    context.pre_tuning(max_trials=100, num_trials_per_iter=8, design_spaces=spaces,
                       database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    first = search.generate_measure_candidates()
    # Two candidates (the cap), valid schedules of the dense, and no round of the inner search.
    assert first is not None and len(first) == 2 and inner.rounds == 0
    assert search.random_first_batch and budget.left == 98
    assert all(c.sch.mod["main"].body is not None for c in first)
    search.notify_runner_results(first, [ms.runner.RunnerResult([1e-6], None) for _ in first])
    # From the second batch on, the inner search proposes (and never the same trace again).
    second = search.generate_measure_candidates()
    assert inner.rounds == 1 and second
    keys = {trace_key(c.sch.trace) for c in first}
    assert not keys & {trace_key(c.sch.trace) for c in second}
    context.post_tuning()

    # Without a time budget (no first-batch cap) the inner search makes the first batch too.
    inner = _CountingSearch(small_search())
    search = SkipMeasuredSearch(inner, TrialBudget(100, tasks=2))
    context = _context(large, search)
    context.pre_tuning(max_trials=100, num_trials_per_iter=8, design_spaces=spaces,
                       database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    assert search.generate_measure_candidates() and inner.rounds == 1
    assert not search.random_first_batch
    context.post_tuning()


@needs_c_compiler
def test_an_exhausted_task_ends_and_its_trials_go_to_the_other_task(tmp_path):
    mod = _small_and_large_task_module()
    small, large = _tasks(mod)
    # The work dir already holds the add + relu's candidates (as if measured by an earlier tune).
    search = SkipMeasuredSearch(small_search())
    context = _context(small, search)
    spaces = context.generate_design_space()
    context.pre_tuning(max_trials=16, num_trials_per_iter=16, design_spaces=spaces,
                       database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    candidates = search.generate_measure_candidates()
    context.post_tuning()
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    workload = database.commit_workload(small.dispatched[0])
    for candidate in candidates:
        database.commit_tuning_record(ms.database.TuningRecord(
            candidate.sch.trace, workload, [1e-6], tvm.target.Target(LLVM),
            ms.arg_info.ArgInfo.from_prim_func(small.dispatched[0]["main"])))
    before = len(candidates)

    trials = 3
    database = tune(mod, None, LLVM, tmp_path, max_trials=trials, num_trials_per_iter=4, seed=0,
                    strategy=small_search())
    summary = json.loads((tmp_path / SUMMARY_FILE).read_text())
    ended = {e["task"]: e["why"] for e in summary["ended_early"]}
    assert "exhausted" in ended.get(small.task_name, ""), summary
    assert large.task_name not in ended, summary
    groups = records_by_workload(database)
    assert len(groups.get(workload_hash(small.dispatched[0]), [])) == before
    # The whole budget was measured, on the task that could use it.
    assert len(groups.get(workload_hash(large.dispatched[0]), [])) == trials
    assert summary["records"] == before + trials
    # The exhausted task ran one round of the search (the one whose candidates were all known).
    log = next((tmp_path / LOG_DIR).glob(f"task_*_{small.task_name}*.log")).read_text()
    assert log.count("Generating candidates") == 1, log


def test_trial_budget_retire_and_deadline():
    budget = TrialBudget(24, tasks=3)
    assert budget.share(first_batch=True) == 8
    budget.retire("pad", "design space exhausted")
    assert budget.share(first_batch=True) == 12 and budget.ended_tasks == [
        ("pad", "design space exhausted")]
    budget.first_batch_cap = 2
    assert budget.take(16, first_batch=True) == 2 and budget.take(16) == 11
    assert not budget.out_of_time()  # no deadline
    budget.deadline = 0.0  # long past
    assert budget.out_of_time() and budget.time_up and budget.left == 0
    assert budget.take(4) == 0
    # After the deadline a never-measured task gets one candidate, until late_until.
    assert budget.left_at_deadline == 11 and budget.late_first_batch_allowed()
    assert budget.take_late_first_batch() == 1 and budget.late_first_batches == 1
    budget.late_until = 0.0  # long past too
    assert not budget.late_first_batch_allowed() and budget.take_late_first_batch() == 0


def test_a_tunes_budget_from_its_trials_and_minutes():
    trials_only = TrialBudget.for_tune(40, None, started=100.0)
    assert (trials_only.total, trials_only.deadline, trials_only.first_batch_cap) == (40, None, None)
    trials_only.spend(5)  # the rule designs measured before the search
    assert (trials_only.left, trials_only.total) == (35, 35)
    timed = TrialBudget.for_tune(None, 3, started=100.0)
    assert timed.total == budget_module.NO_TRIAL_LIMIT
    assert timed.deadline == 100.0 + 180.0
    assert timed.late_until == timed.deadline + budget_module.LATE_FIRST_BATCHES_FRACTION * 180.0
    assert timed.first_batch_cap == budget_module.FIRST_BATCH_UNDER_TIME_BUDGET


@needs_c_compiler
def test_minutes_stops_cleanly_exits_0_and_the_same_command_resumes(tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.setattr(cli_commands, "search_strategy", small_search)
    # 0.6 s: spent before the first batch (the model load and the design spaces take longer), so
    # each of the 8 tasks gets the one candidate a never-measured task gets after the deadline
    # (for as long as the first round takes: by default only for a third of the budget).
    monkeypatch.setattr(budget_module, "LATE_FIRST_BATCHES_FRACTION", 1e6)
    work_dir = tmp_path / "work"
    command = ["tune", *TINY, "--target", LLVM, "--work-dir", str(work_dir), "--seed", "0",
               "--minutes", "0.01"]
    assert cli.main(command) == 0
    out, err = capsys.readouterr()
    assert "time budget of 0.01 minutes is spent" in err and "Traceback" not in err, err
    kept = len(ms.database.JSONDatabase(work_dir=str(work_dir)))
    assert kept == 8 and f"keeps {kept} records" in err
    summary = json.loads((work_dir / SUMMARY_FILE).read_text())
    assert summary["time_budget_spent"] is True and summary["interrupted"] is False
    assert summary["max_trials"] is None and summary["records"] == kept
    assert summary["first_batches_after_deadline"] == 8 and summary["tasks_measured"] == 8, summary
    assert "8 of 8 tasks have a valid measurement" in out
    # One progress line per batch (stderr is not a terminal), with the time elapsed and left.
    bars = [line for line in err.splitlines() if line.startswith("[")]
    assert len(bars) == 8, err
    assert all(re.search(r"\| \d+:\d\d elapsed, 0:00 left$", b) for b in bars), bars
    assert bars[-1].startswith("[" + "#" * 24 + "] trials 8 |"), bars[-1]  # no trial total

    # The same command again: resumes from the work dir; every task has a record, so once the
    # budget is spent nothing more is measured, and nothing twice.
    assert cli.main(command) == 0
    out, err = capsys.readouterr()
    assert f"resuming: {kept} records in {work_dir}" in out, out
    assert "time budget of 0.01 minutes is spent" in err
    assert len(ms.database.JSONDatabase(work_dir=str(work_dir))) == kept


def test_tune_needs_trials_or_minutes_and_a_positive_number_of_minutes(tmp_path, capsys):
    base = ["tune", *TINY, "--target", LLVM, "--work-dir", str(tmp_path / "w")]
    assert cli.main(base) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "--trials", "--minutes")
    for bad in ("0", "-1", "soon", "inf"):
        assert cli.main([*base, "--minutes", bad]) == cli.EXIT_BAD_INPUT
        one_error_line(capsys, "--minutes")
    with pytest.raises(ValueError, match="max_trials, max_minutes"):
        tune(None, None, LLVM, tmp_path, max_trials=None)


def _snapshot(**changes) -> ProgressSnapshot:
    fields = dict(trials_done=6, trials_total=24, tasks_measured=2, tasks_total=8,
                  estimated_latency_s=None, last_task="t", last_batch_failed=0, last_batch_size=4)
    fields.update(changes)
    return ProgressSnapshot(**fields)


def test_progress_line_shows_elapsed_and_remaining_time():
    # Trials alone: time left estimated from this run's rate (10 trials in 50 s, 20 to go).
    progress = TuningProgress(total_trials=40, done_before=10, tasks=["a"], weights=[1.0],
                              started=100.0)
    progress.trials_done = 20
    assert progress.times(now=150.0) == (50.0, 100.0, True)
    line = describe(_snapshot(trials_done=20, trials_total=40, elapsed_s=50.0, remaining_s=100.0,
                              remaining_estimated=True))
    assert line.endswith("| 0:50 elapsed, ~1:40 left"), line
    # A time budget: the time left is the deadline's, unless the trials end sooner.
    progress.deadline = 100.0 + 180.0
    assert progress.times(now=150.0) == (50.0, 100.0, True)  # 20 trials at 5 s end first
    progress.deadline = 100.0 + 120.0
    assert progress.times(now=150.0) == (50.0, 70.0, False)
    unlimited = TuningProgress(total_trials=None, done_before=0, tasks=["a"], weights=[1.0],
                               started=0.0, deadline=4000.0)
    assert unlimited.times(now=400.0) == (400.0, 3600.0, False)
    # Under a time budget alone the bar fills with time, and hours are shown.
    bar = progress_bar(_snapshot(trials_total=None, elapsed_s=400.0, remaining_s=3600.0))
    assert bar.startswith("[##......................] trials 6 |"), bar
    assert bar.endswith("| 6:40 elapsed, 1:00:00 left"), bar
    # Reported batches: the first one (after start-up and a round of search over the tasks) has
    # no estimate; later ones estimate from the rate since the first report.
    snapshots = []
    reporting = TuningProgress(total_trials=8, done_before=0, tasks=["a", "b"], weights=[1.0, 1.0],
                               started=0.0, report=snapshots.append)
    built = [ms.builder.BuilderResult("x.so", None)] * 2
    ran = [ms.runner.RunnerResult([1e-4], None)] * 2
    for task_id in (0, 1):
        reporting.apply(ms.task_scheduler.RoundRobin(), task_id, [], built, ran)
    assert snapshots[0].remaining_s is None and snapshots[0].elapsed_s > 0
    assert snapshots[1].remaining_estimated and snapshots[1].remaining_s >= 0
    assert snapshots[1].estimated_latency_s == pytest.approx(2e-4)
    # Without times the line is what it was.
    assert describe(_snapshot()) == "trials 6/24 | tasks 2/8 measured | est. latency -"
    # A task whose design spaces failed counts in the total and leaves the latency unestimated.
    snapshots.clear()
    partial = TuningProgress(total_trials=8, done_before=0, tasks=["a"], weights=[1.0],
                             started=0.0, report=snapshots.append, untuned_tasks=1)
    partial.apply(ms.task_scheduler.RoundRobin(), 0, [], built, ran)
    assert (snapshots[0].tasks_measured, snapshots[0].tasks_total) == (1, 2)
    assert snapshots[0].estimated_latency_s is None


def test_the_cli_default_search_is_sized_below_metaschedules_default():
    search = default_search()
    assert isinstance(search, ms.search_strategy.EvolutionarySearch)
    assert int(search.population_size) == SIZED_DEFAULTS["population_size"] < 512
    assert cli_commands.search_strategy().population_size == search.population_size
