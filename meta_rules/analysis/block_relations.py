"""Pure analysis of blocks and their neighbours in a schedule, shared by the fusion rules.

Nothing here changes a schedule or adds to its trace: blocks are looked at through their srefs and
the dependence graph TVM keeps per scope (``BlockScope``), the way TVM's own rules read them in C++
(``GetProducers``/``GetConsumers`` of ``tir/schedule/analysis``). Schedule primitives such as
``Schedule.get_producers`` would record an instruction in the trace of every design space.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import tvm
from tvm import arith, tir
from tvm.tir.block_scope import DepKind, StmtSRef
from tvm.tir.schedule import BlockRV, Schedule

from meta_rules.base.unchecked_schedule import block_realize

GLOBAL_SCOPES = ("", "global")
_PRODUCING_DEPS = (DepKind.RAW, DepKind.WAW)


def scope_root(sref: StmtSRef) -> StmtSRef:
    """The sref of the block whose scope ``sref`` lies in (its closest enclosing block)."""
    parent = sref.parent
    while not isinstance(parent.stmt, tir.Block):
        parent = parent.parent
    return parent


def _neighbours(sch: Schedule, sref: StmtSRef, producers: bool) -> List[StmtSRef]:
    scope = sch.state.get_block_scope(scope_root(sref))
    deps = scope.get_deps_by_dst(sref) if producers else scope.get_deps_by_src(sref)
    found: List[StmtSRef] = []
    for dep in deps:
        other = dep.src if producers else dep.dst
        if dep.kind in _PRODUCING_DEPS and not any(other.same_as(seen) for seen in found):
            found.append(other)
    return found


def producers(sch: Schedule, sref: StmtSRef) -> List[StmtSRef]:
    """Blocks of the same scope that write what the block reads (TVM's ``GetProducers``)."""
    return _neighbours(sch, sref, producers=True)


def consumers(sch: Schedule, sref: StmtSRef) -> List[StmtSRef]:
    """Blocks of the same scope that read what the block writes (TVM's ``GetConsumers``)."""
    return _neighbours(sch, sref, producers=False)


def is_spatial(block: tir.Block) -> bool:
    """True for a block with only data-parallel iterators and no init statement (checked first:
    it is one attribute, the iterators are several)."""
    return block.init is None and all(iv.iter_type == tir.IterVar.DataPar for iv in block.iter_vars)


def under_a_loop(sref: StmtSRef) -> bool:
    """True when the block sits in at least one loop of its scope."""
    return isinstance(sref.parent.stmt, tir.For)


def in_own_plain_loops(sch: Schedule, block_rv: BlockRV, sref: StmtSRef) -> bool:
    """True when the block sits in a loop nest of its own, straight under its scope root, of serial
    loops bound one to one to its iterators: nothing has tiled, bound, vectorised or computed it at
    another block's loop yet.

    A block that was tiled, fused or moved is bound to expressions of several loops
    (``i_0 * 8 + i_1``): that is checked first, since walking a tiled nest of twenty loops costs
    far more. A loop that was bound, vectorised or parallelised as it is has another kind.
    """
    if not all(isinstance(value, tir.Var) for value in block_realize(sch, block_rv).iter_values):
        return False
    child = sref.stmt
    parent = sref.parent
    while not isinstance(parent.stmt, tir.Block):
        loop = parent.stmt
        body = loop.body.block if isinstance(loop.body, tir.BlockRealize) else loop.body
        if not body.same_as(child):
            return False  # the loop holds more than this block's nest
        if loop.kind != tir.ForKind.SERIAL:
            return False
        child, parent = loop, parent.parent
    return True


def single_point_read(block: tir.Block, buffer: tir.Buffer) -> Optional[List[tvm.ir.PrimExpr]]:
    """The indices at which ``block`` reads ``buffer``, when it reads it at one point only.

    Decided from the block's read regions, which TVM keeps as the union of every access to a
    buffer (and updates through inlining): one region of extent 1 in every dimension means every
    load of the buffer has the same indices (``red[i] * red[i]``); loads at two points
    (``red[i] + red[i + 1]``) make a wider region. None when the region is wider, or when the
    block does not read ``buffer``.
    """
    regions = [region for region in block.reads if region.buffer.same_as(buffer)]
    if len(regions) != 1:
        return None
    ranges = regions[0].region
    if not all(isinstance(r.extent, tir.IntImm) and r.extent.value == 1 for r in ranges):
        return None
    return [r.min for r in ranges]


def injective_in_block_iters(indices: Sequence[tvm.ir.PrimExpr], block: tir.Block) -> bool:
    """True when ``indices`` take a different value at every instance of ``block``.

    Decided by TVM's iterator-map detection over the block's iterator domains: an affine map that
    uses every non-unit iterator exactly once (``a``, ``a // 4, a % 4``, ``b, a``) passes; one that
    leaves an iterator out (``a`` in a block over ``a, b``: the same element read for every ``b``)
    or folds iterators together (``a // 2``, ``a + b``) does not.
    """
    domain = {iv.var: iv.dom for iv in block.iter_vars}
    result = arith.detect_iter_map(list(indices), domain, check_level="bijective")
    return len(result.indices) == len(indices) and not list(result.errors)
