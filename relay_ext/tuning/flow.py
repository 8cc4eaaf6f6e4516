"""The tuning flow, one step per function: Relay module -> tasks -> tuning database -> compiled module.

    tasks = extract_tasks(mod, params, target, variant)          # what MetaSchedule will tune
    contexts, weights, outcomes = tune_contexts(tasks, ...)     # design spaces checked per task
    database = tune(mod, params, target, work_dir, max_trials)  # MetaSchedule's JSON database
    lib = compile_model(database, mod, params, target, variant) # a runnable graph module
    outputs = run_module(lib, {input_name: array})

Every step takes its pass-context options from :func:`relay_ext.config.pass_config`, so the
variant's TE->TIR converter is the same at extraction, tuning and compilation and every tuned
workload is found at compile time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import threading
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import tvm
from tvm import meta_schedule as ms
from tvm.meta_schedule.utils import fork_seed
from tvm.tir import tensor_intrin  # noqa: F401 - registers the intrinsics tuning records name

# A tuned record of a tensorized candidate (x86 AVX-512 ``dot_16x4_avx512``, CUDA tensor cores)
# names its TensorIntrin; loading a JSONDatabase replays every record, and fails on a name that
# is not registered. Importing ``tvm.tir.tensor_intrin`` registers them all.

import meta_rules
from meta_rules.resilient_space_generator import (
    DesignSpaceGenerationError,
    GenerationOutcome,
    ResilientPostOrderApply,
)
from meta_rules.rule_sets import TargetLike, check_variant

from .executing import copy_module, run_module  # noqa: F401 - run_module is part of the flow
from . import vnni_intrinsics
from .config import build_candidate, pass_config
from .targets import check_runs_here, host_llvm_target, normalize_target  # noqa: F401
from .skip_measured_search import RecordIndex, SkipMeasuredSearch, TrialBudget
from .tuning_progress import ProgressSnapshot, TuningProgress, valid_run_secs

logger = logging.getLogger(__name__)

SUMMARY_FILE = "tuning_summary.json"
RunnerLike = Union[str, ms.runner.Runner]
StrategyLike = Union[str, ms.search_strategy.SearchStrategy]


# TVM's VNNI dot products, re-registered for the LLVM 22 this wheel links (else any int8 build for
# a VNNI -mcpu aborts the process); before anything here extracts, tunes or builds.
vnni_intrinsics.install()


def extract_tasks(
    mod: tvm.IRModule,
    params: Optional[Mapping[str, tvm.nd.NDArray]],
    target: TargetLike,
    variant: str = "ours",
) -> List[ms.ExtractedTask]:
    """The tuning tasks of a Relay module, lowered with ``variant``'s converter.

    Works on a copy: Relay's QNN canonicalization writes attributes into the module it lowers.
    """
    check_variant(variant)
    return list(ms.relay_integration.extract_tasks(
        copy_module(mod), normalize_target(target), params, pass_config=pass_config(variant)))


@dataclasses.dataclass
class TaskReport:
    """What happened to one task: its design-space generation, and whether it was tuned."""

    name: str
    weight: float
    generation: str
    tuned: bool
    failures: List[str] = dataclasses.field(default_factory=list)


def tune_contexts(
    tasks: Sequence[ms.ExtractedTask],
    target: TargetLike,
    variant: str,
    work_dir: Union[str, os.PathLike],
    seed: Optional[int] = None,
    num_tuning_cores: Union[str, int] = "physical",
    strategy: StrategyLike = "evolutionary",
    budget: Optional[TrialBudget] = None,
    record_index: Optional[RecordIndex] = None,
) -> Tuple[List[ms.TuneContext], List[float], List[TaskReport]]:
    """A TuneContext per task whose design spaces could be generated, and a report for every task.

    Each context carries a :class:`ResilientPostOrderApply` with ``variant``'s rules and the
    search ``strategy`` wrapped in :class:`SkipMeasuredSearch` (candidates the database already
    holds are not measured again; ``budget`` and ``record_index``, when given, are shared by all
    contexts). Design spaces are generated here once, so a task that TVM cannot generate spaces
    for (after retries with other random states and without the failing rule) is left out: it is
    compiled with TVM's default schedule, and its report says so.
    """
    target = normalize_target(target)
    contexts, weights, reports = [], [], []
    for index, (task, rand_state) in enumerate(zip(tasks, fork_seed(seed, n=len(tasks)))):
        task_logger = task_log(work_dir, index, task.task_name)
        space = ResilientPostOrderApply(*meta_rules.rule_set(target, variant))  # fresh per task
        inner = (ms.search_strategy.SearchStrategy.create(strategy) if isinstance(strategy, str)
                 else strategy.clone())
        context = ms.TuneContext(
            mod=task.dispatched[0], target=target, space_generator=space,
            search_strategy=SkipMeasuredSearch(inner, budget, record_index),
            task_name=task.task_name, logger=task_logger,
            rand_state=rand_state, num_threads=num_tuning_cores,
        )
        try:
            context.generate_design_space()
            outcome: GenerationOutcome = space.outcome
        except DesignSpaceGenerationError:
            outcome = space.outcome
        report = TaskReport(task.task_name, float(task.weight), outcome.describe(),
                            outcome.status != "failed", list(outcome.failures))
        reports.append(report)
        if report.tuned:
            contexts.append(context)
            weights.append(float(task.weight))
        else:
            logger.warning("task %s is left to TVM's default schedule: %s", task.task_name,
                           report.failures[0] if report.failures else "no design space")
    return contexts, weights, reports


def task_log(work_dir: Union[str, os.PathLike], index: int, task_name: str) -> logging.Logger:
    """A logger writing MetaSchedule's per-task messages to ``work_dir/logs/task_<i>_<name>.log``."""
    path = Path(work_dir) / "logs" / f"task_{index:03d}_{task_name[:80]}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    task_logger = logging.getLogger(f"quantfuse.task.{path.stem}")
    task_logger.setLevel(logging.DEBUG)
    task_logger.propagate = False  # per-task detail goes to its file, not the console
    for handler in list(task_logger.handlers):
        task_logger.removeHandler(handler)
        handler.close()
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(message)s"))
    task_logger.addHandler(handler)
    return task_logger


