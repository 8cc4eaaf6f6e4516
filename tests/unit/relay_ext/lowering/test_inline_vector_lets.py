"""InlineVectorLets: vector-typed Lets (which LLVM 22 rejects as debug locations) become their values."""

import numpy as np
import pytest
import tvm
from tvm import tir
from tvm.script import tir as T

from relay_ext.lowering.config import BUILD_OPTIONS
from relay_ext.lowering.inline_vector_lets import inline_vector_lets


@T.prim_func
def widen_and_add(a: T.Buffer((16,), "uint8"), b: T.Buffer((4,), "int32")):
    for i in range(4):
        with T.block("add"):
            vi = T.axis.spatial(4, i)
            a_u8x4 = a.vload([vi * 4], "uint8x4")  # a LetStmt of a vector variable
            b[vi] = T.reinterpret(a_u8x4, dtype="int32") + 1


def _lets(func):
    found = []
    tir.stmt_functor.post_order_visit(func.body, lambda n: found.append(n.var.dtype)
                                      if isinstance(n, (tir.LetStmt, tir.Let)) else None)
    return found


def test_vector_lets_are_replaced_by_their_values():
    mod = tvm.IRModule({"main": widen_and_add})
    assert "uint8x4" in _lets(mod["main"])
    after = inline_vector_lets(mod)["main"]
    assert not [d for d in _lets(after) if tvm.DataType(d).lanes > 1]
    assert 'T.reinterpret("int32", a[vi * 4:vi * 4 + 4])' in after.script()  # the value, inlined


def test_the_kernel_builds_and_computes_with_the_pass_and_fails_without():
    with tvm.transform.PassContext(config={"tir.disable_cse_tir": True}):
        with pytest.raises(tvm.TVMError, match="dbg_declare"):
            tvm.build(widen_and_add, target="llvm")
    with tvm.transform.PassContext(config=BUILD_OPTIONS):
        lib = tvm.build(widen_and_add, target="llvm")
    data = np.arange(16, dtype="uint8")
    out = tvm.nd.empty((4,), "int32")
    lib(tvm.nd.array(data), out)
    np.testing.assert_array_equal(out.numpy(), data.view("int32") + 1)
