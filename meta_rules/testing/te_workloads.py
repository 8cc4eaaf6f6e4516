"""Small TE workloads that reproduce what Relay emits for quantized operators.

They are built with TE/topi and :func:`tvm.te.create_prim_func`, so their TIR has the same shape as
Relay's lowered tasks, without going through Relay: the tests, the demo and the benchmarks use them
as the seed workload of the fusion problem.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import te, topi


def scalar_constant(value: int, dtype: str = "int32", name: str = "compile_engine_const") -> te.Tensor:
    """A 0-d tensor holding ``value``, the way Relay lowers a scalar constant.

    Relay's TE compiler turns each scalar constant of a fused function into
    ``te.compute((), lambda: value)``; after ``create_prim_func`` it is a block that reads nothing
    and writes one 0-d buffer.
    """
    return te.compute((), lambda: tvm.tir.const(value, dtype), name=name)


def requantize_epilogue(
    acc: te.Tensor,
    multiplier: te.Tensor,
    shift: te.Tensor,
    input_zero_point: int = 3,
    output_dtype: str = "uint8",
) -> te.Tensor:
    """The epilogue of a quantized conv/dense, per output channel (last axis of ``acc``).

    ``acc + zero_point`` (a 0-d constant block), then ``q_multiply_shift_per_axis`` with the
    channel's multiplier and shift, then clip to the output dtype's range and cast.
    """
    zero_point = scalar_constant(input_zero_point)
    shifted = te.compute(acc.shape, lambda *i: acc(*i) + zero_point(), name="T_add")
    channel_axis = len(acc.shape) - 1

    def _requantize(*i):
        c = i[channel_axis]
        left = tvm.te.max(shift[c], 0)
        right = tvm.te.max(-shift[c], 0)
        return tvm.tir.q_multiply_shift_per_axis(
            shifted(*i), multiplier[c], left, right, tvm.tir.const(31, "int32"),
            tvm.tir.const(True, "bool"), tvm.tir.const(True, "bool"),
        )

    scaled = te.compute(acc.shape, _requantize, name="T_requantize")
    info = np.iinfo(output_dtype)
    clipped = te.compute(
        acc.shape,
        lambda *i: tvm.te.max(tvm.te.min(scaled(*i), int(info.max)), int(info.min)),
        name="T_clip",
    )
    return te.compute(acc.shape, lambda *i: clipped(*i).astype(output_dtype), name="T_cast")


def quantized_conv2d_nhwc(
    batch: int = 1,
    height: int = 16,
    width: int = 16,
    in_channels: int = 64,
    out_channels: int = 64,
    kernel: int = 3,
) -> tvm.IRModule:
    """The seed workload: int8 NHWC conv2d (int8 x int8 -> int32) and its requantize epilogue.

    Inputs: data ``(N, H, W, C)`` int8, weight ``(KH, KW, C, O)`` int8, per-channel multiplier and
    shift ``(O,)`` int32. Output: ``(N, H, W, O)`` uint8.
    """
    data = te.placeholder((batch, height, width, in_channels), "int8", name="data")
    weight = te.placeholder((kernel, kernel, in_channels, out_channels), "int8", name="weight")
    multiplier = te.placeholder((out_channels,), "int32", name="multiplier")
    shift = te.placeholder((out_channels,), "int32", name="shift")
    conv = topi.nn.conv2d_nhwc(data, weight, 1, kernel // 2, 1, out_dtype="int32")
    out = requantize_epilogue(conv, multiplier, shift)
    return tvm.IRModule({"main": te.create_prim_func([data, weight, multiplier, shift, out])})


def quantized_dense(batch: int = 16, in_features: int = 64, out_features: int = 32) -> tvm.IRModule:
    """int8 dense (int8 x int8 -> int32) with the same requantize epilogue."""
    data = te.placeholder((batch, in_features), "int8", name="data")
    weight = te.placeholder((out_features, in_features), "int8", name="weight")
    multiplier = te.placeholder((out_features,), "int32", name="multiplier")
    shift = te.placeholder((out_features,), "int32", name="shift")
    acc = topi.nn.dense(data, weight, out_dtype="int32")
    out = requantize_epilogue(acc, multiplier, shift)
    return tvm.IRModule({"main": te.create_prim_func([data, weight, multiplier, shift, out])})


# The quantized tasks the benchmarks time, by a name that says what they are.
BENCHMARK_TASKS = {
    "seed: int8 conv2d 3x3 NHWC 16x16x64->64 + requantize": quantized_conv2d_nhwc,
    "int8 conv2d 1x1 NHWC 14x14x128->256 + requantize": lambda: quantized_conv2d_nhwc(
        height=14, width=14, in_channels=128, out_channels=256, kernel=1),
    "int8 dense 16x512->128 + requantize": lambda: quantized_dense(16, 512, 128),
}
