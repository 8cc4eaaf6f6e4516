"""PT2E's ``cat`` and ``stack`` of float operands as Relay that FakeQuantizationToInteger can make
integer: :func:`convert_cat`, :func:`convert_stack` (used by :mod:`.pt2e_ops`).

X86InductorQuantizer often concatenates tensors it left float: a conv + ReLU's output joined with
other branches (GoogLeNet's inception module: all four operands) or with one half of a ``chunk``
(ShuffleNetV2's unit), and the concatenated value reaches one or several quantizes, through moves
(views, the channel shuffle, ``chunk``), max pools, and further ``cat`` s. Left as it is, the pass
makes each conv ``qnn.conv2d`` with its per-channel int32 output scale and hands those to
``qnn.concatenate``, which takes one scale per operand
(``Check failed: tensor_type->shape.size() == 0``).
So every operand, and the result, is given a quantize/dequantize pair:

* at the parameters of the quantizes the value reaches, when it reaches nothing else, only through
  ops that commute with quantizing (moves, concatenation, max pooling), and they all quantize
  alike: exact, since quantizing before those ops gives what quantizing after them gives
  (GoogLeNet's inception output: a quantize and a max pool then the same quantize);
* otherwise (quantizes of different parameters: ShuffleNetV2's kept half, quantized at the next
  unit's parameters while the other half is quantized at this unit's; or an op in between that
  does not commute, such as an average pool) at an int32 step 256 times finer than the finest of
  those quantizes and of the dequantized operands, zero point 0, as the residual add's operands
  (:func:`.pt2e_ops.int32_residual_operands`): each conv is rounded to 1/256 of that step before
  the quantizes after the ``cat`` round it, where PyTorch rounds once: an output differs, by one
  step, only where a value lies within 1/512 of a step of a rounding boundary;
* a ``cat`` whose value reaches no quantize is left float (no integer region contains it), and one
  whose operands are all dequantized tensors and whose value reaches alike quantizes only is left
  to ``qnn.concatenate``, which requantizes each operand to their parameters once. All-dequantized
  operands whose joined value reaches quantizes of different parameters (the XNNPACK-style
  quantizer's ShuffleNetV2 unit: the cat of both branches, shuffled, then split between two units)
  get the int32 pairs too: ``qnn.concatenate`` cannot make one int32 value of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tvm import relay

from relay_ext.frontend.pt2e_graph import (DEQUANTIZE_PER_TENSOR, QUANTIZE_PER_TENSOR, SHAPE_OPS, Constant, GraphConverter,
                                           clipped_quantize, op_name, relay_dtype)
# Ops through which a value keeps its quantization (moves, splits, reshapes, the identity).
_PASS_THROUGH = SHAPE_OPS | {"aten.chunk", "aten.split", "aten.split_with_sizes", "_operator.getitem"}
# Ops that commute with quantizing at one step: q(f(x)) == f(q(x)) elementwise.
_COMMUTING = _PASS_THROUGH | {"aten.cat", "aten.stack", "aten.max_pool2d"}
# The int32 step of the fallback, as a fraction of the finest step involved (module docstring).
CAT_STEP_FRACTION = 1.0 / 256


def convert_cat(converter: GraphConverter, node: Any) -> relay.Expr:
    """``cat(tensors, dim)``, its operands and result quantized as the module docstring says."""
    tensors = [converter.expr(value) for value in converter.arg(node, 0)]
    return _joined(converter, node, tensors, int(converter.arg(node, 1, "dim", 0)), stacked=False)


def convert_stack(converter: GraphConverter, node: Any) -> relay.Expr:
    """``stack(tensors, dim)``: each operand given the new axis, then joined as :func:`convert_cat`
    joins them (quantized before the new axis, where a conv's per-channel scale still has its axis)."""
    tensors = [converter.expr(value) for value in converter.arg(node, 0)]
    axis = int(converter.arg(node, 1, "dim", 0)) % len(converter.shape(node))
    return _joined(converter, node, tensors, axis, stacked=True)


def _joined(converter: GraphConverter, node: Any, tensors: list[relay.Expr], axis: int, stacked: bool) -> relay.Expr:
    def join(parts: list[relay.Expr]) -> relay.Expr:
        return relay.concatenate([relay.expand_dims(part, axis) for part in parts] if stacked else parts, axis=axis)

    sources = [dequantize_source(arg) for arg in node.args[0]]
    quantizes, commuting = following_quantizes(node)
    if not quantizes:
        return join(tensors)
    params = {_params(converter, quantize) for quantize in quantizes}
    alike = commuting and len(params) == 1
    if alike and all(source is not None for source in sources):
        return join(tensors)  # qnn.concatenate requantizes each operand once
    if alike:
        scale, zero_point, quant_min, quant_max, dtype = next(iter(params))
    else:
        steps = [p[0] for p in params] + [_params(converter, s)[0] for s in sources if s is not None]
        scale, zero_point, quant_min, quant_max, dtype = min(steps) * CAT_STEP_FRACTION, 0, None, None, "int32"

    def fake(expr: relay.Expr) -> relay.Expr:
        return fake_quantize(expr, scale, zero_point, dtype, quant_min, quant_max)

    return fake(join([fake(tensor) for tensor in tensors]))


def dequantize_source(arg: Any) -> Any:
    """The per-tensor dequantize whose output ``arg`` is, through ops that only move values; None
    when ``arg`` is computed otherwise (a float op's output)."""
    while isinstance(arg, torch.fx.Node) and arg.op == "call_function" and op_name(arg.target) in _PASS_THROUGH:
        arg = arg.args[0]
    if isinstance(arg, torch.fx.Node) and arg.op == "call_function" and op_name(arg.target) == DEQUANTIZE_PER_TENSOR:
        return arg
    return None


def is_dequantized(arg: Any) -> bool:
    """Whether ``arg`` is a per-tensor dequantize's output, through ops that only move values."""
    return dequantize_source(arg) is not None


def following_quantizes(node: Any) -> tuple[list[Any], bool]:
    """The per-tensor quantizes that ``node``'s value reaches (the first on each path), and whether
    it reaches them only, and only through ops that commute with quantizing (:data:`_COMMUTING`);
    a path that ends elsewhere (the program's output, an op with no quantize after it) makes that
    False."""
    quantizes: list[Any] = []
    commuting = True
    pending, seen = [node], {node}
    while pending:
        for user in pending.pop().users:
            if user in seen:
                continue
            seen.add(user)
            name = op_name(user.target) if user.op == "call_function" else ""
            if name == QUANTIZE_PER_TENSOR:
                quantizes.append(user)
                continue
            commuting = commuting and name in _COMMUTING
            pending.append(user)
    return quantizes, commuting


def _params(converter: GraphConverter, quantize: Any) -> tuple[float, int, int, int, str]:
    """(scale, zero point, quant_min, quant_max, dtype) of a per-tensor (de)quantize node."""
    scale, zero_point, quant_min, quant_max, dtype = (converter.arg(quantize, i) for i in range(1, 6))

    def scalar(value: Any) -> Any:
        return (value.array if isinstance(value, Constant) else np.asarray(value)).reshape(-1)[0].item()

    return float(scalar(scale)), int(scalar(zero_point)), int(quant_min), int(quant_max), relay_dtype(dtype)


def fake_quantize(expr: relay.Expr, scale: float, zero_point: int, dtype: str,
                  quant_min: int | None = None, quant_max: int | None = None) -> relay.Expr:
    """``expr`` quantized (to ``dtype``, clipped to ``quant_min .. quant_max`` where they narrow
    it) and dequantized again, per tensor."""
    step, zero = relay.const(np.float32(scale)), relay.const(np.int32(zero_point))
    return relay.qnn.op.dequantize(clipped_quantize(expr, step, zero, dtype, quant_min, quant_max), step, zero)
