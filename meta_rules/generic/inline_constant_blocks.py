"""InlineConstantBlocks: inline every constant-producing block before AutoInline sees its consumers.

Matches a block that reads no buffer, writes exactly one, is not an output block of its scope, and
can legally be compute-inlined::

    with T.block("compile_engine_const"):            # 0-d scalar (Relay's constants)
        T.reads()
        T.writes(compile_engine_const[()])
        compile_engine_const[()] = 3
    with T.block("T_full"):                           # any shape: full / broadcast constants
        T.reads()
        T.writes(T_full[v0])
        T_full[v0] = 7
    with T.block("T_arange"):                         # index-only values
        T.reads()
        T.writes(T_arange[v0])
        T_arange[v0] = v0

TVM's ``InlineConstantScalars`` takes only the first form. Every such block is a second producer of
its consumer (``T_add = conv + compile_engine_const``), which stops AutoInline from
reverse-inlining the quantized epilogue into the conv/dense when the rule reaches the consumer
first; inlining the constants up front removes that producer. Decided by structure, never by name.

Serves every target; placed right after ``ApplyCustomRule`` (first where a rule set has none), so
the constants are gone before any tiling or AutoInline rule looks at their consumers.
"""

from __future__ import annotations

from typing import List

from tvm.meta_schedule.schedule_rule import ApplyCustomRule, PyScheduleRule
from tvm.meta_schedule.utils import derived_object
from tvm.tir.schedule import BlockRV, Schedule

from meta_rules.analysis.constant_blocks import is_constant_block
from meta_rules.base.placement import Placement
from meta_rules.base.unchecked_schedule import block_of
from meta_rules.generic.compute_inline import try_compute_inline


@derived_object
class InlineConstantBlocks(PyScheduleRule, Placement):
    """Compute-inline read-free, single-write blocks that are not outputs of their scope."""

    leads_otherwise = True

    def follows(self, default: object) -> bool:
        return isinstance(default, ApplyCustomRule)

    def _initialize_with_tune_context(self, context) -> None:  # no target-dependent state
        pass

    def apply(self, sch: Schedule, block: BlockRV) -> List[Schedule]:
        if is_constant_block(block_of(sch, block)):
            try_compute_inline(sch, block, "InlineConstantBlocks")
        return [sch]

    def clone(self) -> "InlineConstantBlocks":
        return InlineConstantBlocks()
