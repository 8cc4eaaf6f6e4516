"""Pure analysis of padding blocks: a block that copies one buffer into a larger one, a constant
where the copy falls outside the source (TOPI's ``PaddedInput``/``data_pad`` inside a conv or a
pool, Relay's ``nn.pad``)::

    with T.block("PaddedInput"):
        v_i0, v_i1, v_i2, v_i3, v_i4 = T.axis.remap("SSSSS", [i0, i1, i2, i3, i4])
        PaddedInput[v_i0, v_i1, v_i2, v_i3, v_i4] = T.if_then_else(
            1 <= v_i2 and v_i2 < 57 and 1 <= v_i3 and v_i3 < 57,
            p0[v_i0, v_i1, v_i2 - 1, v_i3 - 1, v_i4], T.uint8(0))

Decided from the block's structure, never from its name.
:func:`padding_bounds` reads where the padding ends along one axis from the bound checks.
"""

from __future__ import annotations

from typing import List, Optional, Set, Tuple

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


def _conjuncts(condition: tir.PrimExpr) -> List[tir.PrimExpr]:
    if isinstance(condition, tir.And):
        return _conjuncts(condition.a) + _conjuncts(condition.b)
    return [condition]


def _bound(atom: tir.PrimExpr, var: tir.Var) -> Tuple[Optional[int], Optional[int]]:
    """(lower, upper) that one comparison puts on ``var``: ``3 <= v`` -> (3, None), ``v < 227``
    -> (None, 227); (None, None) for anything else."""
    def is_var(expr):
        return isinstance(expr, tir.Var) and expr.same_as(var)

    def const(expr):
        return int(expr.value) if isinstance(expr, tir.IntImm) else None

    if isinstance(atom, tir.LE) and is_var(atom.b) and const(atom.a) is not None:
        return const(atom.a), None
    if isinstance(atom, tir.LT) and is_var(atom.a) and const(atom.b) is not None:
        return None, const(atom.b)
    if isinstance(atom, tir.GE) and is_var(atom.a) and const(atom.b) is not None:
        return const(atom.b), None
    if isinstance(atom, tir.GT) and is_var(atom.b) and const(atom.a) is not None:
        return None, const(atom.a)
    return None, None


def padding_bounds(value: tir.PrimExpr, var: tir.Var) -> Tuple[Optional[int], Optional[int]]:
    """The tightest bounds the conditions of ``value``'s ``if_then_else`` calls put on ``var``:
    for a padded copy with 3 before and 3 after along a 230-wide axis, ``3 <= v and v < 227``
    -> (3, 227). None for a side no condition bounds."""
    lower: Optional[int] = None
    upper: Optional[int] = None

    def visit(node) -> None:
        nonlocal lower, upper
        if isinstance(node, tir.Call) and node.op.same_as(_IF_THEN_ELSE):
            for atom in _conjuncts(node.args[0]):
                low, high = _bound(atom, var)
                if low is not None:
                    lower = low if lower is None else max(lower, low)
                if high is not None:
                    upper = high if upper is None else min(upper, high)

    tir.stmt_functor.post_order_visit(tir.Evaluate(value), visit)
    return lower, upper
