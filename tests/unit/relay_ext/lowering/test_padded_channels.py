"""relay_ext.lowering.padded_channels: an int8 conv's padded output channels kept up to the next
conv, with the outputs unchanged."""

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_ext.lowering.padded_channels import keep_padded_channels

RNG = np.random.default_rng(0)


def _ops(expr: relay.Expr) -> list:
    names = []
    relay.analysis.post_order_visit(expr, lambda node: names.append(node.op.name) if isinstance(
        node, relay.Call) and isinstance(node.op, tvm.ir.Op) else None)
    return names


def _conv_inputs(mod: tvm.IRModule) -> list:
    """The channel count each nn.conv2d of ``mod`` reads."""
    found = []
    relay.analysis.post_order_visit(mod["main"], lambda node: found.append(
        int(node.args[0].checked_type.shape[1])) if isinstance(node, relay.Call) and isinstance(
            node.op, tvm.ir.Op) and node.op.name == "nn.conv2d" else None)
    return found


def _legalized_conv(x: relay.Expr, out_channels: int, in_channels: int) -> relay.Expr:
    """An int8 conv as TVM's x86 legalization leaves one of ``out_channels`` not a multiple of
    16: zero weights up to the next multiple, then a slice back."""
    padded = -(-out_channels // 16) * 16
    weight = RNG.integers(-128, 128, (out_channels, in_channels, 1, 1), dtype=np.int8)
    weight = np.concatenate([weight, np.zeros((padded - out_channels, in_channels, 1, 1), np.int8)])
    conv = relay.nn.conv2d(x, relay.const(weight), channels=padded, kernel_size=(1, 1),
                           out_dtype="int32")
    return relay.strided_slice(conv, begin=[0, 0, 0, 0], end=[1, out_channels, 8, 8])


def _requantize(x: relay.Expr, channels: int) -> relay.Expr:
    """bias_add, a per-channel float scale, a scalar zero point, round and clip to uint8."""
    bias = relay.const(RNG.integers(-500, 500, channels, dtype=np.int32))
    scale = relay.const(RNG.uniform(0.001, 0.01, (channels, 1, 1)).astype("float32"))
    y = relay.multiply(relay.cast(relay.nn.bias_add(x, bias), "float32"), scale)
    y = relay.floor(relay.add(relay.add(y, relay.const(56.0)), relay.const(0.5)))
    return relay.cast(relay.clip(relay.cast(y, "int32"), 0, 255), "uint8")


def _run(mod: tvm.IRModule, data: np.ndarray) -> list:
    with tvm.transform.PassContext(opt_level=0):
        out = relay.create_executor("graph", mod=mod, target="llvm").evaluate()(data)
    return [o.numpy() for o in out] if isinstance(out, (list, tuple)) else [out.numpy()]


def _module(body: relay.Expr, x: relay.Var) -> tvm.IRModule:
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], body)))


def _check_same_outputs(before: tvm.IRModule, after: tvm.IRModule) -> None:
    data = RNG.integers(0, 256, (1, 16, 8, 8), dtype=np.uint8)
    for a, b in zip(_run(before, data), _run(after, data)):
        np.testing.assert_array_equal(a, b)


def test_the_next_conv_reads_the_padded_channels_with_zero_weights():
    x = relay.var("x", shape=(1, 16, 8, 8), dtype="uint8")
    q = _requantize(_legalized_conv(x, 24, 16), 24)
    nxt = relay.nn.conv2d(q, relay.const(RNG.integers(-128, 128, (16, 24, 1, 1), dtype=np.int8)),
                          channels=16, kernel_size=(1, 1), out_dtype="int32")
    before = _module(nxt, x)
    after = keep_padded_channels(before)
    assert "strided_slice" in _ops(before["main"]) and "strided_slice" not in _ops(after["main"])
    assert _conv_inputs(after) == [16, 32]  # the next conv reads all 32 channels
    _check_same_outputs(before, after)


def test_a_residual_add_runs_padded_and_other_readers_get_the_model_channels():
    x = relay.var("x", shape=(1, 16, 8, 8), dtype="uint8")
    a = _requantize(_legalized_conv(x, 24, 16), 24)
    b = _requantize(_legalized_conv(x, 24, 16), 24)
    added = relay.cast(relay.clip(relay.add(relay.cast(a, "int32"), relay.cast(b, "int32")),
                                  0, 255), "uint8")
    nxt = relay.nn.conv2d(added, relay.const(RNG.integers(-128, 128, (16, 24, 1, 1),
                                                          dtype=np.int8)),
                          channels=16, kernel_size=(1, 1), out_dtype="int32")
    # a pool reads the sum too: it must see 24 channels, not 32
    pooled = relay.nn.global_avg_pool2d(relay.cast(added, "float32"))
    before = _module(relay.Tuple([nxt, pooled]), x)
    after = keep_padded_channels(before)
    assert _conv_inputs(after) == [16, 16, 32]
    assert [int(d) for d in after["main"].body.checked_type.fields[1].shape] == [1, 24, 1, 1]
    _check_same_outputs(before, after)


def test_the_saturation_free_split_keeps_reading_the_model_channels():
    """A conv that reads its input twice (concatenated: the split of non-NCHW convs without VNNI)
    with weights computed from constants: padded, it would read 64 channels for 48 (measured
    slower), so it is left alone."""
    x = relay.var("x", shape=(1, 16, 8, 8), dtype="uint8")
    q = _requantize(_legalized_conv(x, 24, 16), 24)
    weight = relay.const(RNG.integers(-128, 128, (16, 24, 1, 1), dtype=np.int8))
    high = relay.right_shift(weight, relay.const(1, "int8"))
    halves = relay.concatenate([high, relay.subtract(weight, high)], axis=1)
    nxt = relay.nn.conv2d(relay.concatenate([q, q], axis=1), halves, channels=16,
                          kernel_size=(1, 1), out_dtype="int32")
    before = _module(nxt, x)
    after = keep_padded_channels(before)
    assert _conv_inputs(after) == [16, 48]
    _check_same_outputs(before, after)


@pytest.mark.parametrize("reader", ["grouped conv", "weights from the input", "divisor"])
def test_what_cannot_read_the_added_channels_gets_the_model_channels(reader):
    x = relay.var("x", shape=(1, 16, 8, 8), dtype="uint8")
    q = _requantize(_legalized_conv(x, 24, 16), 24)
    params = [x]
    if reader == "grouped conv":
        body = relay.nn.conv2d(q, relay.const(np.ones((24, 1, 3, 3), np.int8)), channels=24,
                               groups=24, kernel_size=(3, 3), padding=(1, 1), out_dtype="int32")
    elif reader == "weights from the input":
        params.append(relay.var("w", shape=(16, 24, 1, 1), dtype="uint8"))
        body = relay.nn.conv2d(q, params[1], channels=16, kernel_size=(1, 1), out_dtype="int32")
    else:  # a divisor from the tensor: an added channel could hold a zero
        body = relay.divide(relay.const(1000, "int32"),
                            relay.add(relay.cast(q, "int32"), relay.const(1)))
    before = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function(params, body)))
    after = keep_padded_channels(before)
    if reader == "divisor":
        _check_same_outputs(before, after)
        divides = []
        relay.analysis.post_order_visit(after["main"], lambda node: divides.append(node) if (
            isinstance(node, relay.Call) and getattr(node.op, "name", "") == "divide") else None)
        assert [int(d) for d in divides[0].args[1].checked_type.shape] == [1, 24, 8, 8]
    else:
        assert _conv_inputs(after) == [16, 24]
