"""ReverseInlineAfterInlining: AutoInline's into-producer step, once more after AutoInline.

AutoInline visits each block once, consumers before producers. A block that joins two chains, such
as the residual add of a quantized ResNet block, still has two producers when it is visited, so it
is not reverse-inlined; AutoInline then compute-inlines both chains into it, and nothing visits it
again. Seen by this rule (after AutoInline, the tiled conv's write-back ``conv_local`` being the
only producer left)::

    for ...:                                               # the tiled conv, one kernel
        with T.block("conv_local"):                        # write-back of the accumulator
            conv[v0, v1, v2, v3] = conv_local[v0, v1, v2, v3]
    for i0, i1, i2, i3 in T.grid(1, 64, 56, 56):           # a second kernel
        with T.block("T_add"):                             # conv chain + residual chain
            T_cast[v0, v1, v2, v3] = T.Cast("uint8", T.max(T.min(
                T.q_multiply_shift(conv[v0, v1, v2, v3] - 3, ...)
                + T.q_multiply_shift(T.Cast("int32", residual[v0, v1, v2, v3]), ...), 255), 0))

and after ``reverse_compute_inline(T_add)``, where ``conv`` (int32, in global memory) is gone::

    for ...:
        with T.block("conv_local"):
            T_cast[v0, v1, v2, v3] = T.Cast("uint8", T.max(T.min(
                T.q_multiply_shift(conv_local[v0, v1, v2, v3] - 3, ...)
                + T.q_multiply_shift(T.Cast("int32", residual[v0, v1, v2, v3]), ...), 255), 0))

A block is taken when it is spatial, writes one buffer, is not marked
``meta_schedule.inline_rule = "disable"``, has exactly one producer, and that producer is spatial
and not tensorized (``meta_schedule.auto_tensorize``): what AutoInline's into-producer branch asks
(TVM's ``IsCompleteBlock`` holds no reduction). TVM's ``reverse_compute_inline`` then checks the
rest (a complete producer that is not itself an output block, one buffer read from inside the
scope, an affine access it can invert) and refuses anything else, which leaves the schedule
unchanged. Blocks that no inlining touched get the answer AutoInline
gave them, so the rule only changes what AutoInline's own visiting order missed.

Serves GPU targets (``"gpu"`` in the target's keys), placed right after an AutoInline that has
``into_producer`` and none of the CPU filters (if-then-else, injective/ordered access, disallowed
ops), as every GPU default of TVM 0.19 has. Decided by structure, never by name.
"""

from __future__ import annotations

from typing import Optional

from tvm.meta_schedule.schedule_rule import AutoInline
from tvm.meta_schedule.utils import derived_object
from tvm.target import Target
from tvm.tir.block_scope import StmtSRef
from tvm.tir.schedule import BlockRV, Schedule

from meta_rules.analysis.block_relations import is_spatial, producers
from meta_rules.base.placement import Placement
from meta_rules.base.structural_rule import StructuralRule
from meta_rules.base.unchecked_schedule import reverse_compute_inline

INLINE_RULE_ANN = "meta_schedule.inline_rule"      # tir.attr.meta_schedule_inline_rule
AUTO_TENSORIZE_ANN = "meta_schedule.auto_tensorize"  # tir.attr.meta_schedule_auto_tensorize


def reverse_inline_blocker(sch: Schedule, sref: StmtSRef) -> Optional[str]:
    """Why the block must not be offered to ``reverse_compute_inline``, or None if it may be."""
    block = sref.stmt  # cheapest questions first: the rule asks them of every remaining block
    if len(block.writes) != 1:
        return f"writes {len(block.writes)} buffers"
    if block.init is not None:
        return "not a spatial block"
    found = producers(sch, sref)
    if len(found) != 1:
        return f"{len(found)} producers"
    producer = found[0].stmt
    if AUTO_TENSORIZE_ANN in producer.annotations:
        return "its producer is tensorized"
    if not is_spatial(producer):  # a reduction is never complete: TVM would refuse, at a cost
        return "its producer is not a spatial block"
    if not is_spatial(block):
        return "not a spatial block"
    if str(block.annotations.get(INLINE_RULE_ANN, "")) == "disable":
        return "inlining disabled by annotation"
    return None


@derived_object
class ReverseInlineAfterInlining(StructuralRule, Placement):
    """Reverse-inline a spatial block into its single remaining producer; see the module docstring."""

    def is_target_available(self, target: Target) -> bool:
        return "gpu" in target.keys

    def follows(self, default: object) -> bool:
        """True for an AutoInline that reverse-inlines (``into_producer``) with no extra filter.

        The filters (``disallow_if_then_else``, ``require_injective``, ``require_ordered``,
        ``disallow_op``) are CPU-side choices this rule does not re-check; TVM's GPU defaults set
        none.
        """
        return (isinstance(default, AutoInline) and bool(default.into_producer)
                and not (default.disallow_if_then_else or default.require_injective
                         or default.require_ordered or len(default.disallow_op)))

    def blocker(self, sch: Schedule, block: BlockRV, sref: StmtSRef) -> Optional[str]:
        return reverse_inline_blocker(sch, sref)

    def transform(self, sch: Schedule, block: BlockRV, sref: StmtSRef) -> None:
        # reverse_compute_inline checks the rest, and refuses before it changes anything
        self.attempt(sref, lambda: reverse_compute_inline(sch, block))

    def clone(self) -> "ReverseInlineAfterInlining":
        return ReverseInlineAfterInlining()  # the wrapped class (see structural_rule)
