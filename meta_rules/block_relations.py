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

GLOBAL_SCOPES = ("", "global")
_PRODUCING_DEPS = (DepKind.RAW, DepKind.WAW)


def live_block_sref(sch: Schedule, block_rv: BlockRV) -> Optional[StmtSRef]:
    """The sref of ``block_rv``, or None when an earlier primitive removed the block (inlined it).

    MetaSchedule's PostOrderApply only hands a rule blocks that still exist; this guards direct
    calls. Any other error from TVM is raised.
    """
    try:
        return sch.get_sref(block_rv)
    except ValueError as err:
        if "no longer exists" in str(err):
            return None
        raise


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
    """True for a block with only data-parallel iterators and no init statement."""
    return block.init is None and all(iv.iter_type == tir.IterVar.DataPar for iv in block.iter_vars)


def is_reduction(block: tir.Block) -> bool:
    """True for a block with an init statement or a reduction iterator."""
    return block.init is not None or any(iv.iter_type == tir.IterVar.CommReduce
                                         for iv in block.iter_vars)


def enclosing_loops(sref: StmtSRef) -> List[tir.For]:
    """The loops between the block and its scope root, innermost first."""
    loops = []
    parent = sref.parent
    while not isinstance(parent.stmt, tir.Block):
        loops.append(parent.stmt)
        parent = parent.parent
    return loops


def in_plain_loops(sref: StmtSRef) -> bool:
    """True when every loop between the block and its scope root is a serial loop with no
    annotation: nothing has tiled, bound, vectorised or moved the block yet."""
    return all(loop.kind == tir.ForKind.SERIAL and loop.thread_binding is None
               and not loop.annotations for loop in enclosing_loops(sref))


def loads_of(buffer: tir.Buffer, stmt: tir.Stmt) -> List[tir.BufferLoad]:
    """Every ``BufferLoad`` of ``buffer`` in ``stmt``, in visiting order."""
    found: List[tir.BufferLoad] = []
    tir.stmt_functor.post_order_visit(
        stmt, lambda node: found.append(node)
        if isinstance(node, tir.BufferLoad) and node.buffer.same_as(buffer) else None)
    return found


def single_access_indices(loads: Sequence[tir.BufferLoad]) -> Optional[List[tvm.ir.PrimExpr]]:
    """The indices shared by every load of ``loads``, or None if they read at several points."""
    if not loads:
        return None
    first = list(loads[0].indices)
    for load in loads[1:]:
        if not tvm.ir.structural_equal(list(load.indices), first, map_free_vars=False):
            return None
    return first


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
