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
(:func:`meta_rules.base.custom_rules.register_for_every_key`).
"""

from __future__ import annotations

from typing import Iterable, List

from tvm.tir.schedule import BlockRV, Schedule

from meta_rules.analysis.constant_blocks import try_compute_inline
from meta_rules.base.custom_rules import register_for_every_key

RULE_NAME = "compute_inline"


def compute_inline(sch: Schedule, block: BlockRV) -> List[Schedule]:
    """Compute-inline ``block`` when legal; otherwise return the schedule unchanged."""
    try_compute_inline(sch, block, "custom rule compute_inline")
    return [sch]


def register_compute_inline(extra_keys: Iterable[str] = ()) -> List[str]:
    """Register :func:`compute_inline` for every target key; return the names registered now
    (see :func:`register_for_every_key`)."""
    return register_for_every_key(RULE_NAME, lambda key: compute_inline, extra_keys)
