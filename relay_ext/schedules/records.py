"""Tuning database -> the records Relay can build: per workload, the fastest record it compiles.

    chosen = compilable_records(database)   # chosen.database: one record per workload
    chosen.skipped                          # the faster records passed over, and why

Relay builds a model with the best record of each workload. A record whose schedule stores a
weight in a one-dimensional layout (see :mod:`meta_rules.cpu.reject_flat_layout_rewrite`) measures
fine but makes the whole model fail to build (TOPI's dense asserts two dimensions). The ``ours``
rule set keeps such candidates out of the search; databases tuned with ``upstream`` or
``legacy``, or before that postproc existed, can still hold one as a task's best. Here each
workload's valid records are tried fastest first, replaying each trace (postprocs included, as
Relay does), and the first that does not flatten a weight is kept; every record passed over is
logged and reported. The database itself is never changed.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import List, Optional, Tuple

import tvm
from tvm import meta_schedule as ms
from tvm import tir

from meta_rules.base.tvm_errors import tvm_error_message
from meta_rules.cpu.amx_intrinsics import register_intrinsics_of
from meta_rules.cpu.reject_flat_layout_rewrite import FlatLayoutRewrite, module_flat_rewrites

from relay_ext.workdir.records import valid_run_secs
from relay_ext.workdir.records import records_by_workload

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class SkippedRecord:
    """A workload's faster record that Relay could not build, and the one used instead."""

    workload: str           # "workload of <its first block>"
    run_ms: float           # the skipped record's mean run time
    reason: str
    used_ms: Optional[float]  # the record used instead; None: none left, TVM's default schedule

    def __str__(self) -> str:
        instead = (f"using the next record ({self.used_ms:.4f} ms)" if self.used_ms is not None
                   else "no other record: TVM's default schedule")
        return f"{self.workload}: skipped a {self.run_ms:.4f} ms record ({self.reason}); {instead}"


@dataclasses.dataclass
class CompilableRecords:
    """The chosen records (``database``) and what was passed over to choose them."""

    database: ms.Database
    skipped: List[SkippedRecord]


def unbuildable_reason(record: ms.database.TuningRecord) -> Optional[str]:
    """Why Relay cannot build with ``record`` (its trace fails to replay, or it flattens a weight
    layout); None when it can."""
    sch = tir.Schedule(record.workload.mod)
    try:
        register_intrinsics_of(record.trace)  # AMXConv's are registered on demand
        record.trace.apply_to_schedule(sch, remove_postproc=False)
    except Exception as err:  # pylint: disable=broad-except
        return f"its trace no longer replays: {tvm_error_message(err, limit=120)}"
    flat: List[FlatLayoutRewrite] = module_flat_rewrites(sch.mod)
    if flat:
        return f"{flat[0]}, which Relay's dense cannot build"
    return None


def _workload_name(mod: tvm.IRModule) -> str:
    """The first block of the workload's function (its anchor op for Relay tasks: T_matmul_NT, ...)."""
    names: List[str] = []
    for _, func in mod.functions.items():
        if isinstance(func, tir.PrimFunc):
            tir.stmt_functor.post_order_visit(
                func.body, lambda n: names.append(n.name_hint) if isinstance(n, tir.Block) else None)
    inner = [name for name in names if name != "root"]
    return f"workload of {inner[0] if inner else 'main'}"


def _valid_records_fastest_first(
    records: List[ms.database.TuningRecord],
) -> List[Tuple[float, ms.database.TuningRecord]]:
    """``records`` (of one workload) that measured, with their mean seconds, fastest first."""
    timed = [(valid_run_secs(record.run_secs), record) for record in records]
    return sorted([(s, r) for s, r in timed if s is not None], key=lambda pair: pair[0])


def compilable_records(database: ms.Database) -> CompilableRecords:
    """Per workload of ``database``, its fastest valid record that Relay can build, in a new
    in-memory database (see the module doc). A database that cannot list its records is used as
    it is."""
    try:
        groups = records_by_workload(database)
    except Exception:  # pylint: disable=broad-except
        logger.debug("%s cannot list its records; compiling with it as it is", type(database).__name__)
        return CompilableRecords(database, [])
    chosen = ms.database.MemoryDatabase()
    skipped: List[SkippedRecord] = []
    for records in groups.values():
        mod = records[0].workload.mod
        timed = _valid_records_fastest_first(records)
        passed_over = []
        for seconds, record in timed:
            reason = unbuildable_reason(record)
            if reason is None:
                workload = chosen.commit_workload(mod)
                chosen.commit_tuning_record(ms.database.TuningRecord(
                    record.trace, workload, record.run_secs, record.target, record.args_info))
                skipped += [SkippedRecord(_workload_name(mod), 1e3 * s, r, 1e3 * seconds)
                            for s, r in passed_over]
                break
            passed_over.append((seconds, reason))
        else:
            skipped += [SkippedRecord(_workload_name(mod), 1e3 * s, r, None) for s, r in passed_over]
    for entry in skipped:
        logger.warning("record not used: %s", entry)
    return CompilableRecords(chosen, skipped)
