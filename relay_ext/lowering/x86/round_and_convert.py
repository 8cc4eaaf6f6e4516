"""A TIR pass that rounds and converts a 16-lane float vector to int32 in one AVX-512 instruction.

Every requantize of a quantized model ends in, per output element::

    T.Cast("int32", T.floor(x))        # x: float32; QNN rounds half up as floor(x + 0.5)

which LLVM compiles, once the loop is vectorized to 16 lanes, to two instructions: ``vrndscaleps``
(floor) and ``vcvttps2dq`` (convert, truncating). AVX-512 converts with a rounding mode of its
own (``vcvtps2dq`` with ``{rd-sae}``: round down, no exceptions), so this pass rewrites the
vector form to ``llvm.x86.avx512.mask.cvtps2dq.512`` with that rounding: one instruction, the
same int32 for every input (a whole number in float converts exactly; NaN and values beyond
int32 give 0x80000000 both ways). ``T.ceil`` gets ``{ru-sae}`` the same way. A residual
block's conv epilogue rounds three times among its 18 vector instructions per 16 outputs; two of
those roundings end in an int32 conversion (the third is clamped in float,
:mod:`relay_ext.lowering.clamp_in_float`), so it goes to 16. The float arithmetic is most of the
time of a 1x1 conv on AMX (docs/cpu.md, "The requantize epilogue").

Only ``float32x16`` -> ``int32x16`` casts change, and only in functions built for an LLVM target
with ``avx512f``; everything else is left alone. It runs as a phase-3 lowering pass
(``tir.add_lower_pass``, after vectorization: the 16-lane expressions exist only then) in every
build quantfuse makes.
"""

from __future__ import annotations

from typing import Optional

import tvm
from tvm import tir

INTRINSIC = "llvm.x86.avx512.mask.cvtps2dq.512"
# _MM_FROUND_NO_EXC (8) | the rounding direction: 1 toward -inf, 2 toward +inf
ROUNDING = {"tir.floor": 8 | 1, "tir.ceil": 8 | 2}
LANES = 16


def target_has_avx512f(target: Optional[tvm.target.Target]) -> bool:
    """Whether ``target`` is an LLVM target whose features include avx512f."""
    if target is None or target.kind.name != "llvm":
        return False
    from tvm.target.codegen import target_has_features  # pylint: disable=import-outside-toplevel

    return bool(target_has_features("avx512f", target))


def _rewrite(node):
    if not (isinstance(node, tir.Cast) and str(node.dtype) == f"int32x{LANES}"):
        return None
    value = node.value
    if not (isinstance(value, tir.Call) and isinstance(value.op, tvm.ir.Op)
            and value.op.name in ROUNDING and str(value.dtype) == f"float32x{LANES}"):
        return None
    (x,) = value.args
    # arguments: no overloaded types (0); the value; lanes kept where the mask is off (none, the
    # mask is all ones); the rounding
    return tir.call_llvm_pure_intrin(
        node.dtype, INTRINSIC, tir.const(0, "uint32"), x,
        tir.Broadcast(tir.const(0, "int32"), LANES), tir.const(-1, "int16"),
        tir.const(ROUNDING[value.op.name], "int32"))


def _function_target(func: tir.PrimFunc) -> Optional[tvm.target.Target]:
    target = func.attrs.get("target") if func.attrs is not None else None
    return target if target is not None else tvm.target.Target.current(allow_none=True)


@tir.transform.prim_func_pass(opt_level=0, name="quantfuse.RoundAndConvert")
def round_and_convert(func: tir.PrimFunc, _mod, _ctx) -> tir.PrimFunc:
    """Rewrite ``int32x16(floor(x))`` (and ``ceil``) in ``func`` to one AVX-512 conversion with
    that rounding, where ``func`` is built for an AVX-512 target."""
    if not target_has_avx512f(_function_target(func)):
        return func
    body = tir.stmt_functor.ir_transform(func.body, None, _rewrite, ["tir.Cast"])
    return func.with_body(body)
