"""Rewrites that make a QDQ Relay module's linear layers fit TVM's ``FakeQuantizationToInteger``,
and its adds of two dequantized tensors round once.

:func:`prepare_linear_layers` runs just before that pass (:func:`relay_ext.frontend.qnn_passes.integer_ops`)
and changes two things the pass mishandles in transformer graphs, without changing what is computed:

* ``nn.dense`` without ``units``: TVM's ONNX frontend writes a ``MatMul`` of a 3-d activation and
  a 2-d weight (every linear of a BERT-style encoder) as ``nn.dense`` with ``units`` unset. The pass
  copies the attribute into ``qnn.dense``, whose type relation sizes a per-channel weight scale by
  ``units``: with a per-channel weight (ONNX Runtime's ``per_channel=True``) the process dies with
  a segmentation fault. ``units`` is set from the weight's shape.
* a bias that is a ``dequantize`` of an 8-bit constant added to a dense/batch_matmul/conv output:
  the pass makes it ``qnn.add`` of the int32 accumulator and the int8 bias, which does not type
  check ("data types int32 and int8 do not match"). ONNX Runtime quantizes a bias so when the same
  constant also feeds another op (an all-zero bias shared with a LayerNorm's). The bias becomes its
  float value, which the pass quantizes to the accumulator's int32 scale, as it does any float
  bias.

:func:`per_channel_layout_handlers` is a context for the pass itself: the pass carries a tensor's
quantization axis unchanged through ``reshape``, ``transpose``, ``squeeze`` and ``expand_dims``,
so a per-channel int32 accumulator (a dense with a per-channel weight) reshaped from (tokens,
channels) to (batch, sequence, channels) keeps axis 1, and the requantize after it does not type
check (the scale has ``channels`` values, axis 1 has ``sequence``). Within the block those ops'
handlers move the axis with the channel dimension.

The third rewrite, :func:`single_rounding_adds`, changes rounding, not types: the pass makes
``add(dequantize(a), dequantize(b)) -> quantize`` (an ONNX QDQ ``Add``: residuals, LayerNorm's
``* gamma + beta``) ``qnn.add``, which requantizes each operand to the output step and adds, two
roundings where ONNX Runtime adds the dequantized values in float and rounds the sum once. Both
operands get an int32 ``quantize -> dequantize`` pair at one step, zero point 0, ``2**-k`` of the
finer operand step (:func:`int32_add_step`); the pass then adds them as plain int32 and
requantizes the sum once::

    before: add(dequantize(a, sa, za), dequantize(b, sb, zb))
    after:  add(dequantize(quantize(dequantize(a, sa, za), s, 0, int32), s, 0),
                dequantize(quantize(dequantize(b, sb, zb), s, 0, int32), s, 0))
    after the pass, with the quantize to (so, zo) that followed:
            requantize(add(requantize(a, sa, za, s, 0, int32), requantize(b, sb, zb, s, 0, int32)),
                       s, 0, so, zo)

The PT2E import gives its adds the same pairs while it converts (:mod:`.pt2e_ops`, with
:func:`int32_add_step`); those operands are int32, which the rewrite leaves alone.

See docs/known-tvm-issues.md.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import numpy as np
import tvm
from tvm import relay
from tvm.relay.expr_functor import ExprMutator

logger = logging.getLogger(__name__)

# Ops whose int32 accumulator a bias is added to.
_ACCUMULATING_OPS = ("nn.dense", "nn.batch_matmul", "nn.matmul", "nn.conv2d")


def prepare_linear_layers(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every ``nn.dense``'s ``units`` set and 8-bit dequantized biases of linear
    layers as float constants (see the module doc); ``main`` only, type-inferred."""
    mod = relay.transform.InferType()(mod)
    rewriter = _LinearLayerRewriter()
    main = rewriter.visit(mod["main"])
    if not rewriter.changes:
        return mod
    logger.debug("prepared linear layers for FakeQuantizationToInteger: %s", rewriter.changes)
    return _with_main(mod, main)


