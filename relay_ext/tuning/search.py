"""Tasks -> tuning database: :func:`tune` measures candidates into MetaSchedule's JSON database.

    database = tune(mod, params, target, work_dir, max_trials=200)  # resumable, budget spread
    summary = read_tuning_summary(work_dir)                          # what happened to each task

:func:`tune` composes the steps of one tune: check that this machine can measure, open the work
dir under its lock, build a tune context per task (:mod:`.contexts`) in the order the budget
should reach them (:mod:`.budget`), measure (optionally each task's rule design first,
:mod:`.rule_designs_first`, then MetaSchedule's search), and write the summary.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import tvm
from tvm import meta_schedule as ms
from tvm.target import Target

from meta_rules.database_intrinsics import register_database_intrinsics
from meta_rules.rule_sets import TargetLike

from relay_ext.lowering.config import build_candidate
from relay_ext.lowering.targets import check_runs_here, tunable_target
from relay_ext.lowering.tasks import lowered_tasks
from relay_ext.lowering.toolchain import require_c_compiler
from relay_ext.measure.rpc_tracker import MeasuringStopped
from relay_ext.schedules.topi_only import TOPI_SCHEDULE
from relay_ext.tuning.budget import NO_TRIAL_LIMIT, TrialBudget
from relay_ext.tuning.contexts import TaskReport, tune_contexts
from relay_ext.tuning.guards import InterruptGuard, TuningInterrupted, numpy_seeded, runner_threads
from relay_ext.tuning.options import TuneOptions
from relay_ext.tuning.progress import TuningProgress
from relay_ext.tuning.rule_designs_first import measure_rule_designs
from relay_ext.workdir.files import SUMMARY_FILE, repair_database, tuning_lock
from relay_ext.workdir.record_writes import RecordWriteCheck
from relay_ext.workdir.records import RecordIndex, valid_run_secs

logger = logging.getLogger(__name__)


def tune(
    mod: tvm.IRModule,
    params: Optional[Mapping[str, tvm.nd.NDArray]],
    target: TargetLike,
    work_dir: Union[str, os.PathLike],
    options: Optional[TuneOptions] = None,
    **fields: Any,
) -> ms.Database:
    """Tune a Relay module for ``target`` (a Target, a target string or ``"host"``); the records
    go to MetaSchedule's JSON database in ``work_dir``, which is returned.

    ``options`` is a :class:`~relay_ext.tuning.options.TuneOptions`; its fields may also be given
    as keywords (``tune(mod, params, "host", "w", max_trials=200, seed=0)``), replacing those of
    ``options``. A budget is needed: ``max_trials``, ``max_minutes`` or both.

    Before anything is written: candidates measured on this machine (the default runner) need a C
    compiler to link them (:class:`~relay_ext.lowering.toolchain.MissingCCompiler` otherwise) and,
    for a CPU target, code this machine can execute
    (:class:`~relay_ext.lowering.targets.TargetNotRunnable`).

    Resuming: records already in ``work_dir`` are kept and never measured again
    (:class:`~relay_ext.tuning.skip_measured_search.SkipMeasuredSearch`), and the tasks with the
    fewest records are tuned first (among equals those that cost the model most), so a budget
    smaller than one round over the tasks goes to the tasks that need it. ``progress`` is called
    after every measured batch (records already there count as trials done).

    Ctrl-C (in the main thread): the batches in flight are finished and stored, then
    :class:`~relay_ext.tuning.guards.TuningInterrupted` (a KeyboardInterrupt) is raised; a second
    Ctrl-C stops at once. Either way the database stays loadable and a later ``tune`` resumes.

    Tasks whose design spaces TVM cannot generate are retried with other random states, then
    without the failing rule, and otherwise left to TVM's default schedule; the summary written to
    ``work_dir/tuning_summary.json`` (:func:`read_tuning_summary`) lists them
    (``"design_space_failed"``). Tasks whose only fast schedule is TOPI's (the int16 convs of x86
    targets without VNNI, :mod:`relay_ext.schedules.topi_only`) are not tuned and keep it
    (``"topi_schedule"``); both kinds are in ``"left_to_default_schedule"``.

    ``seed`` makes a tune close to repeatable, not exactly: search threads take work dynamically
    (``num_tuning_cores=1`` avoids that), and once the cost model is trained or the task scheduler
    leaves its first round over the tasks, measured run times steer the search. Until TVM's
    XGBoost cost model has 100 measurements it ranks candidates with ``np.random``: numpy's global
    generator draws from ``seed`` while tuning, and the caller's stream is restored afterwards.

    ``max_minutes``: the clock starts when ``tune`` is called (or at ``clock_started``), so task
    extraction and design spaces count. When it runs out the tune stops as on Ctrl-C but returns
    normally; the summary says ``"time_budget_spent": true``. Each task's first batch is then at
    most two candidates, and a task without any record that the first round reaches after the
    deadline still gets one candidate measured (``"first_batches_after_deadline"``), for at most a
    third of the budget past the deadline, so every task gets a tuned schedule where the machine
    allows (:mod:`relay_ext.tuning.budget`). A task whose design space is used up ends and leaves
    its share to the others (``"ended_early"``).

    ``measure_rule_designs_first``: before the search, each task without a record gets its rule
    design (:mod:`relay_ext.schedules.rule_designs`) measured by the same builder and runner,
    among the costliest tasks as many as the budget has trials, each one trial of the budget
    (``"rule_designs_measured_first"``). The search starts from those records, so a task's best
    is never slower than its rule design measured here.
    """
    options = TuneOptions.merged(options, fields)
    started = time.monotonic() if options.clock_started is None else float(options.clock_started)
    target = tunable_target(target, options.variant)
    runner = options.make_runner(target)
    _check_this_machine_measures(target, runner)
    work_dir = Path(work_dir)
    with tuning_lock(work_dir):  # one tune per work dir (created here)
        run = _prepare(mod, params, target, work_dir, options, runner, started)
        try:
            _measure(run)
        finally:  # also on Ctrl-C: the summary says what the work dir holds
            write_error = run.writes.finish()
            summary = _write_summary(run, write_error)
    _raise_if_stopped(run, write_error)
    logger.info("%d records, %d new; %s", len(run.database),
                len(run.database) - run.records_before, measured_line(summary))
    return run.database


def measured_line(summary: Dict) -> str:
    """'9 of 12 tasks have a valid measurement; 2 keep TOPI's schedule, not tuned (...); 1 left
    to TVM's default schedule: name', from a :func:`read_tuning_summary`."""
    kept = summary.get("topi_schedule", [])
    left = [name for name in summary["left_to_default_schedule"] if name not in kept]
    line = f"{summary['tasks_measured']} of {len(summary['tasks'])} tasks have a valid measurement"
    if kept:
        line += (f"; {len(kept)} keep TOPI's schedule, not tuned (int16 code MetaSchedule has no "
                 "intrinsic for)")
    if left:
        line += f"; {len(left)} left to TVM's default schedule: {', '.join(left)}"
    return line


@dataclasses.dataclass
class _Run:
    """One tune's state, from its preparation to its summary."""

    options: TuneOptions
    target: Target
    work_dir: Path
    runner: ms.runner.Runner
    builder: ms.builder.Builder
    database: ms.Database
    started: float
    budget: TrialBudget
    contexts: List[ms.TuneContext]
    weights: List[float]
    reports: List[TaskReport]
    best_before: Dict[int, float]  # context index -> best valid run time already recorded
    records_before: int
    guard: InterruptGuard
    writes: RecordWriteCheck
    rule_designs_measured: int = 0


