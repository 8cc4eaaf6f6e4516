"""A tune's budget of trials and wall-clock time, shared by its tasks.

    budget = TrialBudget.for_tune(max_trials=200, max_minutes=None, started=time.monotonic())
    strategy = SkipMeasuredSearch(inner, budget)   # every task's search takes its batches here

:class:`TrialBudget` does three things:

* it makes ``max_trials`` exact: MetaSchedule checks its global budget only before a batch, so its
  last batch can overshoot by up to a batch size; batches are cut to what is left;
* it spreads the budget over the tasks: no batch takes more than a fair share,
  ``max(1, trials // tasks)`` in a task's first batch of the tune (the round-robin round of
  MetaSchedule's task scheduler) and ``max(1, left // tasks)`` after it. With ``trials >= tasks``
  every task is therefore measured before the budget runs out, instead of the first task taking a
  whole batch of 16 out of a budget of 16;
* it can carry a wall-clock deadline: once it has passed, no task gets another batch
  (:attr:`TrialBudget.time_up` says so), exactly as when the trials run out; the batches in
  flight are finished and stored. One exception, so that every task of the model gets a tuned
  schedule and a resumed tune always progresses: a task with no record at all and no batch yet
  still gets one candidate measured (while trials are left), in the first round over the tasks
  and until ``late_until`` (a bound on the overrun).

A task that ends early (its design space is used up) calls :meth:`TrialBudget.retire`, and the
tasks still running share what is left.
"""

from __future__ import annotations

import logging
import time
from typing import List, Optional, Tuple

logger = logging.getLogger(__name__)

# The trial budget of a tune limited by time alone (MetaSchedule wants a number).
NO_TRIAL_LIMIT = 1_000_000
# Under a time budget, a task's first batch takes at most this many candidates.
FIRST_BATCH_UNDER_TIME_BUDGET = 2
# After the deadline, tasks never measured still get one candidate each for this fraction of the
# time budget (``--minutes 3``: until 4 minutes), so that every task gets a tuned schedule.
LATE_FIRST_BATCHES_FRACTION = 1 / 3


class TrialBudget:
    """Trials (and optionally wall-clock time) left to hand out, shared by the tasks of one tune;
    see the module docstring.

    ``tasks`` is the number of tasks sharing it (set it once the tasks are known); a task that
    ends calls :meth:`retire`, so the others share what is left. ``deadline`` is a
    ``time.monotonic()`` value after which no batch is handed out; ``first_batch_cap`` caps a
    task's first batch (a time budget wants every task measured early).
    """

    def __init__(self, trials: int, tasks: int = 1, deadline: Optional[float] = None,
                 first_batch_cap: Optional[int] = None):
        self.total = self.left = int(trials)
        self.tasks = max(1, int(tasks))
        self.deadline = deadline
        self.first_batch_cap = first_batch_cap
        self.time_up = False
        self.left_at_deadline = 0  # trials left when the deadline passed (for first batches)
        self.late_first_batches = 0  # first batches of one candidate granted after the deadline
        self.late_until: Optional[float] = None  # no such batch after this time.monotonic()
        self.ended_tasks: List[Tuple[str, str]] = []  # (task name, why), in the order they ended

    @classmethod
    def for_tune(cls, max_trials: Optional[int], max_minutes: Optional[float],
                 started: float) -> "TrialBudget":
        """The budget of one tune: ``max_trials`` new measurements (None: limited by time alone),
        and with ``max_minutes`` a deadline that many minutes after ``started`` (a
        ``time.monotonic()`` value), a first batch of at most
        :data:`FIRST_BATCH_UNDER_TIME_BUDGET` candidates per task, and late first batches for
        :data:`LATE_FIRST_BATCHES_FRACTION` of the time budget past the deadline."""
        budget = cls(NO_TRIAL_LIMIT if max_trials is None else int(max_trials))
        if max_minutes is not None:
            seconds = 60.0 * float(max_minutes)
            budget.deadline = started + seconds
            budget.first_batch_cap = FIRST_BATCH_UNDER_TIME_BUDGET
            budget.late_until = budget.deadline + LATE_FIRST_BATCHES_FRACTION * seconds
        return budget

    def share(self, first_batch: bool) -> int:
        """The most candidates one batch of a task may take."""
        share = max(1, (self.total if first_batch else self.left) // self.tasks)
        if first_batch and self.first_batch_cap is not None:
            share = min(share, max(1, int(self.first_batch_cap)))
        return share

    def take(self, wanted: int, first_batch: bool = False) -> int:
        """Hand out up to ``wanted`` trials (at most a fair share); the number granted."""
        granted = max(0, min(self.left, wanted, self.share(first_batch)))
        self.left -= granted
        return granted

    def spend(self, trials: int) -> None:
        """``trials`` measured outside the search (the rule designs measured first)."""
        self.left = max(0, self.left - int(trials))
        self.total = max(0, self.total - int(trials))

    def out_of_time(self) -> bool:
        """True once the deadline has passed; the budget is then spent (``left`` is 0)."""
        if self.deadline is not None and not self.time_up and time.monotonic() >= self.deadline:
            self.time_up = True
            self.left_at_deadline, self.left = self.left, 0
            logger.info("the time budget is spent: no further batch is handed out")
        return self.time_up

    def take_late_first_batch(self) -> int:
        """After the deadline: one candidate for a task never measured, while trials are left."""
        if not self.late_first_batch_allowed():
            return 0
        self.left_at_deadline -= 1
        self.late_first_batches += 1
        return 1

    def late_first_batch_allowed(self) -> bool:
        return self.left_at_deadline > 0 and (
            self.late_until is None or time.monotonic() < self.late_until)

    def stop(self) -> None:
        """Hand out nothing more, late first batches included (Ctrl-C, a failed write, no device
        left): the batches in flight finish and the tune ends."""
        self.left = 0
        self.left_at_deadline = 0

    def retire(self, task_name: str, why: str) -> None:
        """A task ended before the budget did: the tasks still running share what is left."""
        self.ended_tasks.append((task_name, why))
        self.tasks = max(1, self.tasks - 1)
