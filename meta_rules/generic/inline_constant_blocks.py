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
"""

from __future__ import annotations

from typing import List

from tvm.meta_schedule.schedule_rule import PyScheduleRule
from tvm.meta_schedule.utils import derived_object
from tvm.tir.schedule import BlockRV, Schedule

from meta_rules.analysis.constant_blocks import block_of, is_constant_block, try_compute_inline


@derived_object
class InlineConstantBlocks(PyScheduleRule):
    """Compute-inline read-free, single-write blocks that are not outputs of their scope."""

    def _initialize_with_tune_context(self, context) -> None:  # no target-dependent state
        pass

    def apply(self, sch: Schedule, block: BlockRV) -> List[Schedule]:
        if is_constant_block(block_of(sch, block)):
            try_compute_inline(sch, block, "InlineConstantBlocks")
        return [sch]

    def clone(self) -> "InlineConstantBlocks":
        return InlineConstantBlocks()