def _check_this_machine_measures(target: Target, runner: ms.runner.Runner) -> None:
    """Candidates run here (MetaSchedule's LocalRunner, not RPC devices) need a C compiler to link
    them, and for a CPU target code this machine can execute: CPU code it cannot run kills the
    runner with SIGILL (a GPU target's candidates simply fail to run here)."""
    if not isinstance(runner, ms.runner.LocalRunner):
        return
    require_c_compiler()
    if target.kind.name == "llvm":
        check_runs_here(target)


def _open_database(work_dir: Path, target: Target) -> ms.database.JSONDatabase:
    """The work dir's database, loadable: the tensor intrinsics its records may name registered
    (loading replays every record), and a torn last line left by a killed tune set aside."""
    register_database_intrinsics(target, work_dir)
    repaired = repair_database(work_dir)
    if repaired["broken_records"] or repaired["broken_workloads"]:
        logger.warning("%s: set aside %d broken record line(s) and %d broken workload line(s) "
                       "before tuning", work_dir, repaired["broken_records"],
                       repaired["broken_workloads"])
    return ms.database.JSONDatabase(work_dir=str(work_dir))


def _prepare(mod: tvm.IRModule, params: Optional[Mapping[str, tvm.nd.NDArray]], target: Target,
             work_dir: Path, options: TuneOptions, runner: ms.runner.Runner,
             started: float) -> _Run:
    """Open the database, build a context per task, and order them: fewest records first, among
    equals the tasks that cost the model most (weight x FLOPs)."""
    database = _open_database(work_dir, target)
    tasks = lowered_tasks(mod, params, target, options.variant)
    budget = TrialBudget.for_tune(options.max_trials, options.max_minutes, started)
    index = RecordIndex()
    contexts, weights, reports = tune_contexts(
        tasks, target, options.variant, work_dir, options.seed,
        num_tuning_cores=options.num_tuning_cores, strategy=options.strategy, budget=budget,
        record_index=index)
    budget.tasks = max(1, len(contexts))
    known = recorded_counts_and_best(database, contexts, index)
    cost = [w * _flops(c.mod) for c, w in zip(contexts, weights)]
    order = sorted(range(len(contexts)), key=lambda i: (known[i][0], -cost[i], i))
    guard = InterruptGuard(budget)
    if hasattr(runner, "stop_tune_with"):  # a runner that loses its devices (rpc_tracker)
        runner.stop_tune_with(budget.stop)
        guard.on_abort.append(runner.close)  # a second Ctrl-C ends its waits at once
    return _Run(
        options=options, target=target, work_dir=work_dir, runner=runner,
        builder=options.builder or ms.builder.LocalBuilder(f_build=build_candidate),
        database=database, started=started, budget=budget,
        contexts=[contexts[i] for i in order], weights=[weights[i] for i in order],
        reports=reports, records_before=len(database), guard=guard,
        best_before={n: known[i][1] for n, i in enumerate(order) if known[i][1] is not None},
        # a write MetaSchedule could not make (disk full...) stops the tune (record_writes)
        writes=RecordWriteCheck(work_dir, database, stop=budget.stop))


