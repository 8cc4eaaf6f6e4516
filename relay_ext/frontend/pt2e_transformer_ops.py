"""The ATen ops of a transformer encoder's PT2E program as Relay: :data:`TRANSFORMER_CONVERTERS`
(merged into :data:`.pt2e_ops.CONVERTERS`).

A BERT-style encoder exported with ``torch.export`` calls ``aten.layer_norm``, ``aten.softmax``,
``aten.gelu``, ``aten.tanh``, ``aten.matmul`` of two activations (attention scores and context),
``aten.div`` by the square root of the head size, and ``aten.select`` / ``aten.slice`` to take the
[CLS] position. Each becomes the Relay op that computes it in float; the QNN passes
(:mod:`.qnn_passes`) then make integer what the quantizer quantized:

* ``matmul`` / ``bmm`` of two activations is ``nn.batch_matmul`` with its second operand
  transposed (``transpose_b``, the only form ``qnn.batch_matmul`` has): FakeQuantizationToInteger
  makes it ``qnn.batch_matmul`` where both operands are dequantized 8-bit tensors
  (X86InductorQuantizer given a config for ``torch.matmul``: all four of an encoder; the
  XNNPACK-style quantizer, which annotates no matmul but quantizes every linear's output: the
  scores ``Q K^T``) and leaves it float otherwise (X86InductorQuantizer's default config, and
  ``softmax(...) V``). An operand that is not dequantized goes behind a ``copy``, and so does a
  linear's output whose features a reshape splits into heads (:func:`_kept_float`,
  :func:`heads_split_input`): without them the ``use_qat`` rewrite carries the linear's int32
  accumulator on into the matmul;
* ``matmul`` of an activation and a 2-D constant weight is ``nn.dense``;
* ``layer_norm`` is ``nn.layer_norm`` and ``softmax`` ``nn.softmax``: FakeQuantizationToInteger has
  no handler for the first and converts the second only when asked (it is not), so both stay
  float as PyTorch computes them;
* ``gelu`` (erf or tanh form) and ``tanh`` are written with a ``divide`` on every path from the
  input to the result, an op FakeQuantizationToInteger does not convert (as
  :func:`.pt2e_ops.float_sigmoid`). They follow a linear layer whose output the quantizer leaves
  float (the feed-forward's GELU, the pooler's tanh), and the pass, walking back from the
  quantize after them, would otherwise take them and the linear into one integer region:
  ``qnn.tanh`` / ``qnn.erf`` of the int32 dense output. Written with ``divide`` they stay float,
  on the dequantized dense output;
* a linear layer whose float output the program computes on (residual add, GELU, tanh) adds its
  bias in float after the dense's dequantize, as the program does (:func:`float_bias`, used by
  :mod:`.pt2e_ops`' linear converter);
* ``baddbmm`` and ``scaled_dot_product_attention`` (without mask, dropout or causality) are
  written with the same ``batch_matmul`` as ``matmul``; ``select`` is ``take``, ``slice``
  ``strided_slice``, ``expand`` ``broadcast_to``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from tvm import relay

from relay_ext.frontend.pt2e_cat import is_dequantized
from relay_ext.frontend.pt2e_graph import (
    QUANTIZE_PER_TENSOR,
    Constant,
    Converter,
    GraphConverter,
    UnsupportedOperator,
    op_name,
)


def float_tanh(x: relay.Expr) -> relay.Expr:
    """``tanh(x)`` as ``2 / (1 + exp(x / -0.5)) - 1``: ``divide`` first, so that it stays float
    (module docstring); exact to float rounding for any ``x`` (``exp`` overflowing to infinity
    gives -1)."""
    exp = relay.exp(relay.divide(x, relay.const(-0.5)))
    return relay.subtract(relay.divide(relay.const(2.0), relay.add(relay.const(1.0), exp)), relay.const(1.0))


def float_gelu(x: relay.Expr, approximate: str = "none") -> relay.Expr:
    """GELU in float, ``divide`` first (module docstring): ``h (1 + erf(h)) / sqrt(2)`` with
    ``h = x / sqrt(2)``, or PyTorch's tanh approximation with ``approximate="tanh"``."""
    if approximate == "tanh":
        half = relay.divide(x, relay.const(2.0))
        inner = relay.multiply(relay.const(math.sqrt(2.0 / math.pi)),
                               relay.add(x, relay.multiply(relay.const(0.044715), relay.multiply(x, relay.multiply(x, x)))))
        return relay.multiply(half, relay.add(relay.const(1.0), float_tanh(inner)))
    if approximate != "none":
        raise UnsupportedOperator(f"gelu with approximate={approximate!r}")
    h = relay.divide(x, relay.const(math.sqrt(2.0)))
    return relay.multiply(relay.multiply(h, relay.add(relay.const(1.0), relay.erf(h))), relay.const(math.sqrt(0.5)))


