"""A tuning database's records grouped per workload, a candidate's identity, a record's run time."""

from __future__ import annotations
import json
import math
import statistics
from typing import Optional, Sequence, Dict, List, Set
import tvm
from tvm import meta_schedule as ms
from tvm.tir.schedule import Trace


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


def valid_run_secs(run_secs: Optional[Sequence[float]]) -> Optional[float]:
    """The mean run time of one measurement, or None when it failed."""
    if not run_secs:
        return None
    values = [float(s) for s in run_secs]
    mean = statistics.fmean(values)
    return None if not math.isfinite(mean) or mean >= FAILED_RUN_SECS else mean


# MetaSchedule writes this run time for a candidate that failed to build or run.
FAILED_RUN_SECS = 1e9
