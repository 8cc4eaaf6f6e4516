"""A search strategy that never sends a candidate the tuning database already holds.

MetaSchedule's EvolutionarySearch remembers only what it measured itself in the current run
(TVM 0.19, ``evolutionary_search.cc``: "TODO: add records from the database to avoid
re-measuring"), so a resumed tune measures again candidates whose records are already in the work
dir. :class:`SkipMeasuredSearch` wraps any search strategy and drops, from every batch, the
candidates whose trace is already recorded for the task's workload (failed records included:
measuring them again fails again). The inner strategy is told only about what was measured, so
its trial count counts new measurements.

A candidate's key is its trace without the postprocessing part, in JSON: the form in which
MetaSchedule's ``AddToDatabase`` stores it.

    budget = TrialBudget(200)  # relay_ext.tuning.budget: shared by all tasks of the tune
    strategy = SkipMeasuredSearch(ms.search_strategy.EvolutionarySearch(), budget)
    context = ms.TuneContext(mod=..., search_strategy=strategy, ...)

Each batch is cut to what the optional :class:`~relay_ext.tuning.budget.TrialBudget` grants (an
exact trial count, a fair share per task, a deadline; see that module).

An exhausted task ends (its ``generate_measure_candidates`` returns None, which MetaSchedule's
task scheduler takes as "this task is finished"), and its share of the budget goes to the tasks
still running (:meth:`TrialBudget.retire`). A task is exhausted when

* the inner search returned no candidate at all: TVM's EvolutionarySearch found, among a whole
  population of fresh samples and their evolved offspring, nothing it had not measured;
* or, for an EvolutionarySearch whose population is at least :data:`SMALL_SPACE_POPULATION_RATIO`
  times the batch it was asked for, a round came back short (fewer candidates than asked): its
  population held fewer new candidates than one batch, so the design space is all but used up.
  That round's candidates are measured; the task ends at its next call, without another round
  that would sample hundreds of candidates only to find them all known.

Candidates that a batch cut by the budget leaves out are kept and measured first in the task's
next batch (the inner search marks what it returned as measured and would not offer them again).

Under a time budget (``TrialBudget.first_batch_cap`` set), the first batch of a task that has no
record yet is drawn at random from its design spaces (MetaSchedule's ReplayTrace) instead of by the
inner search: before anything is measured the cost model predicts random scores, so an
evolutionary round (a population sampled and evolved, seconds per task for a convolution) would
pick no better, and over a model's many tasks it would spend a short time budget before every task
is measured. The inner search still learns of the results (they reach the database and the cost
model), so its first round starts from them.
"""

from __future__ import annotations

import logging
from typing import List, Optional, Set, Tuple

import tvm
from tvm import meta_schedule as ms
from tvm.meta_schedule.utils import derived_object
from relay_ext.tuning.budget import TrialBudget
from relay_ext.workdir.records import RecordIndex, trace_key

logger = logging.getLogger(__name__)

# Rounds of the inner search in one call that may come back with only known candidates before the
# task ends (the inner search gets new picks each round, so this is rarely reached; a resumed tune
# whose database holds what the search proposes first is where it happens).
MAX_ALL_KNOWN_ROUNDS = 8

# A round of an EvolutionarySearch with at least this many times as many candidates in its
# population as the batch it was asked for, that came back short, means the design space is used up.
SMALL_SPACE_POPULATION_RATIO = 4


