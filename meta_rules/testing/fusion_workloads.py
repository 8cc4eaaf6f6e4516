"""TE workloads shaped like the int8 ResNet/MobileNet tasks that TVM 0.19's rules leave unfused.

* :func:`residual_conv_epilogue` -- an int8 conv whose epilogue requantizes, adds the block's
  residual input (itself dequantized/requantized), requantizes again and applies relu (a clip at
  the output zero point), the way Relay lowers ``qnn.conv2d -> qnn.requantize -> qnn.add -> relu``
  in a ResNet basic block. Both chains meet in one add.
* :func:`avg_pool_cast` -- ``adaptive_avg_pool2d`` over a whole feature map, then a cast: a
  reduction at the root with one elementwise consumer.

Built with TE and ``te.create_prim_func``, like Relay's lowered tasks, without going through Relay.
"""

from __future__ import annotations

import tvm
from tvm import te, topi

OUT_ZERO_POINT = 3      # relu on a quantized tensor clips at the output zero point
RESIDUAL_MULTIPLIER = 1826804583
CONV_MULTIPLIER = 2077089154


def _conv(layout: str, size: int, channels: int):
    if layout == "NCHW":
        data = te.placeholder((1, channels, size, size), "int8", name="data")
        weight = te.placeholder((channels, channels, 3, 3), "int8", name="weight")
        return data, weight, topi.nn.conv2d_nchw(data, weight, 1, 1, 1, out_dtype="int32"), 1
    data = te.placeholder((1, size, size, channels), "int8", name="data")
    weight = te.placeholder((3, 3, channels, channels), "int8", name="weight")
    return data, weight, topi.nn.conv2d_nhwc(data, weight, 1, 1, 1, out_dtype="int32"), 3


def residual_conv_epilogue(layout: str = "NCHW", size: int = 8, channels: int = 32) -> tvm.IRModule:
    """int8 conv 3x3 + requantize, + requantized uint8 residual, + relu, cast to uint8.

    Inputs: data and weight (int8), per-channel ``zero_sum``, ``multiplier`` and ``shift`` (int32),
    the residual (uint8, the conv's output shape). Output: uint8, the conv's output shape.
    """
    data, weight, conv, c_axis = _conv(layout, size, channels)
    shape = conv.shape
    zero_sum = te.placeholder((channels,), "int32", name="zero_sum")
    multiplier = te.placeholder((channels,), "int32", name="multiplier")
    shift = te.placeholder((channels,), "int32", name="shift")
    residual = te.placeholder(shape, "uint8", name="residual")
    zero_point = te.compute((), lambda: tvm.tir.const(65, "int32"), name="compile_engine_const")

    def channel(i):
        return i[c_axis]

    shifted = te.compute(shape, lambda *i: conv(*i) - zero_sum[channel(i)], name="T_subtract")
    scaled = te.compute(shape, lambda *i: tvm.tir.q_multiply_shift_per_axis(
        shifted(*i), multiplier[channel(i)], te.max(shift[channel(i)], 0),
        te.max(-shift[channel(i)], 0), tvm.tir.const(31, "int32"), tvm.tir.const(False, "bool"),
        tvm.tir.const(True, "bool")), name="T_requantize")
    conv_q = te.compute(shape, lambda *i: te.max(te.min(scaled(*i) + zero_point(), 255), 0),
                        name="T_clip")
    conv_term = te.compute(shape, lambda *i: tvm.tir.q_multiply_shift(
        conv_q(*i) - OUT_ZERO_POINT, tvm.tir.const(CONV_MULTIPLIER, "int32"),
        tvm.tir.const(31, "int32"), tvm.tir.const(-1, "int32")), name="T_conv_term")
    widened = te.compute(shape, lambda *i: residual(*i).astype("int32"), name="T_cast_residual")
    residual_term = te.compute(shape, lambda *i: tvm.tir.q_multiply_shift(
        widened(*i), tvm.tir.const(RESIDUAL_MULTIPLIER, "int32"), tvm.tir.const(31, "int32"),
        tvm.tir.const(0, "int32")), name="T_residual_term")
    summed = te.compute(shape, lambda *i: conv_term(*i) + residual_term(*i), name="T_add")
    relu = te.compute(shape, lambda *i: te.max(te.min(summed(*i), 255), OUT_ZERO_POINT),
                      name="T_relu")
    out = te.compute(shape, lambda *i: relu(*i).astype("uint8"), name="T_cast")
    return tvm.IRModule({"main": te.create_prim_func(
        [data, weight, zero_sum, multiplier, shift, residual, out])})


def avg_pool_cast(layout: str = "NCHW", channels: int = 64, window: int = 7) -> tvm.IRModule:
    """Global average pooling of an int32 ``window x window`` map per channel, cast to uint8."""
    y_axis, x_axis = (2, 3) if layout == "NCHW" else (1, 2)
    in_shape = [1, 1, 1, 1]
    in_shape[1 if layout == "NCHW" else 3] = channels
    out_shape = tuple(in_shape)
    in_shape[y_axis] = in_shape[x_axis] = window
    data = te.placeholder(tuple(in_shape), "int32", name="data")
    ry = te.reduce_axis((0, window), name="ry")
    rx = te.reduce_axis((0, window), name="rx")

    def window_element(i):
        index = list(i)
        index[y_axis] = i[y_axis] * window + ry
        index[x_axis] = i[x_axis] * window + rx
        return data[tuple(index)]

    pooled = te.compute(out_shape, lambda *i: te.sum(window_element(i), axis=[ry, rx]),
                        name="pool_sum")
    avg = te.compute(out_shape, lambda *i: tvm.tir.Div(pooled(*i), window * window),
                     name="pool_avg")
    out = te.compute(out_shape, lambda *i: avg(*i).astype("uint8"), name="T_cast")
    return tvm.IRModule({"main": te.create_prim_func([data, out])})
