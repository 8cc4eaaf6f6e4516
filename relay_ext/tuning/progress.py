"""Progress of a tune: a MetaSchedule measure callback that reports after every measured batch.

    progress = TuningProgress(total_trials=200, done_before=40, tasks=task_names, weights=weights,
                              best_before={0: 1.2e-4}, report=print_progress)
    ms.tune_tasks(..., measure_callbacks=[*ms.MeasureCallback.create("default"), progress])

Each report is a :class:`ProgressSnapshot`: trials done of the total (records already in the work
dir count), tasks with at least one valid measurement, and the estimated model latency, the sum
over tasks of weight x best run time (the estimate MetaSchedule's own task scheduler prints); it
is None until every task has a valid measurement. Given the time the tune started (and its deadline,
under a time budget), a snapshot also says the time elapsed and the time left: until the deadline,
or else estimated from the rate of this run's trials so far.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import Callable, Dict, Mapping, Optional, Sequence, Tuple

from tvm import meta_schedule as ms
from tvm.meta_schedule.utils import derived_object
from relay_ext.workdir.records import valid_run_secs

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ProgressSnapshot:
    trials_done: int
    trials_total: Optional[int]  # None: the tune is limited by time alone
    tasks_measured: int
    tasks_total: int
    estimated_latency_s: Optional[float]
    last_task: str
    last_batch_failed: int
    last_batch_size: int
    elapsed_s: Optional[float] = None  # since the tune started
    remaining_s: Optional[float] = None  # until the deadline, or estimated
    remaining_estimated: bool = False  # remaining_s is an estimate from the trial rate


@derived_object
class TuningProgress(ms.measure_callback.PyMeasureCallback):
    """Keeps the best run time per task and calls ``report`` with a snapshot after each batch."""

    def __init__(
        self,
        total_trials: Optional[int],
        done_before: int,
        tasks: Sequence[str],
        weights: Sequence[float],
        best_before: Optional[Mapping[int, float]] = None,
        report: Optional[Callable[[ProgressSnapshot], None]] = None,
        started: Optional[float] = None,
        deadline: Optional[float] = None,
        untuned_tasks: int = 0,
    ):
        super().__init__()
        # tasks of the model that are not tuned (their design spaces failed): they count in the
        # task total, and no latency is estimated while they run with TVM's default schedule
        self.untuned_tasks = int(untuned_tasks)
        self.total_trials = None if total_trials is None else int(total_trials)
        self.trials_done = self.done_before = int(done_before)
        self.started = started  # time.monotonic() when the tune started
        self.deadline = deadline  # time.monotonic() when its time budget runs out
        # (time, trials done) of the first report: the trial rate is measured from there, as the
        # first batches come only after start-up and a whole round of the search over the tasks
        self._origin: Optional[Tuple[float, int]] = None
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
        now = time.monotonic()
        if self._origin is None:
            self._origin = (now, self.trials_done)
        elapsed, remaining, estimated = self.times(now)
        snapshot = ProgressSnapshot(
            trials_done=self.trials_done, trials_total=self.total_trials,
            tasks_measured=len(self.best), tasks_total=len(self.tasks) + self.untuned_tasks,
            estimated_latency_s=self.estimated_latency(),
            last_task=self.tasks[int(task_id)], last_batch_failed=failed,
            last_batch_size=len(runner_results), elapsed_s=elapsed, remaining_s=remaining,
            remaining_estimated=estimated)
        self.report(snapshot)

    def times(self, now: Optional[float] = None):
        """(elapsed, remaining, remaining is an estimate) in seconds; None where unknown. Without
        a deadline the time left is this run's time per trial since its first report x the trials
        left (unknown at the first report)."""
        if self.started is None:
            return None, None, False
        now = time.monotonic() if now is None else now
        elapsed = max(0.0, now - self.started)
        if self.deadline is not None:
            left = max(0.0, self.deadline - now)
            if self.total_trials is None:
                return elapsed, left, False
        else:
            left = None
        since, done_then = self._origin or (self.started, self.done_before)
        done_here = self.trials_done - done_then
        if self.total_trials is None or done_here <= 0:
            return elapsed, left, False
        by_rate = max(0.0, now - since) / done_here * max(0, self.total_trials - self.trials_done)
        if left is not None and left <= by_rate:
            return elapsed, left, False  # the deadline comes first
        return elapsed, by_rate, True

    def estimated_latency(self) -> Optional[float]:
        if len(self.best) < len(self.tasks) or self.untuned_tasks:
            return None
        return sum(self.weights[i] * self.best[i] for i in range(len(self.tasks)))


def clock(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return (f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours
            else f"{rest // 60}:{rest % 60:02d}")


def describe(snapshot: ProgressSnapshot) -> str:
    """One line for people: ``trials 48/200 | tasks 3/8 measured | est. latency 1.234 ms``, then
    ``| 1:05 elapsed, 2:55 left`` when the snapshot knows the times (``~2:55 left``: estimated from
    the trial rate)."""
    latency = ("-" if snapshot.estimated_latency_s is None
               else f"{snapshot.estimated_latency_s * 1e3:.3f} ms")
    trials = (f"{snapshot.trials_done}" if snapshot.trials_total is None
              else f"{snapshot.trials_done}/{snapshot.trials_total}")
    line = (f"trials {trials} | tasks {snapshot.tasks_measured}/{snapshot.tasks_total} measured "
            f"| est. latency {latency}")
    if snapshot.elapsed_s is not None:
        line += f" | {clock(snapshot.elapsed_s)} elapsed"
        if snapshot.remaining_s is not None:
            line += (f", {'~' if snapshot.remaining_estimated else ''}"
                     f"{clock(snapshot.remaining_s)} left")
    return line


def done_fraction(snapshot: ProgressSnapshot) -> float:
    """How far the tune is, 0..1: by trials, or by time when that is further (a time budget)."""
    fractions = []
    if snapshot.trials_total is not None:
        fractions.append(snapshot.trials_done / max(snapshot.trials_total, 1))
    if snapshot.elapsed_s is not None and snapshot.remaining_s is not None and (
            not snapshot.remaining_estimated):
        fractions.append(snapshot.elapsed_s / max(snapshot.elapsed_s + snapshot.remaining_s, 1e-9))
    return min(1.0, max(fractions, default=0.0))


def progress_bar(snapshot: ProgressSnapshot, width: int = 24) -> str:
    """``[#########...............]`` followed by :func:`describe`."""
    filled = min(width, round(width * done_fraction(snapshot)))
    return "[" + "#" * filled + "." * (width - filled) + "] " + describe(snapshot)
