"""Pure analysis of constant-producing blocks, shared by the schedule rules of this package.

A *constant block* is one whose value does not depend on any buffer: it reads nothing and writes
exactly one buffer. Relay's scalar constants (``compile_engine_const``), ``full``/broadcast
constants and index-only blocks such as an ``arange`` all have this shape::

    with T.block("compile_engine_const"):        with T.block("T_arange"):
        vi = T.axis.spatial(1, 0)                     v0 = T.axis.spatial(16, i0)
        T.reads()                                     T.reads()
        T.writes(compile_engine_const[()])            T.writes(T_arange[v0])
        compile_engine_const[()] = 3                  T_arange[v0] = v0 * 2

Everything here is decided from the block's structure, never from its name.
"""

from __future__ import annotations

import logging

from tvm import tir
from tvm.tir.schedule import BlockRV, Schedule
from tvm.tir.schedule import _ffi_api as _schedule_api
from tvm.tir.schedule.analysis import is_output_block

from meta_rules.base.tvm_errors import tvm_error_message

logger = logging.getLogger(__name__)


def is_constant_block(block: tir.Block) -> bool:
    """True when ``block`` reads no buffer and writes exactly one."""
    return len(block.reads) == 0 and len(block.writes) == 1


def block_of(sch: Schedule, block_rv: BlockRV) -> tir.Block:
    """``sch.get(block_rv)`` without the Python type checker around ``Schedule.get``.

    The schedule rules call this once per block of every design space; the type checker is most
    of the cost of a call (measured in benchmarks/rule_overhead.py).
    """
    return _schedule_api.ScheduleGet(sch, block_rv)  # type: ignore[attr-defined]


def is_scalar_constant_block(block: tir.Block) -> bool:
    """True for a constant block whose output buffer is 0-d (what TVM's InlineConstantScalars takes)."""
    return is_constant_block(block) and len(block.writes[0].buffer.shape) == 0


def try_compute_inline(sch: Schedule, block_rv: BlockRV, why: str) -> bool:
    """Compute-inline ``block_rv`` when that is legal; return whether it was inlined.

    An output block of its scope, or any block ``compute_inline`` refuses, is left exactly as it was
    (a refused schedule primitive does not change the schedule or its trace) and the refusal is
    logged at DEBUG, so no exception reaches MetaSchedule.
    """
    if is_output_block(sch, block_rv):
        logger.debug("%s: block %r writes an output of its scope; not inlined",
                     why, sch.get(block_rv).name_hint)
        return False
    try:
        sch.compute_inline(block_rv)
    except tir.ScheduleError as err:  # compute_inline checks legality before it changes anything
        logger.debug("%s: compute_inline refused block %r: %s",
                     why, sch.get(block_rv).name_hint, tvm_error_message(err))
        return False
    return True