def _measure(run: _Run) -> None:
    """The rule designs first (when asked), then MetaSchedule's search, under the Ctrl-C guard."""
    if not run.contexts:
        return
    if run.options.measure_rule_designs_first:
        costliest = [c for _, _, c in sorted(
            (-w * _flops(c.mod), i, c) for i, (c, w) in enumerate(zip(run.contexts, run.weights)))]
        with run.guard.installed(), runner_threads(run.target):
            run.rule_designs_measured = measure_rule_designs(
                run.database, costliest, run.builder, run.runner, limit=run.budget.left)
        run.budget.spend(run.rule_designs_measured)  # nothing is left after a Ctrl-C anyway
    _search(run)


def _search(run: _Run) -> None:
    options = run.options
    tracker = TuningProgress(
        total_trials=None if options.max_trials is None
        else run.records_before + int(options.max_trials),
        done_before=run.records_before + run.rule_designs_measured, started=run.started,
        deadline=run.budget.deadline, untuned_tasks=len(run.reports) - len(run.contexts),
        tasks=[c.task_name for c in run.contexts], weights=run.weights,
        best_before=run.best_before, report=options.progress)
    with run.guard.installed(), numpy_seeded(options.seed), runner_threads(run.target):
        try:
            ms.tune_tasks(
                tasks=run.contexts,
                task_weights=run.weights,
                work_dir=str(run.work_dir),
                max_trials_global=(NO_TRIAL_LIMIT if options.max_trials is None
                                   else int(options.max_trials)),
                max_trials_per_task=options.max_trials_per_task,
                num_trials_per_iter=int(options.num_trials_per_iter),
                builder=run.builder,
                runner=run.runner,
                database=run.database,
                task_scheduler=ms.task_scheduler.GradientBased(
                    seed=-1 if options.seed is None else int(options.seed)),
                measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"),
                                   tracker, run.writes],
            )
        except Exception:  # a second Ctrl-C surfaces as whatever TVM made of it
            if run.guard.pressed:
                raise TuningInterrupted() from None
            raise


