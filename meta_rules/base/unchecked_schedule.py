"""Schedule calls without the Python type checker that TVM wraps around ``tir.Schedule`` methods.

The fusion rules ask these of every block of every design space; for the small tasks of a model
(a pool, a cast) the checker costs more than the calls themselves (benchmarks/rule_overhead.py).
Each function is the FFI call the ``Schedule`` method makes once its arguments are checked; the
arguments here are already of the right types. Traced primitives are recorded in the trace exactly
as through the methods.
"""

from __future__ import annotations

from typing import List, Optional

from tvm import tir
from tvm.tir.block_scope import StmtSRef
from tvm.tir.schedule import BlockRV, LoopRV, Schedule
from tvm.tir.schedule import _ffi_api as _api

# pylint: disable=no-member


def get_sref(sch: Schedule, block: BlockRV) -> StmtSRef:
    """``sch.get_sref(block)``; raises ValueError when the block no longer exists."""
    return _api.ScheduleGetSRef(sch, block)  # type: ignore[attr-defined]


def live_block_sref(sch: Schedule, block: BlockRV) -> Optional[StmtSRef]:
    """The sref of ``block``, or None when an earlier primitive removed the block (inlined it).

    MetaSchedule's PostOrderApply only hands a rule blocks that still exist; this guards direct
    calls. Any other error from TVM is raised.
    """
    try:
        return get_sref(sch, block)
    except ValueError as err:
        if "no longer exists" in str(err):
            return None
        raise


def block_of(sch: Schedule, block: BlockRV) -> tir.Block:
    """``sch.get(block)``: the ``Block`` statement a BlockRV stands for."""
    return _api.ScheduleGet(sch, block)  # type: ignore[attr-defined]


def block_realize(sch: Schedule, block: BlockRV) -> tir.BlockRealize:
    """The ``BlockRealize`` of ``block`` (its iterator bindings and predicate)."""
    return _api.GetBlockRealize(sch, block)  # type: ignore[attr-defined]


def get_consumers(sch: Schedule, block: BlockRV) -> List[BlockRV]:
    """``sch.get_consumers(block)`` (traced)."""
    return list(_api.ScheduleGetConsumers(sch, block))  # type: ignore[attr-defined]


def get_loops(sch: Schedule, block: BlockRV) -> List[LoopRV]:
    """``sch.get_loops(block)`` (traced)."""
    return list(_api.ScheduleGetLoops(sch, block))  # type: ignore[attr-defined]


def compute_at(sch: Schedule, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool) -> None:
    """``sch.compute_at(block, loop, preserve_unit_loops)`` (traced)."""
    _api.ScheduleComputeAt(sch, block, loop, preserve_unit_loops, -1)  # type: ignore[attr-defined]


def set_scope(sch: Schedule, block: BlockRV, buffer_index: int, scope: str) -> None:
    """``sch.set_scope(block, buffer_index, scope)`` (traced)."""
    _api.ScheduleSetScope(sch, block, buffer_index, scope)  # type: ignore[attr-defined]


def reverse_compute_inline(sch: Schedule, block: BlockRV) -> None:
    """``sch.reverse_compute_inline(block)`` (traced)."""
    _api.ScheduleReverseComputeInline(sch, block)  # type: ignore[attr-defined]
