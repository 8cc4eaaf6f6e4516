"""The ATen and quantized_decomposed ops of PT2E programs as Relay: :data:`CONVERTERS`.

Each converter takes the :class:`~relay_ext.frontend.pt2e_graph.GraphConverter` and an FX node and
returns the Relay expression computing the same as PyTorch running the program: quantize and
dequantize as ``qnn.quantize`` / ``qnn.dequantize``, every other op in float (the QNN passes make
the regions between them integer afterwards, :mod:`.qnn_passes`). Three PT2E patterns get more than
a one-to-one translation:

* a residual ``add`` of a dequantized tensor and a conv's float output (X86InductorQuantizer's conv
  + add), or of two dequantized tensors (the XNNPACK-style quantizer's): int32 quantize/dequantize
  pairs on both operands (:func:`int32_residual_operands`), so that the conv becomes
  ``qnn.conv2d`` too and the sum is rounded once, as PyTorch rounds it;
* ``cat`` / ``stack`` of float operands (GoogLeNet's inception module, ShuffleNetV2's unit):
  quantize/dequantize pairs on the operands and the result (:mod:`.pt2e_cat`);
* float activations the quantizer leaves between a conv's float output and the next quantize
  (``silu``, ``sigmoid``, ``hardswish``, ``hardsigmoid``: EfficientNet's swish and squeeze-
  excitation gate, MobileNetV3's): written with ``divide`` (:func:`float_sigmoid`), an op TVM's
  ``FakeQuantizationToInteger`` does not convert, so the pass keeps them float as PyTorch computes
  them. Written as ``sigmoid`` / ``multiply``, the pass took them into the conv's integer region
  and built ``qnn.sigmoid`` / ``qnn.mul`` of the conv's int32 accumulator: ``Expected quantized
  type(int8, uint8) for input but was int32`` (EfficientNet-B0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tvm import relay

from relay_ext.frontend.fq2i_prepare import int32_add_step, int32_pair
from relay_ext.frontend.pt2e_cat import convert_cat, convert_stack
from relay_ext.frontend.pt2e_graph import (DEQUANTIZE_PER_TENSOR, QUANTIZE_PER_TENSOR, Constant, Converter, GraphConverter,
                                           UnsupportedOperator, clipped_quantize, op_name, relay_dtype)
from relay_ext.frontend.pt2e_transformer_ops import TRANSFORMER_CONVERTERS, float_bias, heads_split_input


def _pair(value: Any, length: int = 2) -> tuple[int, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value) * (length if len(value) == 1 else 1)
    return (int(value),) * length


def _quantize(converter: GraphConverter, node: Any) -> relay.Expr:
    per_channel = op_name(node.target).endswith("per_channel")
    data = converter.input(node)
    scale, zero_point = converter.arg(node, 1), converter.arg(node, 2)
    axis = int(converter.arg(node, 3)) if per_channel else -1
    quant_min, quant_max, dtype = (converter.arg(node, i) for i in ((4, 5, 6) if per_channel else (3, 4, 5)))
    return clipped_quantize(data, _float_const(scale), _int_const(zero_point), relay_dtype(dtype),
                            quant_min, quant_max, axis=axis)


def _dequantize(converter: GraphConverter, node: Any) -> relay.Expr:
    per_channel = op_name(node.target).endswith("per_channel")
    data = converter.arg(node, 0)
    scale, zero_point = converter.arg(node, 1), converter.arg(node, 2)
    axis = int(converter.arg(node, 3)) if per_channel else -1
    if isinstance(data, Constant):  # an int8 weight
        data = relay.const(data.array)
    return relay.qnn.op.dequantize(data, _float_const(scale), _int_const(zero_point), axis=axis)


def _float_const(value: Any) -> relay.Constant:
    array = value.array if isinstance(value, Constant) else np.asarray(value)
    return relay.const(array.astype("float32").reshape(-1) if array.size > 1 else array.astype("float32").reshape(()))


def _int_const(value: Any) -> relay.Constant:
    """A zero point as an int32 constant; per-channel zero points that are all equal (PT2E's
    symmetric weights: all 0) as one scalar, so that QNN's lowering sees the zero point and drops
    the correction terms a nonzero weight zero point needs (input sums per output channel)."""
    array = value.array if isinstance(value, Constant) else np.asarray(value if value is not None else 0)
    array = array.astype("int32").reshape(-1)
    if array.size == 1 or np.all(array == array[0]):
        return relay.const(array[0])
    return relay.const(array)


def _conv2d(converter: GraphConverter, node: Any) -> relay.Expr:
    data, weight = converter.input(node, 0), converter.input(node, 1)
    bias = converter.arg(node, 2, "bias")
    weight_shape = tuple(int(d) for d in node.args[1].meta["val"].shape)
    if len(weight_shape) != 4:
        raise UnsupportedOperator(f"only 2-D convolutions are supported, weight shape {weight_shape}")
    padding = converter.arg(node, 4, "padding", [0])
    if isinstance(padding, str):
        raise UnsupportedOperator(f"padding={padding!r} (give the padding as numbers)")
    out = relay.nn.conv2d(
        data, weight,
        strides=_pair(converter.arg(node, 3, "stride", [1])),
        padding=_pair(padding),
        dilation=_pair(converter.arg(node, 5, "dilation", [1])),
        groups=int(converter.arg(node, 6, "groups", 1)),
        channels=weight_shape[0],
        kernel_size=weight_shape[2:],
    )
    return out if bias is None else relay.nn.bias_add(out, converter.expr(bias), axis=1)


def _linear(converter: GraphConverter, node: Any) -> relay.Expr:
    data, weight = converter.input(node, 0), converter.input(node, 1)
    bias = converter.arg(node, 2, "bias")
    in_shape = tuple(int(d) for d in node.args[0].meta["val"].shape)
    units = int(node.args[1].meta["val"].shape[0])
    if len(in_shape) != 2:
        data = relay.reshape(data, (-1, in_shape[-1]))
    out = relay.nn.dense(data, weight, units=units)
    if bias is not None:
        out = (relay.add(out, converter.expr(bias)) if float_bias(node)
               else relay.nn.bias_add(out, converter.expr(bias), axis=-1))
    if len(in_shape) != 2:
        out = relay.reshape(out, converter.shape(node))
    return out


def _binary(op: Callable[[relay.Expr, relay.Expr], relay.Expr]) -> Converter:
    def convert(converter: GraphConverter, node: Any) -> relay.Expr:
        alpha = node.kwargs.get("alpha", 1)
        left, right = converter.input(node, 0), converter.input(node, 1)
        if alpha != 1:
            right = relay.multiply(right, relay.const(float(alpha)))
        if op is relay.add and alpha == 1:
            left, right = int32_residual_operands(node, left, right)
        return op(left, right)

    return convert


# The int32 step of a residual add, as a fraction of its finest quantized operand's step (see below).
RESIDUAL_STEP_FRACTION = 1.0 / 256


def int32_residual_operands(node: Any, left: relay.Expr, right: relay.Expr) -> tuple[relay.Expr, relay.Expr]:
    """Both operands of an ``add`` with at least one dequantized operand, each given an int32
    quantize/dequantize pair at one step, zero point 0, finer than the finest operand step.
    FakeQuantizationToInteger then adds them as plain int32 (its handler does when both operands
    share an int32 step) and requantizes the sum once to the add's output step, rounding once as
    PyTorch does (it adds in float and quantizes the sum). Two cases:

    * X86InductorQuantizer leaves a conv's output float when it feeds a residual add (PT2E fuses
      conv + add in one int8 kernel): ``add(dequantize(a), conv(...)) -> quantize``. The pairs make
      the conv ``qnn.conv2d`` requantized to 1/256 of ``a``'s step (the conv's range is not known
      here, so the step stays coarse enough for any sum the add's output can hold), and ``a`` is
      only shifted;
    * both operands dequantized (the XNNPACK-style quantizer quantizes every conv's output): left
      to TVM, ``qnn.add`` would requantize each operand to the output step, round both and add: up
      to one output step from PyTorch per add, adding up along a ResNet's residual chain. Here the
      finer operand is only shifted, the other rounded to ``2**-k`` of the finer step, ``k`` as
      large as keeps the int32 sum of two 8-bit operands from overflowing (16 for operand steps
      within a factor of 64), so that the sum is off PyTorch's float sum by ``2**-(k+1)`` of an
      operand step at most (:func:`.fq2i_prepare.int32_add_step`, which the ONNX import's adds use
      too).

    Operands whose steps are more than 2**23 apart are left to ``qnn.add``."""
    args = node.args[:2]
    scales = [scale for scale in (_dequantized_scale(arg) for arg in args) if scale is not None]
    if not scales:
        return left, right
    if len(scales) == 2:
        step = int32_add_step(scales)
        if step is None:
            return left, right
    else:
        step = scales[0] * RESIDUAL_STEP_FRACTION
    return int32_pair(left, step), int32_pair(right, step)


def _dequantized_scale(arg: Any) -> float | None:
    """The step of ``arg`` when it is a per-tensor dequantize's output, else None."""
    if not isinstance(arg, torch.fx.Node) or arg.op != "call_function":
        return None
    if op_name(arg.target) != DEQUANTIZE_PER_TENSOR:
        return None
    scale = arg.args[1]
    if isinstance(scale, (int, float)):
        return float(scale)
    return None


def _unary(op: Callable[[relay.Expr], relay.Expr]) -> Converter:
    return lambda converter, node: op(converter.input(node, 0))


def float_sigmoid(x: relay.Expr) -> relay.Expr:
    """``1 / (1 + exp(-x))``: sigmoid in float, with ``divide`` and ``negative``, which
    FakeQuantizationToInteger does not convert, so that it stays float (module docstring)."""
    return relay.divide(relay.const(1.0), relay.add(relay.const(1.0), relay.exp(relay.negative(x))))


def float_silu(x: relay.Expr) -> relay.Expr:
    """``x * sigmoid(x)`` as ``x / (1 + exp(-x))``, float (see :func:`float_sigmoid`)."""
    return relay.divide(x, relay.add(relay.const(1.0), relay.exp(relay.negative(x))))


def _hardsigmoid(x: relay.Expr) -> relay.Expr:
    return relay.divide(relay.clip(relay.add(x, relay.const(3.0)), 0.0, 6.0), relay.const(6.0))


def _hardswish(x: relay.Expr) -> relay.Expr:
    return relay.multiply(x, _hardsigmoid(x))


def _hardtanh(converter: GraphConverter, node: Any) -> relay.Expr:
    """``clamp``; bounds beyond what a dequantized input can hold are moved to half a step past
    its quantized range, where they change nothing: FakeQuantizationToInteger writes the bounds
    in the input's integer type, and ReLU6's 6 is past int8's 127 at small steps (``Literal value
    310 exceeds maximum of int8``, MobileNetV2 from the XNNPACK-style quantizer)."""
    low, high = float(converter.arg(node, 1, "min_val", -1.0)), float(converter.arg(node, 2, "max_val", 1.0))
    source = node.args[0]
    if (isinstance(source, torch.fx.Node) and source.op == "call_function"
            and op_name(source.target) == DEQUANTIZE_PER_TENSOR and len(source.args) >= 5
            and all(isinstance(value, (int, float)) for value in source.args[1:5])):
        scale, zero_point, quant_min, quant_max = (float(value) for value in source.args[1:5])
        low = max(low, (quant_min - zero_point - 0.5) * scale)
        high = min(high, (quant_max - zero_point + 0.5) * scale)
    return relay.clip(converter.input(node), low, high)


def _max_pool2d(converter: GraphConverter, node: Any) -> relay.Expr:
    kernel = _pair(converter.arg(node, 1))
    stride = converter.arg(node, 2, "stride", []) or kernel
    return relay.nn.max_pool2d(converter.input(node), pool_size=kernel, strides=_pair(stride),
                               padding=_pair(converter.arg(node, 3, "padding", 0)),
                               dilation=_pair(converter.arg(node, 4, "dilation", 1)),
                               ceil_mode=bool(converter.arg(node, 5, "ceil_mode", False)))


def _avg_pool2d(converter: GraphConverter, node: Any) -> relay.Expr:
    kernel = _pair(converter.arg(node, 1))
    stride = converter.arg(node, 2, "stride", []) or kernel
    if converter.arg(node, 6, "divisor_override") is not None:
        raise UnsupportedOperator("avg_pool2d with divisor_override")
    return relay.nn.avg_pool2d(converter.input(node), pool_size=kernel, strides=_pair(stride),
                               padding=_pair(converter.arg(node, 3, "padding", 0)),
                               ceil_mode=bool(converter.arg(node, 4, "ceil_mode", False)),
                               count_include_pad=bool(converter.arg(node, 5, "count_include_pad", True)))


def _adaptive_avg_pool2d(converter: GraphConverter, node: Any) -> relay.Expr:
    size = _pair(converter.arg(node, 1))
    if size == (1, 1):
        return relay.nn.global_avg_pool2d(converter.input(node))
    return relay.nn.adaptive_avg_pool2d(converter.input(node), output_size=size)


def _mean(converter: GraphConverter, node: Any) -> relay.Expr:
    dims = converter.arg(node, 1, "dim")
    axis = None if dims is None else [int(d) for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
    return relay.mean(converter.input(node), axis=axis, keepdims=bool(converter.arg(node, 2, "keepdim", False)))


def _reshape(converter: GraphConverter, node: Any) -> relay.Expr:
    return relay.reshape(heads_split_input(converter.input(node), node), converter.shape(node))


def _permute(converter: GraphConverter, node: Any) -> relay.Expr:
    return relay.transpose(converter.input(node), [int(d) for d in converter.arg(node, 1, "dims")])


def _transpose(converter: GraphConverter, node: Any) -> relay.Expr:
    """``transpose(x, a, b)``: swap two axes (ShuffleNet's channel shuffle)."""
    rank = len(converter.shape(node))
    axes = list(range(rank))
    first, second = (int(converter.arg(node, i)) % rank for i in (1, 2))
    axes[first], axes[second] = axes[second], axes[first]
    return relay.transpose(converter.input(node), axes)


def _split_points(sizes: list[int]) -> list[int]:
    return [int(point) for point in np.cumsum(sizes)[:-1]]


def _chunk(converter: GraphConverter, node: Any) -> Any:
    """``chunk(x, n, dim)``: PyTorch's pieces (the last may be smaller), as the program's
    metadata gives their sizes; a tuple read with ``getitem`` (ShuffleNet's channel split)."""
    dim = int(converter.arg(node, 2, "dim", 0))
    sizes = [int(piece.shape[dim]) for piece in node.meta["val"]]
    return relay.split(converter.input(node), _split_points(sizes), axis=dim)


def _split(converter: GraphConverter, node: Any) -> Any:
    """``split(x, size or sizes, dim)`` and ``split_with_sizes``: as :func:`_chunk`."""
    dim = int(converter.arg(node, 2, "dim", 0))
    sizes = [int(piece.shape[dim]) for piece in node.meta["val"]]
    return relay.split(converter.input(node), _split_points(sizes), axis=dim)


def _identity(converter: GraphConverter, node: Any) -> Any:
    return converter.arg(node, 0)


def _dropout(converter: GraphConverter, node: Any) -> Any:
    """``dropout(x, p, train)`` of an inference program (``train`` False): the identity."""
    if converter.arg(node, 2, "train", False):
        raise UnsupportedOperator("dropout in training mode; export the model after model.eval()")
    return converter.arg(node, 0)


def _no_value(converter: GraphConverter, node: Any) -> None:  # metadata asserts return nothing
    return None


def _getitem(converter: GraphConverter, node: Any) -> Any:
    return converter.arg(node, 0)[int(node.args[1])]


CONVERTERS: dict[str, Converter] = {
    QUANTIZE_PER_TENSOR: _quantize,
    "quantized_decomposed.quantize_per_channel": _quantize,
    "quantized_decomposed.dequantize_per_tensor": _dequantize,
    "quantized_decomposed.dequantize_per_channel": _dequantize,
    "aten.conv2d": _conv2d,
    "aten.linear": _linear,
    "aten.add": _binary(relay.add),
    "aten.add_": _binary(relay.add),
    "aten.mul": _binary(relay.multiply),
    "aten.mul_": _binary(relay.multiply),
    "aten.relu": _unary(relay.nn.relu),
    "aten.relu_": _unary(relay.nn.relu),
    "aten.hardtanh": _hardtanh,
    "aten.hardtanh_": _hardtanh,
    "aten.sigmoid": _unary(float_sigmoid),
    "aten.sigmoid_": _unary(float_sigmoid),
    "aten.hardsigmoid": _unary(_hardsigmoid),
    "aten.hardsigmoid_": _unary(_hardsigmoid),
    "aten.hardswish": _unary(_hardswish),
    "aten.hardswish_": _unary(_hardswish),
    "aten.silu": _unary(float_silu),
    "aten.silu_": _unary(float_silu),
    "aten.max_pool2d": _max_pool2d,
    "aten.avg_pool2d": _avg_pool2d,
    "aten.adaptive_avg_pool2d": _adaptive_avg_pool2d,
    "aten.mean": _mean,
    "aten.cat": convert_cat,
    "aten.stack": convert_stack,
    "aten.flatten": _reshape,
    "aten.reshape": _reshape,
    "aten.view": _reshape,
    "aten._unsafe_view": _reshape,
    "aten.squeeze": _reshape,
    "aten.unsqueeze": _reshape,
    "aten.permute": _permute,
    "aten.transpose": _transpose,
    "aten.chunk": _chunk,
    "aten.split": _split,
    "aten.split_with_sizes": _split,
    "aten.clone": _identity,
    "aten.contiguous": _identity,
    "aten.dropout": _dropout,
    "aten.dropout_": _dropout,
    "aten.feature_dropout": _dropout,
    "aten.feature_dropout_": _dropout,
    "aten.alias": _identity,
    "aten.detach": _identity,
    "aten._assert_tensor_metadata": _no_value,
    "_operator.getitem": _getitem,
    **TRANSFORMER_CONVERTERS,  # layer_norm, softmax, gelu, tanh, matmul, select ... (.pt2e_transformer_ops)
}

