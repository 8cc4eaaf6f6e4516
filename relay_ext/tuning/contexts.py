"""Tuning tasks -> MetaSchedule tune contexts, each with design spaces checked before the search.

    tasks = lowered_tasks(mod, params, target, variant)    # relay_ext.lowering.tasks
    contexts, weights, reports = tune_contexts(tasks, target, variant, work_dir)

Each context carries the variant's rules (:func:`meta_rules.rule_set`), a search that skips
recorded candidates (:mod:`relay_ext.tuning.skip_measured_search`) and a log file of its own in
the work dir; a task whose design spaces TVM cannot generate, or that keeps its TOPI schedule
(:mod:`relay_ext.schedules.topi_only`), gets a report instead of a context.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from tvm import meta_schedule as ms
from tvm.meta_schedule.utils import fork_seed
from tvm.target import Target

import meta_rules
from meta_rules.generic.resilient_space_generator import (
    DesignSpaceGenerationError,
    GenerationOutcome,
    ResilientPostOrderApply,
)

from relay_ext.schedules.topi_only import TOPI_SCHEDULE, topi_only
from relay_ext.tuning.budget import TrialBudget
from relay_ext.tuning.options import StrategyLike
from relay_ext.tuning.skip_measured_search import SkipMeasuredSearch
from relay_ext.tuning.strategy import default_search
from relay_ext.workdir.files import LOG_DIR
from relay_ext.workdir.records import RecordIndex

logger = logging.getLogger(__name__)


def search_strategy(strategy: StrategyLike) -> ms.search_strategy.SearchStrategy:
    """A fresh search strategy for one task: ``"sized"`` is quantfuse's default, MetaSchedule's
    EvolutionarySearch sized for the budget (:func:`relay_ext.tuning.strategy.default_search`);
    any other name is MetaSchedule's (``"evolutionary"`` with TVM's defaults, ``"replay-trace"``
    ...); a strategy object is cloned."""
    if strategy == "sized":
        return default_search()
    if isinstance(strategy, str):
        return ms.search_strategy.SearchStrategy.create(strategy)
    return strategy.clone()


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
    target: Target,
    variant: str,
    work_dir: Union[str, os.PathLike],
    seed: Optional[int] = None,
    num_tuning_cores: Union[str, int] = "physical",
    strategy: StrategyLike = "sized",
    budget: Optional[TrialBudget] = None,
    record_index: Optional[RecordIndex] = None,
) -> Tuple[List[ms.TuneContext], List[float], List[TaskReport]]:
    """A TuneContext per task whose design spaces could be generated, and a report for every task
    (``target`` and ``variant`` already checked, as :func:`relay_ext.tuning.tune` passes them).

    Each context carries a :class:`ResilientPostOrderApply` with ``variant``'s rules and the
    search ``strategy`` wrapped in :class:`SkipMeasuredSearch` (candidates the database already
    holds are not measured again; ``budget`` and ``record_index``, when given, are shared by all
    contexts). Design spaces are generated here once, so a task that TVM cannot generate spaces
    for (after retries with other random states and without the failing rule) is left out: it is
    compiled with TVM's default schedule, and its report says so. So is a task whose only fast
    schedule is TOPI's (:func:`relay_ext.schedules.topi_only.topi_only`; its report's generation
    is :data:`~relay_ext.schedules.topi_only.TOPI_SCHEDULE`): no trial is spent on it.
    """
    contexts, weights, reports = [], [], []
    for index, (task, rand_state) in enumerate(zip(tasks, fork_seed(seed, n=len(tasks)))):
        why = topi_only(task.dispatched[0])
        if why is not None:
            reports.append(TaskReport(task.task_name, float(task.weight), TOPI_SCHEDULE, False, [why]))
            logger.info("task %s keeps TOPI's schedule: %s", task.task_name, why)
            continue
        task_logger = task_log(work_dir, index, task.task_name)
        space = ResilientPostOrderApply(*meta_rules.rule_set(target, variant))  # fresh per task
        inner = search_strategy(strategy)
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
    path = Path(work_dir) / LOG_DIR / f"task_{index:03d}_{task_name[:80]}.log"
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