def _gelu(converter: GraphConverter, node: Any) -> relay.Expr:
    return float_gelu(converter.input(node), str(converter.arg(node, 1, "approximate", "none")))


def _tanh(converter: GraphConverter, node: Any) -> relay.Expr:
    return float_tanh(converter.input(node))


def _layer_norm(converter: GraphConverter, node: Any) -> relay.Expr:
    """``layer_norm(x, normalized_shape, weight, bias, eps)`` over the last axis."""
    normalized = [int(d) for d in converter.arg(node, 1)]
    if len(normalized) != 1:
        raise UnsupportedOperator(f"layer_norm over {len(normalized)} axes (only the last axis is supported)")
    weight, bias = converter.arg(node, 2, "weight"), converter.arg(node, 3, "bias")
    ones = np.ones(normalized, "float32")
    gamma = converter.expr(weight) if weight is not None else relay.const(ones)
    beta = converter.expr(bias) if bias is not None else relay.const(np.zeros_like(ones))
    return relay.nn.layer_norm(converter.input(node), gamma, beta, axis=-1,
                               epsilon=float(converter.arg(node, 4, "eps", 1e-5)))


def _softmax(converter: GraphConverter, node: Any) -> relay.Expr:
    """``softmax(x, dim)`` and ``_softmax(x, dim, half_to_float)``, in float."""
    if converter.arg(node, 2, "dtype") not in (None, False):
        raise UnsupportedOperator("softmax with a dtype")
    return relay.nn.softmax(converter.input(node), axis=int(converter.arg(node, 1, "dim")))


def _shape_of(arg: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in arg.meta["val"].shape)


def _matmul(converter: GraphConverter, node: Any) -> relay.Expr:
    """``matmul(a, b)`` / ``bmm(a, b)``: a constant 2-D ``b`` as ``nn.dense``; two activations of
    the same batch dimensions as ``nn.batch_matmul`` of (batch, M, K) and (batch, N, K), reshaped
    back to the output's shape."""
    a_shape, b_shape = _shape_of(node.args[0]), _shape_of(node.args[1])
    out_shape = converter.shape(node)
    a, b = converter.input(node, 0), converter.input(node, 1)
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise UnsupportedOperator(f"matmul of shapes {a_shape} and {b_shape} (vectors are not supported)")
    if len(b_shape) == 2:
        flat = relay.reshape(a, (-1, a_shape[-1]))
        return relay.reshape(relay.nn.dense(flat, relay.transpose(b, (1, 0)), units=b_shape[1]), out_shape)
    if a_shape[:-2] != b_shape[:-2]:
        raise UnsupportedOperator(f"matmul broadcasting {a_shape} against {b_shape}")
    batch = int(np.prod(a_shape[:-2]))
    left = relay.reshape(_kept_float(a, node.args[0]), (batch, a_shape[-2], a_shape[-1]))
    right = relay.transpose(relay.reshape(_kept_float(b, node.args[1]), (batch, b_shape[-2], b_shape[-1])), (0, 2, 1))
    return relay.reshape(relay.nn.batch_matmul(left, right, transpose_a=False, transpose_b=True), out_shape)


