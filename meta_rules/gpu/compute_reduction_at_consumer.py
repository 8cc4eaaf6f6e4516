"""ComputeReductionAtConsumer: compute a reduction left at the root inside its elementwise consumer.

CrossThreadReduction returns two schedules for a reduction it can parallelise: one where it is
computed at its consumer across threads, and the input schedule unchanged (a reduction with a
small extent gets only the latter). In that one the reduction stays a loop nest of its own at the
root; AutoBind later gives it a kernel of its own and the consumer reads its result back from
global memory. Seen by this rule (``adaptive_avg_pool2d`` + cast, after AutoInline)::

    pool_sum = T.alloc_buffer((1, 512, 1, 1), "int32")            # global
    for ax0, ax1, ax2, ax3, rv0, rv1 in T.grid(1, 512, 1, 1, 7, 7):
        with T.block("pool_sum"):                                  # kernel 1
            with T.init():
                pool_sum[v0, v1, v2, v3] = 0
            pool_sum[v0, v1, v2, v3] = pool_sum[v0, v1, v2, v3] + p0[v0, v1, v2 * 7 + r0, v3 * 7 + r1]
    for ax0, ax1, ax2, ax3 in T.grid(1, 512, 1, 1):
        with T.block("pool_avg"):                                  # kernel 2
            T_cast[v0, v1, v2, v3] = T.Cast("uint8", pool_sum[v0, v1, v2, v3] // 49)

and after ``compute_at(pool_sum, ax3 of pool_avg)`` and ``set_scope(pool_sum, 0, "local")``::

    pool_sum = T.alloc_buffer((1, 512, 1, 1), "int32", scope="local")
    for ax0, ax1, ax2, ax3 in T.grid(1, 512, 1, 1):              # one kernel
        for ax0_1, ax1_1, ax2_1, ax3_1, rv0, rv1 in T.grid(1, 1, 1, 1, 7, 7):
            with T.block("pool_sum"):
                ...                                                # the same reduction, per thread
        with T.block("pool_avg"):
            T_cast[v0, v1, v2, v3] = T.Cast("uint8", pool_sum[v0, v1, v2, v3] // 49)

Each thread of the consumer's kernel reduces the one value it reads, as the reduction's own kernel
would have, so nothing is recomputed: the rule requires that every instance of the consumer read a
different element (one access point, indices injective in the consumer's iterators).

A block is taken when it is a reduction (a block with an init statement, as every reduction is
until the ``RewriteReductionBlock`` postproc) writing one global buffer that is not an output of its
scope, it sits in a plain loop nest of its own under the root (serial, unannotated loops holding
nothing else: neither tiled, bound nor moved by an earlier rule), and it has exactly one consumer,
a spatial block that reads it at one point, injectively, and has a loop to compute it at.
Decided by structure, never by name.

Serves GPU targets (``"gpu"`` in the target's keys), placed right after ``CrossThreadReduction``.
"""

from __future__ import annotations

from typing import Optional

from tvm.meta_schedule.schedule_rule import CrossThreadReduction
from tvm.meta_schedule.utils import derived_object
from tvm.target import Target
from tvm.tir.block_scope import StmtSRef
from tvm.tir.schedule import BlockRV, Schedule
from tvm.tir.schedule.analysis import is_output_block

from meta_rules.analysis.block_relations import (GLOBAL_SCOPES, consumers, in_own_plain_loops,
                                                 injective_in_block_iters, is_spatial,
                                                 single_point_read, under_a_loop)
from meta_rules.base.placement import Placement
from meta_rules.base.structural_rule import StructuralRule
from meta_rules.base.unchecked_schedule import compute_at, get_consumers, get_loops, set_scope


def reduction_fusion_blocker(sch: Schedule, block_rv: BlockRV, sref: StmtSRef) -> Optional[str]:
    """Why the block must not be computed at its consumer's innermost loop, or None if it may."""
    # Cheapest questions first: the rule asks them of every block of every design space.
    if sref.parent is None:
        return "the function's root block"
    block = sref.stmt
    if block.init is None:  # every reduction has one until the RewriteReductionBlock postproc
        return "not a reduction"
    if not in_own_plain_loops(sch, block_rv, sref):
        return "not in a plain loop nest of its own (tiled, bound or moved)"
    if len(block.writes) != 1:
        return f"writes {len(block.writes)} buffers"
    buffer = block.writes[0].buffer
    if buffer.scope() not in GLOBAL_SCOPES:
        return f"writes a {buffer.scope()} buffer"
    if is_output_block(sch, block_rv):
        return "an output block"
    found = consumers(sch, sref)
    if len(found) != 1:
        return f"{len(found)} consumers"
    consumer = found[0].stmt
    if not is_spatial(consumer) or len(consumer.writes) != 1:
        return "its consumer is not elementwise"
    if not under_a_loop(found[0]):
        return "its consumer has no loop"
    indices = single_point_read(consumer, buffer)
    if indices is None:
        return "its consumer reads it at several points"
    if not injective_in_block_iters(indices, consumer):
        return "its consumer reads some element more than once"
    return None


@derived_object
class ComputeReductionAtConsumer(StructuralRule, Placement):
    """Compute a root-level reduction at its elementwise consumer's innermost loop, in a local
    buffer; see the module docstring."""

    def is_target_available(self, target: Target) -> bool:
        return "gpu" in target.keys

    def follows(self, default: object) -> bool:
        return isinstance(default, CrossThreadReduction)

    def blocker(self, sch: Schedule, block: BlockRV, sref: StmtSRef) -> Optional[str]:
        return reduction_fusion_blocker(sch, block, sref)

    def transform(self, sch: Schedule, block: BlockRV, sref: StmtSRef) -> None:
        (consumer,) = get_consumers(sch, block)
        loop = get_loops(sch, consumer)[-1]
        # compute_at refuses before it changes anything; the trace then keeps the two lookups
        # above, pure and unused
        if self.attempt(sref, lambda: compute_at(sch, block, loop, preserve_unit_loops=True)):
            set_scope(sch, block, 0, "local")  # legal: the buffer is allocated here, no output

    def clone(self) -> "ComputeReductionAtConsumer":
        return ComputeReductionAtConsumer()  # the wrapped class (see structural_rule)
