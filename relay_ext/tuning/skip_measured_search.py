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

    budget = TrialBudget(200)  # shared by all tasks: batches are cut so a tune measures 200
    strategy = SkipMeasuredSearch(ms.search_strategy.EvolutionarySearch(), budget)
    context = ms.TuneContext(mod=..., search_strategy=strategy, ...)

The optional :class:`TrialBudget` is shared by the tasks of one tune. It does two things:

* it makes ``max_trials`` exact: MetaSchedule checks its global budget only before a batch, so its
  last batch can overshoot by up to a batch size; batches are cut to what is left;
* it spreads the budget over the tasks: no batch takes more than a fair share,
  ``max(1, trials // tasks)`` in a task's first batch of the tune (the round-robin round of
  MetaSchedule's task scheduler) and ``max(1, left // tasks)`` after it. With ``trials >= tasks``
  every task is therefore measured before the budget runs out, instead of the first task taking a
  whole batch of 16 out of a budget of 16.
"""

from __future__ import annotations

import json
import logging
from typing import Dict, List, Optional, Set

import tvm
from tvm import meta_schedule as ms
from tvm.meta_schedule.utils import derived_object
from tvm.tir.schedule import Trace

logger = logging.getLogger(__name__)

# Rounds of the inner search in one call that may come back with only known candidates before the
# batch is given up (the inner search gets new picks each round, so this is rarely reached).
MAX_ALL_KNOWN_ROUNDS = 8


def trace_key(trace: Trace) -> str:
    """The identity of a candidate: its trace without postprocessing, as JSON."""
    return json.dumps(trace.simplified(remove_postproc=True).as_json(), sort_keys=True)


def workload_hash(mod: tvm.IRModule) -> int:
    return int(tvm.ir.structural_hash(mod))


def records_by_workload(database: ms.Database) -> Dict[int, List[ms.database.TuningRecord]]:
    """The records of ``database`` grouped by the :func:`workload_hash` of their workload."""
    groups: Dict[int, List[ms.database.TuningRecord]] = {}
    hashes: Dict[int, int] = {}  # records share their workload object: hash each one once
    for record in database.get_all_tuning_records():
        handle = record.workload.handle.value
        if handle not in hashes:
            hashes[handle] = workload_hash(record.workload.mod)
        groups.setdefault(hashes[handle], []).append(record)
    return groups


class RecordIndex:
    """The records of a database grouped per workload, and their trace keys, computed once per
    database state and shared by the tasks of a tune (each task's ``pre_tuning`` asks for its
    own workload; regrouping every record for every task would cost tasks x records)."""

    def __init__(self):
        self._state = None
        self._groups: Dict[int, List[ms.database.TuningRecord]] = {}
        self._keys: Dict[int, Set[str]] = {}

    def records(self, database: ms.Database, mod: tvm.IRModule) -> List[ms.database.TuningRecord]:
        state = (database.handle.value, len(database))
        if state != self._state:
            self._groups, self._keys, self._state = records_by_workload(database), {}, state
        return self._groups.get(workload_hash(mod), [])

    def keys(self, database: ms.Database, mod: tvm.IRModule) -> Set[str]:
        records = self.records(database, mod)
        h = workload_hash(mod)
        if h not in self._keys:
            self._keys[h] = {trace_key(r.trace) for r in records}
        return self._keys[h]


class TrialBudget:
    """Trials left to hand out, shared by the tasks of one tune; see the module docstring.

    ``tasks`` is the number of tasks sharing it (set it once the tasks are known).
    """

    def __init__(self, trials: int, tasks: int = 1):
        self.total = self.left = int(trials)
        self.tasks = max(1, int(tasks))

    def share(self, first_batch: bool) -> int:
        """The most candidates one batch of a task may take."""
        return max(1, (self.total if first_batch else self.left) // self.tasks)

    def take(self, wanted: int, first_batch: bool = False) -> int:
        granted = max(0, min(self.left, wanted, self.share(first_batch)))
        self.left -= granted
        return granted


@derived_object
class SkipMeasuredSearch(ms.search_strategy.PySearchStrategy):
    """Delegates to ``inner`` and filters out candidates the database already holds."""

    def __init__(self, inner: ms.search_strategy.SearchStrategy,
                 budget: Optional[TrialBudget] = None, records: Optional[RecordIndex] = None):
        super().__init__()
        self.inner = inner
        self.budget = budget
        self.records = records or RecordIndex()
        self.known: Set[str] = set()
        self.skipped = 0
        self.batches = 0
        self._mod: Optional[tvm.IRModule] = None

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self._mod = context.mod
        self.inner._initialize_with_tune_context(context)  # pylint: disable=protected-access

    def pre_tuning(self, max_trials, num_trials_per_iter, design_spaces, database=None,
                   cost_model=None) -> None:
        self.known = set()
        self.skipped = 0
        self.batches = 0
        if database is not None and self._mod is not None:
            self.known = set(self.records.keys(database, self._mod))
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        if self.skipped:
            logger.info("skipped %d candidates already in the database", self.skipped)
        self.inner.post_tuning()

    def generate_measure_candidates(self) -> Optional[List[ms.MeasureCandidate]]:
        for _ in range(MAX_ALL_KNOWN_ROUNDS):
            if self.budget is not None and self.budget.left <= 0:
                return None
            candidates = self.inner.generate_measure_candidates()
            if candidates is None:
                return None
            fresh, keys = [], []
            for candidate in candidates:
                key = trace_key(candidate.sch.trace)
                if key in self.known or key in keys:
                    self.skipped += 1
                else:
                    keys.append(key)
                    fresh.append(candidate)
            if self.budget is not None:
                fresh = fresh[:self.budget.take(len(fresh), first_batch=self.batches == 0)]
            if fresh:
                self.known.update(keys[:len(fresh)])  # the ones cut off may come back later
                self.batches += 1
                return fresh
        return None

    def notify_runner_results(self, measure_candidates, results) -> None:
        self.inner.notify_runner_results(measure_candidates, results)

    def clone(self) -> ms.search_strategy.SearchStrategy:
        return SkipMeasuredSearch(self.inner.clone(), self.budget, self.records)
