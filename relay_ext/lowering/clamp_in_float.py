"""A TIR pass that clamps a rounded float in float when the result goes back to float anyway.

A quantized residual block dequantizes the requantized output of its conv right away for the add
(``qnn.add``), so the conv's epilogue holds, per output element::

    T.Cast("float32", T.max(T.min(T.Cast("int32", T.floor(x)), 255), 0))   # x: float32

four vector instructions on x86 (``vcvttps2dq``, ``vpminsd``, ``vpmaxsd``, ``vcvtdq2ps``) for a
value that is already a whole number in float. This pass rewrites it to::

    T.max(T.min(T.floor(x), T.float32(255)), T.float32(0))

two instructions (``vminps``, ``vmaxps``) and the same result for every ``x`` whose floor fits
int32 (beyond that the int32 cast is undefined in TIR and LLVM). ResNet-50's 1x1 conv with the
residual add at 56x56 spends two thirds of its time in such float arithmetic (docs/BENCHMARKS.md);
the rewrite took that task from 0.135 to 0.125 ms.

It applies where ``x`` is rounded to a whole number (``floor``, ``ceil``, ``round``,
``nearbyint``, ``trunc``), the cast goes to int32 and back to the float type of ``x`` (float32
or float64), and both bounds are integers a float32 holds exactly (up to 2**24 in magnitude);
the clamp may be ``max(min(.))`` or ``min(max(.))``. Every other expression is left alone. It
runs as a phase-1 lowering pass (``tir.add_lower_pass``, before vectorization: the expressions
are scalar there) in every build quantfuse makes.
"""

from __future__ import annotations

from typing import Optional, Tuple

import tvm
from tvm import tir

ROUNDING = ("tir.floor", "tir.ceil", "tir.round", "tir.nearbyint", "tir.trunc")
EXACT_LIMIT = 2 ** 24  # float32 holds every integer up to this magnitude
FLOATS = ("float32", "float64")  # types that hold every bound allowed (float16: up to 2048)


def _rounded(expr: tir.PrimExpr) -> bool:
    return isinstance(expr, tir.Call) and isinstance(expr.op, tvm.ir.Op) and \
        expr.op.name in ROUNDING


def _bound(expr: tir.PrimExpr) -> Optional[int]:
    if isinstance(expr, tir.IntImm) and abs(int(expr.value)) <= EXACT_LIMIT:
        return int(expr.value)
    return None


def _clamp(expr: tir.PrimExpr) -> Optional[Tuple[tir.PrimExpr, int, int]]:
    """(clamped value, low, high) of ``max(min(v, high), low)`` or ``min(max(v, low), high)``."""
    outer_kinds = {tir.Max: tir.Min, tir.Min: tir.Max}
    inner_kind = outer_kinds.get(type(expr))
    if inner_kind is None or not isinstance(expr.a, inner_kind):
        return None
    outer, inner = _bound(expr.b), _bound(expr.a.b)
    if outer is None or inner is None:
        return None
    low, high = (outer, inner) if isinstance(expr, tir.Max) else (inner, outer)
    return (expr.a.a, low, high) if low <= high else None


def _rewrite(node):
    dtype = str(node.dtype) if isinstance(node, tir.Cast) else None
    clamp = _clamp(node.value) if dtype in FLOATS else None
    if clamp is None:
        return None
    value, low, high = clamp
    if not (isinstance(value, tir.Cast) and str(value.dtype) == "int32"
            and str(value.value.dtype) == dtype and _rounded(value.value)):
        return None
    return tir.Max(tir.Min(value.value, tir.const(high, dtype)), tir.const(low, dtype))


@tir.transform.prim_func_pass(opt_level=0, name="quantfuse.ClampInFloat")
def clamp_in_float(func: tir.PrimFunc, mod, ctx) -> tir.PrimFunc:  # pylint: disable=unused-argument
    """Rewrite ``float(clip(int32(round(x))))`` in ``func`` to ``clip(round(x))`` in float."""
    body = tir.stmt_functor.ir_transform(func.body, None, _rewrite, ["tir.Cast"])
    return func.with_body(body)