class TuningInterrupted(KeyboardInterrupt):
    """A tune stopped by Ctrl-C; the work dir keeps every record measured before it."""


class _InterruptGuard:
    """While tuning (main thread only): the first Ctrl-C empties the trial budget, so MetaSchedule
    finishes the batches in flight, stores their records and returns; a second one aborts at once.

    A KeyboardInterrupt raised inside MetaSchedule's Python callbacks is swallowed by TVM's FFI
    and turns into an unrelated error, so the first Ctrl-C must not raise.
    """

    def __init__(self, budget: TrialBudget):
        self.budget = budget
        self.pressed = 0

    def _on_sigint(self, signum, frame):  # pylint: disable=unused-argument
        self.pressed += 1
        if self.pressed == 1:
            self.budget.left = 0
            logger.warning("interrupted: finishing the candidates in flight and keeping their "
                           "records; press Ctrl-C again to stop at once")
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


def make_runner(runner: RunnerLike) -> ms.runner.Runner:
    if isinstance(runner, ms.runner.Runner):
        return runner
    if runner == "local":
        return ms.runner.LocalRunner()
    raise ValueError(f"runner must be 'local' or a tvm.meta_schedule.runner.Runner (such as an "
                     f"RPCRunner), got {runner!r}")


def tune(
    mod: tvm.IRModule,
    params: Optional[Mapping[str, tvm.nd.NDArray]],
    target: TargetLike,
    work_dir: Union[str, os.PathLike],
    max_trials: int,
    variant: str = "ours",
    runner: RunnerLike = "local",
    num_trials_per_iter: int = 16,
    seed: Optional[int] = None,
    max_trials_per_task: Optional[int] = None,
    builder: Optional[ms.builder.Builder] = None,
    strategy: StrategyLike = "evolutionary",
    progress: Optional[Callable[[ProgressSnapshot], None]] = None,
    num_tuning_cores: Union[str, int] = "physical",
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
    ``strategy`` is MetaSchedule's search strategy (an EvolutionarySearch with a small population
    makes tiny budgets cheap).

    ``seed`` seeds every random choice of the search: each task's random state, and numpy's global
    generator while tuning (until TVM's XGBoost cost model has 100 measurements it ranks
    candidates with ``np.random.uniform``); the caller's numpy stream is restored afterwards.
    That makes a tune close to repeatable, not exactly: search threads take work dynamically
    (``num_tuning_cores=1`` avoids that), once the cost model is trained or the task scheduler
    leaves its first round over the tasks measured run times steer the search, and even with one
    thread two tunes of tiny_resnet drew the same candidates for only 5 of 8 workloads.
    """
    check_variant(variant)
    if int(max_trials) <= 0:
        raise ValueError(f"max_trials must be a positive number of trials, got {max_trials}")
    if int(num_trials_per_iter) <= 0:
        raise ValueError(f"num_trials_per_iter must be positive, got {num_trials_per_iter}")
    target = normalize_target(target)
    runner = make_runner(runner)
    if _measured_here(runner):
        check_runs_here(target)  # before anything is built: code this CPU cannot run kills runs
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    records_before = len(database)
    tasks = extract_tasks(mod, params, target, variant)
    budget, index = TrialBudget(max_trials), RecordIndex()
    contexts, weights, reports = tune_contexts(tasks, target, variant, work_dir, seed,
                                               num_tuning_cores=num_tuning_cores,
                                               strategy=strategy, budget=budget,
                                               record_index=index)
    budget.tasks = max(1, len(contexts))
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
        "max_trials": int(max_trials),
        "num_trials_per_iter": int(num_trials_per_iter),
        "seed": seed,
        "tasks": [dataclasses.asdict(r) for r in reports],
        "records_before": records_before,
    }
    guard = _InterruptGuard(budget)
    try:
        if contexts:
            tracker = TuningProgress(
                total_trials=records_before + int(max_trials), done_before=records_before,
                tasks=[c.task_name for c in contexts], weights=weights,
                best_before={i: best for i, (_, best) in enumerate(known) if best is not None},
                report=progress)
            with guard.installed(), numpy_seeded(seed), runner_threads(target):
                try:
                    ms.tune_tasks(
                        tasks=contexts,
                        task_weights=weights,
                        work_dir=str(work_dir),
                        max_trials_global=int(max_trials),
                        max_trials_per_task=max_trials_per_task,
                        num_trials_per_iter=int(num_trials_per_iter),
                        builder=builder or ms.builder.LocalBuilder(f_build=build_candidate),
                        runner=runner,
                        database=database,
                        task_scheduler=ms.task_scheduler.GradientBased(
                            seed=-1 if seed is None else int(seed)),
                        measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"),
                                           tracker],
                    )
                except Exception:  # a second Ctrl-C surfaces as whatever TVM made of it
                    if guard.pressed:
                        raise TuningInterrupted() from None
                    raise
    finally:  # also on Ctrl-C: the summary says what the work dir holds
        summary["records"] = len(database)
        summary["interrupted"] = bool(guard.pressed)
        _add_measured(summary, reports, contexts, database)
        (work_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
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


@contextlib.contextmanager
def runner_threads(target: tvm.target.Target):
    """While tuning: MetaSchedule's local runner processes run candidates on ``-num-cores``
    threads (TVM's thread pool reads ``TVM_NUM_THREADS`` when a process starts it; left alone it
    uses half the logical CPUs, one thread on a 2-CPU machine). A value the user set is kept."""
    cores = target.attrs.get("num-cores")
    if cores is None or "TVM_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["TVM_NUM_THREADS"] = str(int(cores))
    try:
        yield
    finally:
        os.environ.pop("TVM_NUM_THREADS", None)


@contextlib.contextmanager
def numpy_seeded(seed: Optional[int]):
    """Within the block numpy's global generator draws from ``seed``; afterwards it continues
    the caller's stream as if the block had not run. ``seed=None``: the stream is left alone."""
    if seed is None:
        yield
        return
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


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


def compile_model(
    database: ms.Database,
    mod: tvm.IRModule,
    params: Optional[Mapping[str, tvm.nd.NDArray]],
    target: TargetLike,
    variant: str = "ours",
) -> tvm.runtime.Module:
    """Build the Relay module with the tuned records of ``database`` (graph executor factory).

    Works on a copy of ``mod``, like :func:`extract_tasks`.
    """
    check_variant(variant)
    return ms.relay_integration.compile_relay(
        database, copy_module(mod), normalize_target(target), params,
        pass_config=pass_config(variant))
