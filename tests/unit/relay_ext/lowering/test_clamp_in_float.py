"""clamp_in_float (relay_ext/lowering/clamp_in_float.py): float(clip(int32(floor(x)))) clamped
in float, the same values, and nothing else touched."""

import numpy as np
import pytest
import tvm
from tvm import te, tir

from relay_ext.lowering.clamp_in_float import clamp_in_float
from relay_ext.lowering.config import BUILD_OPTIONS, pass_config


def requantize_then_dequantize(clip=lambda v: te.max(te.min(v, 255), 0), rounding=tvm.tir.floor,
                               back="float32", dtype="float32"):
    """What a residual block's conv epilogue computes: requantize to uint8 in float, clip in
    int32, back to float for the add."""
    x = te.placeholder((64,), dtype, "x")
    out = te.compute((64,), lambda i: (
        clip(rounding(x[i] * 0.37 + 63.5).astype("int32")).astype(back) - 63.0) * 0.5, name="out")
    return tvm.IRModule({"main": te.create_prim_func([x, out])})


def casts_to(mod, dtype):
    found = []
    tir.stmt_functor.post_order_visit(mod["main"].body, lambda node: found.append(node) if
                                      isinstance(node, tir.Cast) and str(node.dtype) == dtype
                                      else None)
    return found


def test_the_round_trip_through_int32_is_gone_and_the_clamp_stays_in_float():
    mod = requantize_then_dequantize()
    assert casts_to(mod, "int32") and casts_to(mod, "float32")
    after = clamp_in_float(mod)
    assert not casts_to(after, "int32") and not casts_to(after, "float32")
    text = after["main"].script()
    assert "T.max(T.min(T.floor(" in text and "T.float32(255.0)" in text, text


@pytest.mark.parametrize("clip", [lambda v: te.max(te.min(v, 255), 0),
                                  lambda v: te.min(te.max(v, 0), 255),
                                  lambda v: te.max(te.min(v, 127), -128)])
@pytest.mark.parametrize("rounding", [tvm.tir.floor, tvm.tir.round, tvm.tir.ceil])
def test_the_rewritten_kernel_computes_the_same_values(clip, rounding):
    mod = requantize_then_dequantize(clip, rounding)
    assert not casts_to(clamp_in_float(mod), "int32")
    rng = np.random.default_rng(0)
    # inside the clip, at and around its bounds, halves and far beyond it on both sides
    x = np.concatenate([rng.uniform(-1000, 1000, 48), np.array(
        [-171.6, -170.3, 0.0, 0.5, -0.5, 1.5, 2.5, 517.6, 518.9, 1e6, -1e6, 3.3, -3.3,
         (255 - 63.5) / 0.37, (-128 - 63.5) / 0.37, (127 - 63.5) / 0.37])]).astype("float32")
    outputs = []
    for add_pass in (False, True):
        config = {"tir.add_lower_pass": [(1, clamp_in_float)]} if add_pass else {}
        with tvm.transform.PassContext(config=config):
            lib = tvm.build(mod, target="llvm")
        out = tvm.nd.empty((64,), "float32")
        lib(tvm.nd.array(x), out)
        outputs.append(out.numpy())
    np.testing.assert_array_equal(outputs[1], outputs[0])


@pytest.mark.parametrize("kwargs", [
    {"rounding": lambda v: v},                                      # not a whole number: truncation
    {"back": "float16"},                                            # another float type
    {"clip": lambda v: te.max(te.min(v, 2 ** 25 + 1), 0)},          # a bound float32 cannot hold
    {"clip": lambda v: te.max(v, 0)},                               # one bound only
    {"dtype": "float16", "back": "float16",                         # float16 has no 2049
     "clip": lambda v: te.max(te.min(v, 2049), 0)},
])
def test_anything_else_is_left_alone(kwargs):
    mod = requantize_then_dequantize(**kwargs)
    assert tvm.ir.structural_equal(clamp_in_float(mod), mod)


def test_every_build_runs_it_before_vectorization():
    assert (1, clamp_in_float) in BUILD_OPTIONS["tir.add_lower_pass"]
    assert (1, clamp_in_float) in pass_config("ours")["tir.add_lower_pass"]
