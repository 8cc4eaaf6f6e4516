"""Pure analysis of padding blocks: a block that copies one buffer into a larger one, a constant
where the copy falls outside the source (TOPI's ``PaddedInput``/``data_pad`` inside a conv or a
pool, Relay's ``nn.pad``)::

    with T.block("PaddedInput"):
        v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
        PaddedInput[v_i0, v_i1, v_i2, v_i3, v_i4] = T.if_then_else(
            1 <= v_i2 and v_i2 < 57 and 1 <= v_i3 and v_i3 < 57,
            p0[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4], T.uint8(0))

Decided from the block's structure, never from its name.
"""

from __future__ import annotations

from typing import Set

import tvm
from tvm import tir

_IF_THEN_ELSE = tvm.ir.Op.get("tir.if_then_else")


def _is_constant(expr: tir.PrimExpr) -> bool:
    if isinstance(expr, (tir.IntImm, tir.FloatImm)):
        return True
    if isinstance(expr, tir.Cast):
        return _is_constant(expr.value)
    return isinstance(expr, tir.BufferLoad) and len(expr.indices) == 0  # a 0-d constant buffer


def is_padding_block(block: tir.Block) -> bool:
    """True for a spatial block that stores ``if_then_else(condition, <a read of a buffer>,
    <a constant>)``: a padded copy of its input."""
    if any(iv.iter_type != tir.IterVar.DataPar for iv in block.iter_vars):
        return False
    store = block.body
    if not isinstance(store, tir.BufferStore) or block.init is not None:
        return False
    value = store.value
    if not (isinstance(value, tir.Call) and value.op.same_as(_IF_THEN_ELSE)):
        return False
    _, inside, outside = value.args
    return isinstance(inside, tir.BufferLoad) and len(inside.indices) > 0 and _is_constant(outside)


def padding_block_names(func: tir.PrimFunc) -> Set[str]:
    """The names of ``func``'s padding blocks (:func:`is_padding_block`)."""
    found: Set[str] = set()

    def visit(node) -> None:
        if isinstance(node, tir.Block) and is_padding_block(node):
            found.add(node.name_hint)

    tir.stmt_functor.post_order_visit(func.body, visit)
    return found