def _kept_float(expr: relay.Expr, arg: Any) -> relay.Expr:
    """An operand of a matmul of two activations as it is when it is a dequantized 8-bit tensor;
    otherwise behind a ``copy``, an op FakeQuantizationToInteger does not convert. Its ``use_qat``
    rewrite carries a linear layer's int32 output (``qnn.dense`` + bias, left float by the
    quantizer) on through reshapes and transposes into the ``batch_matmul`` and builds
    ``qnn.batch_matmul`` of int32 operands (``Expected quantized batch_matmul type(int8, uint8)
    for input but was int32``); behind the copy the linear ends in a dequantize and the matmul
    stays float, as the program computes it."""
    return expr if is_dequantized(arg) else relay.copy(expr)


def float_bias(node: Any) -> bool:
    """Whether a linear layer's bias is added in float, after the dense's dequantize (``add``,
    which the ``use_qat`` rewrite does not take, where ``nn.bias_add`` becomes an int32 add of
    the bias rounded to the accumulator's step ``sx * sw``): where the quantizer leaves the
    layer's output float and the program computes on with it (a residual add and LayerNorm, GELU,
    tanh) before its next quantize. There the rounded bias moved values across that quantize's
    rounding boundaries (an encoder's output up to 1.2 output steps off the program); added in
    float, as the program adds it, nothing is rounded before that quantize. A linear whose output
    is quantized, or is the program's output, keeps ``nn.bias_add``: the quantize rounds far more
    coarsely, the output moves by a fraction of a step at most."""
    users = list(node.users)
    return bool(users) and not any(user.op == "output" or op_name(user.target) == QUANTIZE_PER_TENSOR for user in users)


def heads_split_input(expr: relay.Expr, node: Any) -> relay.Expr:
    """The input of a reshape (``node``), behind a ``copy`` when it is a linear layer's output
    whose features the reshape splits (attention heads): the linear's ``qnn.dense`` has a
    per-channel int32 output, whose quantization axis FakeQuantizationToInteger's ``use_qat``
    rewrite cannot carry through a reshape that splits it (it keeps the axis, and the scale of
    ``features`` values no longer matches it: a type error). Behind the copy the dense ends in a
    dequantize before the reshape."""
    source = node.args[0]
    if not (isinstance(source, torch.fx.Node) and source.op == "call_function"
            and op_name(source.target) in ("aten.linear", "aten.matmul")):
        return expr
    in_shape, out_shape = _shape_of(source), tuple(int(d) for d in node.meta["val"].shape)
    return expr if in_shape[-1:] == out_shape[-1:] else relay.copy(expr)


def _baddbmm(converter: GraphConverter, node: Any) -> relay.Expr:
    """``baddbmm(input, a, b, beta, alpha)``: ``beta * input + alpha * bmm(a, b)``."""
    beta, alpha = float(node.kwargs.get("beta", 1.0)), float(node.kwargs.get("alpha", 1.0))
    product = _matmul(converter, _Args(node, node.args[1:3]))
    if alpha != 1.0:
        product = relay.multiply(product, relay.const(alpha))
    added = converter.input(node, 0)
    if beta != 1.0:
        added = relay.multiply(added, relay.const(beta))
    return relay.add(added, product) if beta != 0.0 else product


class _Args:
    """A node seen with other positional arguments (``baddbmm``'s bmm operands)."""

    def __init__(self, node: Any, args: tuple[Any, ...]) -> None:
        self.args, self.kwargs, self.meta, self.name = tuple(args), {}, node.meta, node.name


def _div(converter: GraphConverter, node: Any) -> relay.Expr:
    """``div(x, y)`` without rounding mode (attention scores by the square root of the head size)."""
    if node.kwargs.get("rounding_mode") is not None:
        raise UnsupportedOperator(f"div with rounding_mode={node.kwargs['rounding_mode']!r}")
    return relay.divide(converter.input(node, 0), converter.input(node, 1))


