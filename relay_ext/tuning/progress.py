"""Progress of a tune: a MetaSchedule measure callback that reports after every measured batch.

    progress = TuningProgress(total_trials=200, done_before=40, tasks=task_names, weights=weights,
                              best_before={0: 1.2e-4}, report=print_progress)
    ms.tune_tasks(..., measure_callbacks=[*ms.MeasureCallback.create("default"), progress])

Each report is a :class:`ProgressSnapshot`: trials done of the total (records already in the work
dir count), tasks with at least one valid measurement, and the estimated model latency, the sum
over tasks of weight x best run time (the estimate MetaSchedule's own task scheduler prints); it
is None until every task has a valid measurement.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
from typing import Callable, Dict, Mapping, Optional, Sequence

from tvm import meta_schedule as ms
from tvm.meta_schedule.utils import derived_object

logger = logging.getLogger(__name__)

# MetaSchedule writes this run time for a candidate that failed to build or run.
FAILED_RUN_SECS = 1e9


@dataclasses.dataclass(frozen=True)
class ProgressSnapshot:
    trials_done: int
    trials_total: int
    tasks_measured: int
    tasks_total: int
    estimated_latency_s: Optional[float]
    last_task: str
    last_batch_failed: int
    last_batch_size: int


def valid_run_secs(run_secs: Optional[Sequence[float]]) -> Optional[float]:
    """The mean run time of one measurement, or None when it failed."""
    if not run_secs:
        return None
    values = [float(s) for s in run_secs]
    mean = statistics.fmean(values)
    return None if not math.isfinite(mean) or mean >= FAILED_RUN_SECS else mean


@derived_object
class TuningProgress(ms.measure_callback.PyMeasureCallback):
    """Keeps the best run time per task and calls ``report`` with a snapshot after each batch."""

    def __init__(
        self,
        total_trials: int,
        done_before: int,
        tasks: Sequence[str],
        weights: Sequence[float],
        best_before: Optional[Mapping[int, float]] = None,
        report: Optional[Callable[[ProgressSnapshot], None]] = None,
    ):
        super().__init__()
        self.total_trials = int(total_trials)
        self.trials_done = int(done_before)
        self.tasks = list(tasks)
        self.weights = [float(w) for w in weights]
        self.best: Dict[int, float] = dict(best_before or {})
        self.report = report or (lambda snapshot: logger.info("%s", describe(snapshot)))

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
              runner_results) -> None:
        failed = 0
        for built, ran in zip(builder_results, runner_results):
            secs = None if built.error_msg or ran.error_msg else valid_run_secs(ran.run_secs)
            if secs is None:
                failed += 1
            elif secs < self.best.get(int(task_id), math.inf):
                self.best[int(task_id)] = secs
        self.trials_done += len(runner_results)
        snapshot = ProgressSnapshot(
            trials_done=self.trials_done, trials_total=self.total_trials,
            tasks_measured=len(self.best), tasks_total=len(self.tasks),
            estimated_latency_s=self.estimated_latency(),
            last_task=self.tasks[int(task_id)], last_batch_failed=failed,
            last_batch_size=len(runner_results))
        self.report(snapshot)

    def estimated_latency(self) -> Optional[float]:
        if len(self.best) < len(self.tasks):
            return None
        return sum(self.weights[i] * self.best[i] for i in range(len(self.tasks)))


def describe(snapshot: ProgressSnapshot) -> str:
    """One line for people: ``trials 48/200 | tasks 3/8 measured | est. latency 1.234 ms``."""
    latency = ("-" if snapshot.estimated_latency_s is None
               else f"{snapshot.estimated_latency_s * 1e3:.3f} ms")
    return (f"trials {snapshot.trials_done}/{snapshot.trials_total} | tasks "
            f"{snapshot.tasks_measured}/{snapshot.tasks_total} measured | est. latency {latency}")


def progress_bar(snapshot: ProgressSnapshot, width: int = 24) -> str:
    """``[#########...............]`` followed by :func:`describe`."""
    total = max(snapshot.trials_total, 1)
    filled = min(width, round(width * snapshot.trials_done / total))
    return "[" + "#" * filled + "." * (width - filled) + "] " + describe(snapshot)
