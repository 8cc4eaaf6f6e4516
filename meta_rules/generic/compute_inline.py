"""The custom schedule rule ``compute_inline``, reachable for every target.

A block annotated ``schedule_rule = "compute_inline"``::

    with T.block("compile_engine_const"):
        T.block_attr({"schedule_rule": "compute_inline"})
        T.reads()
        T.writes(compile_engine_const[()])
        compile_engine_const[()] = 3

is handed by MetaSchedule's ApplyCustomRule, the first rule of every default rule set, to the
PackedFunc ``meta_schedule.<key>.compute_inline`` for the first key of the target that has one.
ApplyCustomRule knows no generic fallback, so the same function is registered under
``meta_schedule.generic.compute_inline`` and under every key that TVM's target kinds carry
(:func:`meta_rules.base.custom_rules.register_for_every_key`). :func:`try_compute_inline`, the
rule's one step, is what :class:`~meta_rules.generic.inline_constant_blocks.InlineConstantBlocks`
does to a constant block too.
"""

from __future__ import annotations

import logging
from typing import Iterable, List

from tvm import tir
from tvm.tir.schedule import BlockRV, Schedule
from tvm.tir.schedule.analysis import is_output_block

from meta_rules.base.custom_rules import register_for_every_key
from meta_rules.base.tvm_errors import tvm_error_message

logger = logging.getLogger(__name__)

RULE_NAME = "compute_inline"


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


def compute_inline(sch: Schedule, block: BlockRV) -> List[Schedule]:
    """Compute-inline ``block`` when legal; otherwise return the schedule unchanged."""
    try_compute_inline(sch, block, "custom rule compute_inline")
    return [sch]


def register_compute_inline(extra_keys: Iterable[str] = ()) -> List[str]:
    """Register :func:`compute_inline` for every target key; return the names registered now
    (see :func:`register_for_every_key`)."""
    return register_for_every_key(RULE_NAME, lambda key: compute_inline, extra_keys)