def _sub(converter: GraphConverter, node: Any) -> relay.Expr:
    alpha = node.kwargs.get("alpha", 1)
    right = converter.input(node, 1)
    if alpha != 1:
        right = relay.multiply(right, relay.const(float(alpha)))
    return relay.subtract(converter.input(node, 0), right)


def _select(converter: GraphConverter, node: Any) -> relay.Expr:
    """``select(x, dim, index)``: one position along ``dim`` ([CLS] pooling's ``x[:, 0]``)."""
    shape = _shape_of(node.args[0])
    dim = int(converter.arg(node, 1)) % len(shape)
    index = int(converter.arg(node, 2)) % shape[dim]
    return relay.take(converter.input(node), relay.const(index, "int32"), axis=dim)


def _slice(converter: GraphConverter, node: Any) -> relay.Expr:
    """``slice(x, dim, start, end, step)``, the bounds clamped to the axis as PyTorch clamps them."""
    shape = _shape_of(node.args[0])
    dim = int(converter.arg(node, 1, "dim", 0)) % len(shape)
    start, end = converter.arg(node, 2, "start"), converter.arg(node, 3, "end")
    step = int(converter.arg(node, 4, "step", 1))
    size = shape[dim]

    def bound(value: Any, default: int) -> int:
        value = default if value is None else int(value)
        return min(max(value + size if value < 0 else value, 0), size)

    return relay.strided_slice(converter.input(node), [bound(start, 0)], [bound(end, size)], [step], axes=[dim])


def _expand(converter: GraphConverter, node: Any) -> relay.Expr:
    return relay.broadcast_to(converter.input(node), converter.shape(node))


def _constant_or_expr(converter: GraphConverter, value: Any) -> relay.Expr:
    return relay.const(value.array) if isinstance(value, Constant) else converter.expr(value)


def _scaled_dot_product_attention(converter: GraphConverter, node: Any) -> relay.Expr:
    """``scaled_dot_product_attention(q, k, v)`` without mask, dropout or causality: softmax of
    ``q k^T * scale`` times ``v``, in float (the matmuls as :func:`_matmul` writes them)."""
    mask = converter.arg(node, 3, "attn_mask")
    if mask is not None or float(converter.arg(node, 4, "dropout_p", 0.0)) != 0.0 or converter.arg(node, 5, "is_causal", False):
        raise UnsupportedOperator("scaled_dot_product_attention with a mask, dropout or is_causal")
    q_shape, k_shape, v_shape = (_shape_of(node.args[i]) for i in range(3))
    if not q_shape[:-2] == k_shape[:-2] == v_shape[:-2]:
        raise UnsupportedOperator("scaled_dot_product_attention with broadcast batch dimensions")
    scale = node.kwargs.get("scale") or 1.0 / math.sqrt(q_shape[-1])
    batch = int(np.prod(q_shape[:-2]))
    q, k, v = (relay.reshape(_kept_float(_constant_or_expr(converter, converter.arg(node, i)), node.args[i]),
                             (batch,) + shape[-2:])
               for i, shape in enumerate((q_shape, k_shape, v_shape)))
    scores = relay.multiply(relay.nn.batch_matmul(q, k, transpose_b=True), relay.const(float(scale)))
    context = relay.nn.batch_matmul(relay.nn.softmax(scores, axis=-1), relay.transpose(v, (0, 2, 1)), transpose_b=True)
    return relay.reshape(context, converter.shape(node))


TRANSFORMER_CONVERTERS: dict[str, Converter] = {
    "aten.layer_norm": _layer_norm,
    "aten.softmax": _softmax,
    "aten._softmax": _softmax,
    "aten.gelu": _gelu,
    "aten.tanh": _tanh,
    "aten.matmul": _matmul,
    "aten.bmm": _matmul,
    "aten.baddbmm": _baddbmm,
    "aten.div": _div,
    "aten.sub": _sub,
    "aten.select": _select,
    "aten.slice": _slice,
    "aten.expand": _expand,
    "aten.scaled_dot_product_attention": _scaled_dot_product_attention,
}