def _op_name(expr: relay.Expr) -> str | None:
    if isinstance(expr, relay.Call) and isinstance(expr.op, tvm.ir.Op):
        return expr.op.name
    return None


def _dequantized_constant(expr: relay.Expr) -> np.ndarray | None:
    """The float value of ``qnn.dequantize(constant, constant scale, constant zero point)`` of an
    8-bit constant, else None."""
    if _op_name(expr) != "qnn.dequantize" or not all(isinstance(arg, relay.Constant) for arg in expr.args[:3]):
        return None
    data, scale, zero_point = (arg.data.numpy() for arg in expr.args[:3])
    if data.dtype not in (np.int8, np.uint8):
        return None
    if scale.size > 1 or zero_point.size > 1:
        shape = [1] * data.ndim
        axis = int(expr.attrs.axis) % max(data.ndim, 1)
        shape[axis] = -1
        scale, zero_point = scale.reshape(shape), zero_point.reshape(shape)
    return ((data.astype(np.int64) - zero_point.astype(np.int64)) * scale.astype(np.float64)).astype(np.float32)


class _LinearLayerRewriter(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.changes: dict[str, int] = {}

    def _count(self, what: str) -> None:
        self.changes[what] = self.changes.get(what, 0) + 1

    def visit_call(self, call: relay.Call) -> relay.Expr:
        new = super().visit_call(call)
        name = _op_name(call)
        if name == "nn.dense" and call.attrs.units is None:
            weight_shape = call.args[1].checked_type.shape
            if len(weight_shape) == 2 and isinstance(weight_shape[0], tvm.tir.IntImm):
                self._count("dense units set")
                return relay.nn.dense(new.args[0], new.args[1], units=int(weight_shape[0]),
                                      out_dtype=call.attrs.out_dtype)
        if name == "add" and len(call.args) == 2:
            for index in (0, 1):
                bias = _dequantized_constant(call.args[1 - index])
                if _op_name(call.args[index]) in _ACCUMULATING_OPS and bias is not None:
                    self._count("8-bit bias as float")
                    args = [new.args[0], new.args[1]]
                    args[1 - index] = relay.const(bias)
                    return relay.add(*args)
        return new


# The finest int32 step of a sum, as 2**-k of the finer operand step (k at most this).
FINEST_SUM_STEP_BITS = 16
# Operand dtypes whose range bounds the int32 sum (:func:`int32_add_step`).
_OPERAND_DTYPES = ("int8", "uint8")


def int32_add_step(scales: list[float]) -> float | None:
    """The int32 step at which 8-bit operands of steps ``scales`` (one or two) are added exactly:
    ``2**-k`` of the finest step, ``k`` as large as keeps the int32 sum of two 8-bit operands
    (255 steps each) under ``2**31``, at most :data:`FINEST_SUM_STEP_BITS` (16 for steps within a
    factor of 64); the sum is then off the float sum by ``2**-(k+1)`` of an operand step at most.
    None when the steps are more than ``2**23`` apart (no ``k >= 0`` fits)."""
    finest, coarsest = min(scales), max(scales)
    room = 2.0**31 / (255 * (1 + coarsest / finest))
    bits = min(FINEST_SUM_STEP_BITS, int(np.floor(np.log2(room))))
    return None if bits < 0 else finest * 2.0**-bits


def int32_pair(expr: relay.Expr, step: float) -> relay.Expr:
    """``expr`` quantized to int32 at ``step``, zero point 0, and dequantized again: the operand
    form FakeQuantizationToInteger adds as plain int32 when both operands share the step."""
    scale, zero = relay.const(np.float32(step)), relay.const(np.int32(0))
    return relay.qnn.op.dequantize(relay.qnn.op.quantize(expr, scale, zero, out_dtype="int32"), scale, zero)


def single_rounding_adds(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with both operands of every ``add`` of two per-tensor dequantized 8-bit tensors
    (constant scales and zero points) given an int32 quantize/dequantize pair at
    :func:`int32_add_step` (see the module doc); ``main`` only, type-inferred."""
    rewriter = _AddRewriter()
    main = rewriter.visit(mod["main"])
    if not rewriter.count:
        return mod
    logger.debug("%d adds of dequantized tensors given int32 operands", rewriter.count)
    return _with_main(mod, main)


def _with_main(mod: tvm.IRModule, main: relay.Function) -> tvm.IRModule:
    """``mod`` with ``main`` replaced, type-inferred."""
    rewritten = tvm.IRModule(mod.functions, mod.type_definitions)
    rewritten["main"] = main
    return relay.transform.InferType()(rewritten)


def _dequantized_step(expr: relay.Expr) -> float | None:
    """The step of a per-tensor ``qnn.dequantize`` of an 8-bit tensor with constant parameters."""
    if _op_name(expr) != "qnn.dequantize" or not all(isinstance(arg, relay.Constant) for arg in expr.args[1:3]):
        return None
    scale, zero_point = (arg.data.numpy() for arg in expr.args[1:3])
    data_type = expr.args[0].checked_type
    if scale.size != 1 or zero_point.size != 1 or getattr(data_type, "dtype", None) not in _OPERAND_DTYPES:
        return None
    return float(scale.reshape(-1)[0])


class _AddRewriter(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def visit_call(self, call: relay.Call) -> relay.Expr:
        new = super().visit_call(call)
        if _op_name(call) != "add" or len(call.args) != 2:
            return new
        scales = [_dequantized_step(arg) for arg in call.args]
        if None in scales:
            return new
        step = int32_add_step(scales)
        if step is None:
            return new
        self.count += 1
        return relay.add(int32_pair(new.args[0], step), int32_pair(new.args[1], step))


# Ops that move dimensions without changing values, whose handler must move the quantization axis.
_LAYOUT_OPS = ("reshape", "transpose", "squeeze", "expand_dims")
_HANDLER = "FTVMFakeQuantizationToInteger"


@contextlib.contextmanager
def per_channel_layout_handlers() -> Iterator[None]:
    """Within the block, FakeQuantizationToInteger moves a per-channel quantization axis through
    :data:`_LAYOUT_OPS` (see the module doc); per-tensor types pass as before."""
    from tvm.relay.transform import fake_quantization_to_integer as fq2i

    originals = {name: relay.op.get(name).get_attr(_HANDLER) for name in _LAYOUT_OPS}

    def moving_axis(expr: relay.Call, type_map: dict) -> list:
        affine = type_map[expr.args[0]]
        if affine.scale.data.numpy().size <= 1 and affine.zero_point.data.numpy().size <= 1:
            return [expr, affine]
        axis = _moved_axis(expr, int(affine.axis), fq2i.infer_shape)
        if axis is None:
            return [expr, affine]
        return [expr, fq2i.TensorAffineType(affine.scale, affine.zero_point, affine.dtype, axis)]

    for name in _LAYOUT_OPS:
        relay.op.get(name).reset_attr(_HANDLER)
        tvm.ir.register_op_attr(name, _HANDLER, moving_axis)
    try:
        yield
    finally:
        for name, handler in originals.items():
            relay.op.get(name).reset_attr(_HANDLER)
            if handler is not None:
                tvm.ir.register_op_attr(name, _HANDLER, handler)


def _moved_axis(expr: relay.Call, axis: int, infer_shape) -> int | None:
    """Where the dimension at ``axis`` of ``expr``'s input is in its output, None if it is
    split or merged."""
    in_shape = [int(dim) for dim in infer_shape(expr.args[0])]
    axis %= len(in_shape)
    if expr.op.name == "transpose":
        axes = expr.attrs.axes
        order = list(range(len(in_shape)))[::-1] if axes is None else [int(a) % len(in_shape) for a in axes]
        return order.index(axis)
    out_shape = [int(dim) for dim in infer_shape(expr)]
    inner = int(np.prod(in_shape[axis + 1:], dtype=np.int64))
    for position, size in enumerate(out_shape):
        if size == in_shape[axis] and int(np.prod(out_shape[position + 1:], dtype=np.int64)) == inner:
            return position
    return None
