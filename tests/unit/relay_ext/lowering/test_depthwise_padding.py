"""A depthwise qnn.conv2d's zero padding stays inside the conv after QNN canonicalization (no
nn.pad of its own), with the same values; other convs keep TVM's explicit pad."""

import numpy as np
import pytest
import tvm
from tvm import relay

import relay_ext.lowering.relay_build  # noqa: F401 - registers the canonicalization
from relay_ext.frontend.qnn_passes import op_counts


def _qnn_conv(data, channels, groups, zero_point, padding, kernel=3):
    weight = relay.const(np.random.default_rng(0).integers(
        -128, 128, (channels, channels // groups, kernel, kernel)).astype("int8"))
    return relay.qnn.op.conv2d(
        data, weight, relay.const(zero_point, "int32"), relay.const(0, "int32"),
        relay.const(0.5, "float32"), relay.const(0.25, "float32"), kernel_size=(kernel, kernel),
        channels=channels, groups=groups, padding=padding, out_dtype="int32")


def _canonical(expr) -> tvm.IRModule:
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(expr), expr))
    mod = relay.transform.InferType()(mod)
    return relay.qnn.transform.CanonicalizeOps()(mod)


def _conv_paddings(mod) -> list:
    found = []
    relay.analysis.post_order_visit(mod["main"], lambda node: found.append(
        [int(p) for p in node.attrs.padding]) if isinstance(node, relay.Call)
        and getattr(node.op, "name", "") == "nn.conv2d" else None)
    return found


def _data(channels=8):
    return relay.var("data", shape=(1, channels, 6, 6), dtype="uint8")


def test_a_depthwise_conv_with_zero_point_0_pads_inside_the_conv():
    mod = _canonical(_qnn_conv(_data(), 8, 8, 0, (1, 1)))
    assert op_counts(mod).get("nn.pad", 0) == 0
    assert _conv_paddings(mod) == [[1, 1, 1, 1]]


def test_the_frontends_explicit_pad_before_an_unpadded_depthwise_conv_is_folded_too():
    padded = relay.nn.pad(_data(), ((0, 0), (0, 0), (2, 1), (1, 2)), pad_value=0.0)
    mod = _canonical(_qnn_conv(padded, 8, 8, 0, (0, 0)))
    assert op_counts(mod).get("nn.pad", 0) == 0
    assert _conv_paddings(mod) == [[2, 1, 1, 2]]


@pytest.mark.parametrize("groups, zero_point", [(8, 3), (1, 0)])
def test_a_nonzero_zero_point_or_a_dense_conv_keeps_tvms_pad(groups, zero_point):
    mod = _canonical(_qnn_conv(_data(), 8, groups, zero_point, (1, 1)))
    assert op_counts(mod)["nn.pad"] == 1
    assert _conv_paddings(mod) == [[0, 0, 0, 0]]


@pytest.mark.parametrize("zero_point", [0, 3])
def test_the_values_are_a_zero_point_padded_depthwise_conv(zero_point):
    data = np.random.default_rng(1).integers(0, 256, (1, 8, 6, 6)).astype("uint8")
    expr = _qnn_conv(_data(), 8, 8, zero_point, (1, 1))
    weight = expr.args[1].data.numpy().astype(np.int64)
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(expr), expr))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    from tvm.contrib import graph_executor

    module = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    module.run(data=data)
    padded = np.pad(data.astype(np.int64) - zero_point, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.zeros((1, 8, 6, 6), np.int64)
    for kh in range(3):
        for kw in range(3):
            expected += padded[:, :, kh:kh + 6, kw:kw + 6] * weight[None, :, 0, kh, kw, None, None]
    np.testing.assert_array_equal(module.get_output(0).numpy(), expected)