def _write_summary(run: _Run, write_error: Optional[Exception]) -> Dict:
    """``tuning_summary.json``: what was asked, what each task got, how the tune ended."""
    counted = run.database
    if write_error is not None:  # the files were cut back: count what they hold, not memory
        try:
            counted = ms.database.JSONDatabase(work_dir=str(run.work_dir))
        except Exception:  # pylint: disable=broad-except - then memory is the best we have
            logger.warning("could not reload %s to count its records", run.work_dir)
    options, budget = run.options, run.budget
    summary = {
        "variant": options.variant,
        "target": str(run.target),
        "max_trials": None if options.max_trials is None else int(options.max_trials),
        "max_minutes": None if options.max_minutes is None else float(options.max_minutes),
        "num_trials_per_iter": int(options.num_trials_per_iter),
        "seed": options.seed,
        "candidate_timing": options.timing(run.target),
        "tasks": [dataclasses.asdict(r) for r in run.reports],
        "records_before": run.records_before,
        "rule_designs_measured_first": run.rule_designs_measured,
        "records": len(counted),
        "interrupted": bool(run.guard.pressed),
        "time_budget_spent": bool(budget.time_up),
        "first_batches_after_deadline": budget.late_first_batches,
        "ended_early": [{"task": name, "why": why} for name, why in budget.ended_tasks],
        "wall_s": round(time.monotonic() - run.started, 1),
    }
    _add_measured(summary, run.reports, run.contexts, counted)
    try:
        (run.work_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    except OSError:
        if write_error is None:
            raise  # else the disk is full: the records are what matters, and they are whole
    return summary


def _raise_if_stopped(run: _Run, write_error: Optional[Exception]) -> None:
    """A failed write, the last RPC device lost, or Ctrl-C: the tune's error, records kept."""
    if write_error is not None:
        raise write_error
    lost = run.runner.lost() if hasattr(run.runner, "lost") else None
    if lost:
        raise MeasuringStopped(f"{lost}; {run.work_dir} keeps {len(run.database)} records (the "
                               "database loads); start a server and run the same command again "
                               "to resume")
    if run.guard.pressed:
        raise TuningInterrupted()


def _add_measured(summary: Dict, reports: Sequence[TaskReport],
                  contexts: Sequence[ms.TuneContext], database: ms.Database) -> None:
    """Mark in ``summary`` which tasks have a valid measurement in ``database``; every other task
    (design spaces failed, or every candidate failed or none was measured) is compiled with TVM's
    default schedule."""
    best = dict(zip((c.task_name for c in contexts), recorded_counts_and_best(database, contexts)))
    for task in summary["tasks"]:
        task["measured"] = best.get(task["name"], (0, None))[1] is not None
    summary["tasks_measured"] = sum(task["measured"] for task in summary["tasks"])
    summary["left_to_default_schedule"] = [t["name"] for t in summary["tasks"] if not t["measured"]]
    summary["design_space_failed"] = [r.name for r in reports
                                      if not r.tuned and r.generation != TOPI_SCHEDULE]
    summary["topi_schedule"] = [r.name for r in reports if r.generation == TOPI_SCHEDULE]


def _flops(mod: tvm.IRModule) -> float:
    try:
        return float(tvm.tir.analysis.estimate_tir_flops(mod))
    except tvm.TVMError:  # an op TVM cannot count: treat the task as cheap
        return 0.0


def recorded_counts_and_best(
    database: ms.Database, contexts: Sequence[ms.TuneContext], index: Optional[RecordIndex] = None
) -> List[Tuple[int, Optional[float]]]:
    """Per context: the number of distinct candidates ``database`` holds for its workload, and
    the best valid run time among them (None when there is none)."""
    index = index or RecordIndex()
    result = []
    for context in contexts:
        times = [t for t in (valid_run_secs(r.run_secs) for r in index.records(database, context.mod))
                 if t is not None]
        result.append((len(index.keys(database, context.mod)), min(times, default=None)))
    return result


def read_tuning_summary(work_dir: Union[str, os.PathLike]) -> Dict:
    """The summary the last :func:`tune` in ``work_dir`` wrote (tasks, generation, untuned tasks)."""
    return json.loads((Path(work_dir) / SUMMARY_FILE).read_text())
