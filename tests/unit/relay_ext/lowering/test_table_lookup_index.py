"""An unsigned subtraction: TVM covers a uint8 table index's value set [lo, 255] with
``Range(lo, 255 + 1 - lo)`` in uint8, where ``255 + 1`` wraps to 0 and ``0 - lo`` fails TVM's
check; quantfuse's legalization of the QNN table lookups indexes them in int32."""

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.script import tir as T

from meta_rules.measure import fusion
from relay_ext.lowering import table_lookup_index
from relay_ext.lowering import relay_build  # noqa: F401 - registers the int32-index legalizations


def _lookup(index_dtype: str, low: int):
    """``B[i, k] = table[clip(A[i, k], low, 255)]``, the index in ``index_dtype``: the block's read
    region of ``table`` relaxes the index over ``k``, to [low, 255]."""

    @T.prim_func
    def lookup(A: T.Buffer((16, 4), "int32"), table: T.Buffer((256,), "uint8"),
               B: T.Buffer((16, 4), "uint8")):
        T.func_attr({"global_symbol": "main"})
        for i in range(16):
            with T.block("take"):
                vi = T.axis.spatial(16, i)
                for k in range(4):
                    B[vi, k] = table[T.Cast(index_dtype, T.max(T.min(A[vi, k], 255), low))]

    return lookup


def test_tvm_refuses_a_uint8_index_whose_values_start_above_zero(capfd):
    # TVM 0.19's bug, kept as a test so that a TVM that fixes it shows here
    with pytest.raises(tvm.error.TVMError):
        _lookup("uint8", 5)
    assert "Minuend 's value is 0U" in capfd.readouterr().err
    for index_dtype, low in (("uint8", 0), ("int32", 5), ("int32", 0)):
        func = _lookup(index_dtype, low)
        assert fusion.global_intermediates(tvm.IRModule({"main": func})) == []


def _sigmoid_module(zero_point: int):
    x = relay.var("x", shape=(1, 8, 4, 4), dtype="uint8")
    y = relay.qnn.op.sigmoid(x, relay.const(0.05), relay.const(zero_point),
                             relay.const(1 / 256), relay.const(0))
    return tvm.IRModule.from_expr(relay.Function([x], y))


def test_qnn_table_lookups_are_indexed_in_int32_and_compute_the_same():
    mod = relay.transform.InferType()(_sigmoid_module(131))
    legalized = relay.transform.InferType()(relay.qnn.transform.Legalize()(mod))
    assert table_lookup_index.lookup_index_dtypes(legalized) == ["int32"]

    data = np.arange(128, dtype="uint8").reshape(1, 8, 4, 4) * 2
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    runtime = tvm.contrib.graph_executor.GraphModule(lib["default"](tvm.cpu()))
    runtime.set_input("x", data)
    runtime.run()
    got = runtime.get_output(0).numpy().astype(int)
    expected = np.clip(np.round(256 / (1 + np.exp(-0.05 * (data.astype(float) - 131)))), 0, 255)
    assert np.abs(got - expected).max() <= 1