@derived_object
class SkipMeasuredSearch(ms.search_strategy.PySearchStrategy):
    """Delegates to ``inner`` and filters out candidates the database already holds; ends the
    task when its design space is exhausted (see the module docstring)."""

    def __init__(self, inner: ms.search_strategy.SearchStrategy,
                 budget: Optional[TrialBudget] = None, records: Optional[RecordIndex] = None):
        super().__init__()
        self.inner = inner
        self.budget = budget
        self.records = records or RecordIndex()
        self.known: Set[str] = set()
        self.skipped = 0
        self.batches = 0
        self.rounds = 0  # rounds of the inner search
        self.ended: Optional[str] = None  # why the task ended, once it has
        self._mod: Optional[tvm.IRModule] = None
        self._task_name = "task"
        self._pending: List[Tuple[str, ms.MeasureCandidate]] = []
        self._small_space = False
        self._max_trials = 0
        self._per_iter = 0
        self._inner_done = 0  # candidates the inner search was told the results of
        self._had_records = False  # the database held records of this task when tuning started
        self._late = False  # this call runs after the deadline, for the task's first batch
        self._context: Optional[ms.TuneContext] = None
        self._design_spaces: List[tvm.tir.Schedule] = []
        self.random_first_batch = False  # the first batch was drawn at random (see above)

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self._context = context
        self._mod = context.mod
        self._task_name = str(context.task_name or "task")
        self.inner._initialize_with_tune_context(context)  # pylint: disable=protected-access

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None,
                   cost_model=None) -> None:
        self.known = set()
        self.skipped = self.batches = self.rounds = self._inner_done = 0
        self.ended, self._pending, self._small_space = None, [], False
        self._max_trials, self._per_iter = int(max_trials), int(num_trials_per_iter)
        if database is not None and self._mod is not None:
            self.known = set(self.records.keys(database, self._mod))
        self._had_records = bool(self.known)
        self._design_spaces = list(design_spaces)
        self.random_first_batch = False
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        if self.skipped:
            logger.info("skipped %d candidates already in the database", self.skipped)
        self.inner.post_tuning()

    def _end(self, why: str) -> None:
        if self.ended is None:
            self.ended = why
            logger.info("task %s ends: %s", self._task_name, why)
            if self.budget is not None and why != "budget spent":
                self.budget.retire(self._task_name, why)
        return None

    def _asked(self) -> int:
        """How many candidates the inner search's next round is asked for."""
        return max(0, min(self._per_iter, self._max_trials - self._inner_done))

    def _population_is_large(self, asked: int) -> bool:
        population = getattr(self.inner, "population_size", None)
        return population is not None and asked > 0 and (
            int(population) >= SMALL_SPACE_POPULATION_RATIO * asked)

    def _grant(self, fresh: List[Tuple[str, ms.MeasureCandidate]]):
        """Cut ``fresh`` to the budget; what is cut off waits for the task's next batch."""
        if self.budget is not None:
            granted = (self.budget.take_late_first_batch() if self._late
                       else self.budget.take(len(fresh), first_batch=self.batches == 0))
            fresh, self._pending = fresh[:granted], fresh[granted:] + self._pending
        if not fresh:
            return None
        self.batches += 1
        return [candidate for _, candidate in fresh]

    def generate_measure_candidates(self) -> Optional[List[ms.MeasureCandidate]]:
        if self.ended is not None:
            return None
        self._late = False
        if self.budget is not None and self.budget.out_of_time():
            if self.batches or self._had_records or not self.budget.late_first_batch_allowed():
                return self._end("budget spent")
            self._late = True  # a task never measured: one candidate, see the module docstring
        elif self.budget is not None and self.budget.left <= 0:
            return self._end("budget spent")
        if self._pending:  # left over from a batch the budget cut: no new round needed
            pending, self._pending = self._pending, []
            batch = self._grant(pending)
            if batch is not None:
                return batch
        if self._small_space:
            return self._end("design space exhausted (the last round of the search came back "
                             "short)")
        if self._wants_random_first_batch():
            fresh = self._fresh(self._random_candidates(
                self.budget.share(first_batch=True) if not self._late else 1))
            if fresh:
                self.random_first_batch = True
                batch = self._grant(fresh)
                if batch is not None:
                    return batch
                return self._end("budget spent")
            # nothing valid drawn at random: let the inner search try
        for _ in range(MAX_ALL_KNOWN_ROUNDS):
            asked = self._asked()
            candidates = self.inner.generate_measure_candidates()
            self.rounds += 1
            if candidates is None:
                return self._end("the search strategy has no more candidates")
            if len(candidates) == 0:
                return self._end("design space exhausted (the search found no candidate it had "
                                 "not measured)")
            if len(candidates) < asked and self._population_is_large(asked):
                self._small_space = True
            fresh = self._fresh(candidates)
            if fresh:
                batch = self._grant(fresh)
                if batch is not None:
                    return batch
                return self._end("budget spent")
            if self._small_space:
                return self._end("design space exhausted (every candidate of the last round "
                                 "is in the database)")
        return self._end(f"{MAX_ALL_KNOWN_ROUNDS} rounds of the search in a row found only "
                         "candidates already in the database")

    def _fresh(self, candidates) -> List[Tuple[str, ms.MeasureCandidate]]:
        """``candidates`` without those already known (recorded or handed out), keyed."""
        fresh: List[Tuple[str, ms.MeasureCandidate]] = []
        keys: Set[str] = set()
        for candidate in candidates:
            key = trace_key(candidate.sch.trace)
            if key in self.known or key in keys:
                self.skipped += 1
            else:
                keys.add(key)
                fresh.append((key, candidate))
        self.known.update(keys)
        return fresh

    def _wants_random_first_batch(self) -> bool:
        return (self.budget is not None and self.budget.first_batch_cap is not None
                and self.batches == 0 and not self._had_records and self._context is not None
                and bool(self._design_spaces))

    def _random_candidates(self, count: int) -> List[ms.MeasureCandidate]:
        """``count`` candidates drawn at random from the design spaces, postprocessed (invalid
        draws are dropped, so fewer may come back)."""
        replay = ms.search_strategy.ReplayTrace()
        replay._initialize_with_tune_context(self._context)  # pylint: disable=protected-access
        replay.pre_tuning(max_trials=count, num_trials_per_iter=count,
                          design_spaces=self._design_spaces)
        try:
            return list(replay.generate_measure_candidates() or [])
        finally:
            replay.post_tuning()

    def notify_runner_results(self, measure_candidates, results) -> None:
        self._inner_done += len(results)
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self) -> ms.search_strategy.SearchStrategy:
        return SkipMeasuredSearch(self.inner.clone(), self.budget, self.records)
