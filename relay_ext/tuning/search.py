"""Tasks -> tuning database: :func:`tune` measures candidates into MetaSchedule's JSON database.

    database = tune(mod, params, target, work_dir, max_trials)  # resumable, budget spread
    summary = read_tuning_summary(work_dir)                      # what happened to each task
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import tvm
from tvm import meta_schedule as ms

from meta_rules.generic.tensor_intrinsics import register_database_intrinsics
from meta_rules.rule_sets import check_variant

from relay_ext.lowering.config import build_candidate
from relay_ext.lowering.targets import TargetOrHost, check_runs_here, normalize_target
from relay_ext.lowering.x86.amx import request_amx_tile_data_in_worker
from relay_ext.tuning.designs_first import measure_first_candidates
from relay_ext.tuning.guards import TuningInterrupted, InterruptGuard, numpy_seeded, runner_threads
from relay_ext.tuning.progress import ProgressSnapshot, TuningProgress
from relay_ext.workdir.records import valid_run_secs
from relay_ext.workdir.record_writes import RecordWriteCheck
from relay_ext.measure.rpc_tracker import MeasuringStopped
from relay_ext.tuning.skip_measured_search import TrialBudget
from relay_ext.workdir.records import RecordIndex
from relay_ext.tuning.tasks import StrategyLike, TaskReport, tune_contexts
from relay_ext.lowering.tasks import lowered_tasks
from relay_ext.workdir.files import SUMMARY_FILE, holds_tuning_lock, repair_database

logger = logging.getLogger(__name__)

RunnerLike = Union[str, ms.runner.Runner]

# The trial budget of a tune limited by time alone (MetaSchedule wants a number).
NO_TRIAL_LIMIT = 1_000_000
# Under a time budget, a task's first batch takes at most this many candidates.
FIRST_BATCH_UNDER_TIME_BUDGET = 2
# After the deadline, tasks never measured still get one candidate each for this fraction of the
# time budget (``--minutes 3``: until 4 minutes), so that every task gets a tuned schedule.
LATE_FIRST_BATCHES_FRACTION = 1 / 3


def make_runner(runner: RunnerLike) -> ms.runner.Runner:
    if isinstance(runner, ms.runner.Runner):
        return runner
    if runner == "local":
        # Each runner worker is a fresh process: it asks for AMX tile data itself (nothing where
        # the OS does not enable AMX), so that candidates built with AMX run there.
        return ms.runner.LocalRunner(initializer=request_amx_tile_data_in_worker)
    raise ValueError(f"runner must be 'local' or a tvm.meta_schedule.runner.Runner (such as an "
                     f"RPCRunner), got {runner!r}")


@holds_tuning_lock  # one tune per work dir (work_dir.tuning_lock)
def tune(
    mod: tvm.IRModule,
    params: Optional[Mapping[str, tvm.nd.NDArray]],
    target: TargetOrHost,
    work_dir: Union[str, os.PathLike],
    max_trials: Optional[int] = None,
    variant: str = "ours",
    runner: RunnerLike = "local",
    num_trials_per_iter: int = 16,
    seed: Optional[int] = None,
    max_trials_per_task: Optional[int] = None,
    builder: Optional[ms.builder.Builder] = None,
    strategy: StrategyLike = "sized",
    progress: Optional[Callable[[ProgressSnapshot], None]] = None,
    num_tuning_cores: Union[str, int] = "physical",
    max_minutes: Optional[float] = None,
    clock_started: Optional[float] = None,
    first_candidates: bool = False,
) -> ms.Database:
    """Tune a Relay module with ``variant``'s rules for ``max_trials`` new measurements; the
    records go to MetaSchedule's JSON database in ``work_dir``.

    Resuming: records already in ``work_dir`` are kept and never measured again
    (:class:`SkipMeasuredSearch`), and the tasks with the fewest records are tuned first, so a
    budget smaller than one round over the tasks goes to the tasks that need it, not always to
    the first ones. ``progress`` is called after every measured batch with a
    :class:`ProgressSnapshot` (records already there count as trials done).

    Ctrl-C (in the main thread): the batches in flight are finished and stored, then
    :class:`TuningInterrupted` (a KeyboardInterrupt) is raised; a second Ctrl-C stops at once.
    Either way the database stays loadable and a later ``tune`` resumes from it.

    Tasks whose design spaces TVM cannot generate are retried with other random states, then
    without the failing rule, and otherwise left to TVM's default schedule; the summary written to
    ``work_dir/tuning_summary.json`` (see :func:`read_tuning_summary`) lists them.
    ``strategy`` is the search strategy: ``"sized"`` (the default, as ``quantfuse tune``'s) is an
    EvolutionarySearch sized for the budget (:mod:`relay_ext.tuning.strategy`); a MetaSchedule
    name (``"evolutionary"`` for TVM's own defaults) or a SearchStrategy object is taken as it is.

    ``seed`` seeds every random choice of the search: each task's random state, and numpy's global
    generator while tuning (until TVM's XGBoost cost model has 100 measurements it ranks
    candidates with ``np.random.uniform``); the caller's numpy stream is restored afterwards.
    That makes a tune close to repeatable, not exactly: search threads take work dynamically
    (``num_tuning_cores=1`` avoids that), once the cost model is trained or the task scheduler
    leaves its first round over the tasks measured run times steer the search, and even with one
    thread two tunes of tiny_resnet drew the same candidates for only 5 of 8 workloads.

    ``max_minutes``: a wall-clock budget for this call, alone or with ``max_trials`` (at least one
    of them is needed). Its clock starts when ``tune`` is called, so task extraction and design
    spaces count; ``clock_started`` (a ``time.monotonic()`` value) starts it earlier, as the CLI
    does so that loading the model counts too (the summary's ``wall_s`` counts from there). When
    it runs out the tune stops as on Ctrl-C, but returns normally: the batches in flight are
    measured and stored, the summary says ``"time_budget_spent": true``, and a later
    ``tune`` resumes. Under a time budget each task's first batch is at most
    :data:`FIRST_BATCH_UNDER_TIME_BUDGET` candidates, so every task gets measured early; a task
    without any record that the first round over the tasks reaches after the deadline still gets
    one candidate measured (``"first_batches_after_deadline"`` counts them), for at most
    :data:`LATE_FIRST_BATCHES_FRACTION` of the budget past the deadline, so every task gets a
    tuned schedule where the machine allows.
    A task whose design space is exhausted ends and leaves its share to the others (the summary's
    ``"ended_early"`` lists them, with the reason).

    ``first_candidates``: before the search, each task without a record gets its no-search
    schedule (:mod:`relay_ext.schedules.rule_designs`) measured by the same builder and runner and
    committed (:mod:`relay_ext.tuning.designs_first`), among the costliest tasks as many as
    the budget has trials; each such
    measurement is one trial of the budget (the summary's ``"first_candidates"`` counts them).
    The search starts from those records, so a task's best is never slower than its no-search
    schedule measured here.
    """
    check_variant(variant)
    start = time.monotonic() if clock_started is None else float(clock_started)
    if max_trials is None and max_minutes is None:
        raise ValueError("tune needs max_trials, max_minutes or both")
    if max_minutes is not None and not float(max_minutes) > 0:
        raise ValueError(f"max_minutes must be a positive number of minutes, got {max_minutes}")
    if max_trials is not None and int(max_trials) <= 0:
        raise ValueError(f"max_trials must be a positive number of trials, got {max_trials}")
    trial_limit = NO_TRIAL_LIMIT if max_trials is None else int(max_trials)
    if int(num_trials_per_iter) <= 0:
        raise ValueError(f"num_trials_per_iter must be positive, got {num_trials_per_iter}")
    target = normalize_target(target)
    runner = make_runner(runner)
    if _measured_here(runner) and target.kind.name == "llvm":
        # Before anything is built: CPU code this machine cannot execute kills the runner with
        # SIGILL. (A GPU target's candidates simply fail to run here; the CLI refuses those too.)
        check_runs_here(target)
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    # A record of a tensorized candidate names its TensorIntrin, and loading the database replays
    # every record: an intrinsic not registered yet fails the load.
    register_database_intrinsics(target, work_dir)
    # A tune killed mid-write (kill -9, power loss) leaves a torn last line that TVM's loader
    # rejects: cut it back first, as the CLI does (a no-op on whole files).
    repaired = repair_database(work_dir)
    if repaired["broken_records"] or repaired["broken_workloads"]:
        logger.warning("%s: set aside %d broken record line(s) and %d broken workload line(s) "
                       "before tuning", work_dir, repaired["broken_records"],
                       repaired["broken_workloads"])
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    records_before = len(database)
    tasks = lowered_tasks(mod, params, target, variant)
    budget, index = TrialBudget(trial_limit), RecordIndex()
    if max_minutes is not None:
        budget.deadline = start + 60.0 * float(max_minutes)
        budget.first_batch_cap = FIRST_BATCH_UNDER_TIME_BUDGET
        budget.late_until = budget.deadline + LATE_FIRST_BATCHES_FRACTION * 60.0 * float(max_minutes)
    contexts, weights, reports = tune_contexts(tasks, target, variant, work_dir, seed,
                                               num_tuning_cores=num_tuning_cores,
                                               strategy=strategy, budget=budget,
                                               record_index=index)
    budget.tasks = max(1, len(contexts))
    builder = builder or ms.builder.LocalBuilder(f_build=build_candidate)
    seeded = 0
    known = recorded_counts_and_best(database, contexts, index)
    # Fewest records first; among equals the tasks that cost the model most (weight x FLOPs), so a
    # budget smaller than the task count goes where it matters.
    cost = [w * _flops(c.mod) for c, w in zip(contexts, weights)]
    order = sorted(range(len(contexts)), key=lambda i: (known[i][0], -cost[i], i))
    contexts, weights = [contexts[i] for i in order], [weights[i] for i in order]
    known = [known[i] for i in order]
    summary = {
        "variant": variant,
        "target": str(target),
        "max_trials": None if max_trials is None else int(max_trials),
        "max_minutes": None if max_minutes is None else float(max_minutes),
        "num_trials_per_iter": int(num_trials_per_iter),
        "seed": seed,
        "tasks": [dataclasses.asdict(r) for r in reports],
        "records_before": records_before,
        "first_candidates": seeded,
    }
    guard = InterruptGuard(budget)
    # A write MetaSchedule could not make (disk full...) stops the tune; see record_writes.
    writes = RecordWriteCheck(work_dir, database, stop=budget.stop)
    write_error = None
    if hasattr(runner, "stop_tune_with"):  # a runner that loses its devices (rpc_tracker)
        runner.stop_tune_with(budget.stop)
        guard.on_abort.append(runner.close)  # a second Ctrl-C ends its waits at once
    try:
        if contexts and first_candidates:
            # under the guard: a Ctrl-C here stops the tune after them, with its summary
            by_cost = [c for _, _, c in sorted(
                (-w * _flops(c.mod), i, c) for i, (c, w) in enumerate(zip(contexts, weights)))]
            with guard.installed(), runner_threads(target):
                seeded = measure_first_candidates(database, by_cost, builder, runner,
                                                  limit=budget.left)
            budget.left = max(0, budget.left - seeded)  # 0 already after a Ctrl-C
            budget.total = max(0, budget.total - seeded)
            summary["first_candidates"] = seeded
        if contexts:
            tracker = TuningProgress(
                total_trials=None if max_trials is None else records_before + int(max_trials),
                done_before=records_before + seeded, started=start, deadline=budget.deadline,
                untuned_tasks=len(reports) - len(contexts),
                tasks=[c.task_name for c in contexts], weights=weights,
                best_before={i: best for i, (_, best) in enumerate(known) if best is not None},
                report=progress)
            with guard.installed(), numpy_seeded(seed), runner_threads(target):
                try:
                    ms.tune_tasks(
                        tasks=contexts,
                        task_weights=weights,
                        work_dir=str(work_dir),
                        max_trials_global=trial_limit,
                        max_trials_per_task=max_trials_per_task,
                        num_trials_per_iter=int(num_trials_per_iter),
                        builder=builder,
                        runner=runner,
                        database=database,
                        task_scheduler=ms.task_scheduler.GradientBased(
                            seed=-1 if seed is None else int(seed)),
                        measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"),
                                           tracker, writes],
                    )
                except Exception:  # a second Ctrl-C surfaces as whatever TVM made of it
                    if guard.pressed:
                        raise TuningInterrupted() from None
                    raise
    finally:  # also on Ctrl-C: the summary says what the work dir holds
        write_error = writes.finish()
        counted = database
        if write_error is not None:  # the files were cut back: count what they hold, not memory
            try:
                counted = ms.database.JSONDatabase(work_dir=str(work_dir))
            except Exception:  # pylint: disable=broad-except - then memory is the best we have
                logger.warning("could not reload %s to count its records", work_dir)
        summary["records"] = len(counted)
        summary["interrupted"] = bool(guard.pressed)
        summary["time_budget_spent"] = bool(budget.time_up)
        summary["first_batches_after_deadline"] = budget.late_first_batches
        summary["ended_early"] = [{"task": name, "why": why} for name, why in budget.ended_tasks]
        summary["wall_s"] = round(time.monotonic() - start, 1)
        _add_measured(summary, reports, contexts, counted)
        try:
            (work_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
        except OSError:
            if write_error is None:
                raise  # else the disk is full: the records are what matters, and they are whole
    if write_error is not None:
        raise write_error
    lost = runner.lost() if hasattr(runner, "lost") else None
    if lost:
        raise MeasuringStopped(f"{lost}; {work_dir} keeps {len(database)} records (the database "
                               "loads); start a server and run the same command again to resume")
    if guard.pressed:
        raise TuningInterrupted()
    untuned = summary["left_to_default_schedule"]
    logger.info("%d of %d tasks have a valid measurement (%d records, %d new)%s",
                summary["tasks_measured"], len(reports), len(database),
                len(database) - records_before,
                f"; left to TVM's default schedule: {', '.join(untuned)}" if untuned else "")
    return database


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
    summary["design_space_failed"] = [r.name for r in reports if not r.tuned]


def _flops(mod: tvm.IRModule) -> float:
    try:
        return float(tvm.tir.analysis.estimate_tir_flops(mod))
    except tvm.TVMError:  # an op TVM cannot count: treat the task as cheap
        return 0.0


def _measured_here(runner: ms.runner.Runner) -> bool:
    """Candidates run on this machine (MetaSchedule's LocalRunner), not on RPC devices."""
    return isinstance(runner, ms.runner.LocalRunner)


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
