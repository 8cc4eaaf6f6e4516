"""ONNX models quantized in QOperator format, rewritten as the equivalent QDQ graph.

    if is_qoperator(model):
        qdq_model = to_qdq(model)            # an onnx.ModelProto, the input left untouched

ONNX Runtime's ``quantize_static(quant_format=QuantFormat.QOperator)``, and many model zoos, write
each quantized op as one node that takes the quantized tensors with their scales and zero points:
``QLinearConv``, ``QLinearMatMul`` (standard ONNX) and ONNX Runtime's ``com.microsoft`` ops
``QGemm``, ``QLinearAdd``, ``QLinearMul``, ``QLinearGlobalAveragePool``, ``QLinearAveragePool``,
``QLinearSigmoid``, ``QLinearLeakyRelu``, ``QLinearConcat``, ``QLinearSoftmax``. :func:`to_qdq`
replaces each with the QDQ group that means the same::

    QLinearConv(x, xs, xz, w, ws, wz, ys, yz, B)
      -> QuantizeLinear(Conv(DequantizeLinear(x, xs, xz), DequantizeLinear(w, ws, wz, axis=0),
                             DequantizeLinear(B, xs * ws, axis=0)), ys, yz)

so that the QDQ import (:mod:`relay_ext.frontend.onnx_import`) makes integer QNN ops of it, as it
does of ONNX Runtime's QDQ export of the same network. Ops between the quantized ones that
already work on the quantized tensors (``MaxPool``, ``Flatten``, ``Reshape``, ...) stay as they
are, and so do ``QuantizeLinear`` / ``DequantizeLinear`` at the graph's edges.

Each QDQ group computes, by the ONNX specification, the float op of the dequantized inputs
rounded once to the output's step, which is what the QLinear kernels compute in integers
(a conv's or matmul's int32 sum scaled by ``xs * ws / ys``; an average's sum scaled by
``xs / (ys * n)``; a sigmoid's 256-entry table of ``quantize(sigmoid(dequantize(q)))``): the
two agree up to the float rounding of values that land on a half step.

A model whose default-domain opset is below 13 (where ``DequantizeLinear`` has no ``axis``) is
converted to opset 13 with ONNX's version converter first. ``MatMulInteger`` and
``ConvInteger`` (integer outputs, no output quantization) are left to TVM's own converters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from relay_ext.frontend.optional_deps import require_onnx

logger = logging.getLogger(__name__)

MICROSOFT = "com.microsoft"
QDQ_OPSET = 13  # the first with per-axis DequantizeLinear


def is_qoperator(model: Any) -> bool:
    """Whether the ONNX graph has QOperator nodes (``QLinear*``, ``QGemm``) :func:`to_qdq` rewrites."""
    return any(_handler(node) is not None for node in model.graph.node)


def qoperator_ops(model: Any) -> dict[str, int]:
    """How many nodes of each QOperator op type (those :func:`to_qdq` rewrites) the graph has."""
    counts: dict[str, int] = {}
    for node in model.graph.node:
        if _handler(node) is not None:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def to_qdq(model: Any) -> Any:
    """A copy of the QOperator ``model`` with every QOperator node replaced by its QDQ group (see
    the module doc). ValueError (one line) for a quantized ``com.microsoft`` op this rewrite does
    not know, or a model ONNX's version converter cannot bring to opset 13."""
    onnx = require_onnx()
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    graph = rewritten.graph
    unknown = sorted({node.op_type for node in graph.node if node.domain == MICROSOFT
                      and node.op_type.startswith(("QLinear", "QGemm", "QAttention", "QEmbed"))
                      and _handler(node) is None})
    if unknown:
        raise ValueError(f"QOperator op {', '.join(unknown)} ({MICROSOFT}) is not supported; "
                         "quantize the float model in QDQ format instead "
                         "(quantize_static(..., quant_format=QuantFormat.QDQ))")
    rewriter = _Rewriter(graph)
    nodes = []
    for node in graph.node:
        handler = _handler(node)
        if handler is None:
            nodes.append(node)
            continue
        nodes.extend(handler(rewriter, node))
        rewriter.rewritten += 1
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(rewriter.new_initializers)
    if not any(node.domain == MICROSOFT for node in graph.node):
        kept = [entry for entry in rewritten.opset_import if entry.domain != MICROSOFT]
        del rewritten.opset_import[:]
        rewritten.opset_import.extend(kept)
    if default_opset(rewritten) < QDQ_OPSET:
        rewritten = _upgraded(onnx, rewritten)
    logger.info("rewrote %d QOperator nodes as QDQ groups", rewriter.rewritten)
    return rewritten


def default_opset(model: Any) -> int:
    """The model's opset of the default ONNX domain."""
    return next((int(entry.version) for entry in model.opset_import if entry.domain in ("", "ai.onnx")), 1)


def _upgraded(onnx: Any, model: Any) -> Any:
    from onnx import version_converter  # pylint: disable=import-outside-toplevel

    old = default_opset(model)
    try:
        return version_converter.convert_version(model, QDQ_OPSET)
    except Exception as error:  # the converter raises RuntimeError, ValidationError, ...
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        raise ValueError(f"the QOperator model's opset {old} must become {QDQ_OPSET} for per-channel "
                         f"DequantizeLinear, and ONNX's version converter failed: {first}") from error


class _Rewriter:
    """The new nodes' names and constants: every new tensor is named after the node it replaces."""

    def __init__(self, graph: Any) -> None:
        onnx = require_onnx()
        self.helper, self.numpy_helper = onnx.helper, onnx.numpy_helper
        self.constants = {tensor.name: tensor for tensor in graph.initializer}
        self.constants.update({node.output[0]: attr.t for node in graph.node if node.op_type == "Constant"
                               for attr in node.attribute if attr.name == "value"})
        self.new_initializers: list[Any] = []
        self.rewritten = 0
        self._names: set[str] = {name for node in graph.node for name in (*node.input, *node.output)}
        self._names.update(self.constants)

    def name(self, base: str) -> str:
        candidate, index = base, 0
        while candidate in self._names:
            index += 1
            candidate = f"{base}_{index}"
        self._names.add(candidate)
        return candidate

    def array(self, name: str) -> np.ndarray | None:
        tensor = self.constants.get(name)
        return None if tensor is None else self.numpy_helper.to_array(tensor)

    def constant(self, name: str, value: np.ndarray) -> str:
        """A new initializer ``name`` holding ``value``."""
        tensor = self.numpy_helper.from_array(value, name)
        self.new_initializers.append(tensor)
        self.constants[name] = tensor
        return name

    def node(self, op_type: str, inputs: list[str], outputs: list[str], name: str, **attrs: Any) -> Any:
        return self.helper.make_node(op_type, inputs, outputs, name=self.name(name), **attrs)

    def dequantize(self, source: Any, value: str, scale: str, zero_point: str | None,
                   nodes: list[Any], axis: int = 0) -> str:
        """DequantizeLinear of ``value``; per-axis along ``axis`` (0: a conv's output channels,
        as QLinearConv quantizes weights and biases) when its scale has more than one element."""
        output = self.name(f"{value}_dequantized")
        scale_value = self.array(scale)
        attrs = {"axis": axis} if scale_value is not None and scale_value.size > 1 else {}
        inputs = [value, scale] + ([zero_point] if zero_point else [])
        nodes.append(self.node("DequantizeLinear", inputs, [output], f"{source.name or source.op_type}_dq_{value}",
                               **attrs))
        return output

    def quantize(self, source: Any, value: str, scale: str, zero_point: str, output: str,
                 nodes: list[Any]) -> None:
        nodes.append(self.node("QuantizeLinear", [value, scale, zero_point], [output],
                               f"{source.name or source.op_type}_q"))

    def product_scale(self, source: Any, first: str, second: str, factor: float, nodes: list[Any]) -> str:
        """A tensor holding ``first * second * factor`` (a bias's scale): a new initializer when
        both are constants, else Mul nodes."""
        a, b = self.array(first), self.array(second)
        name = self.name(f"{source.name or source.op_type}_bias_scale")
        if a is not None and b is not None:
            value = (a.astype(np.float32) * b.astype(np.float32) * np.float32(factor)).astype(np.float32)
            return self.constant(name, value.reshape(-1) if value.size > 1 else value.reshape(()))
        nodes.append(self.node("Mul", [first, second], [name if factor == 1.0 else name + "_ab"],
                               f"{name}_mul"))
        if factor != 1.0:
            factor_name = self.name(f"{name}_factor")
            self.constant(factor_name, np.array(factor, np.float32))
            nodes.append(self.node("Mul", [name + "_ab", factor_name], [name], f"{name}_mul_factor"))
        return name


def _attributes(helper: Any, node: Any, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    return {attr.name: helper.get_attribute_value(attr) for attr in node.attribute if attr.name not in drop}


def _optional(node: Any, index: int) -> str | None:
    return node.input[index] if len(node.input) > index and node.input[index] else None


def _conv(rw: _Rewriter, node: Any) -> list[Any]:
    x, xs, xz, w, ws, wz, ys, yz = node.input[:8]
    nodes: list[Any] = []
    inputs = [rw.dequantize(node, x, xs, xz, nodes), rw.dequantize(node, w, ws, wz, nodes)]
    bias = _optional(node, 8)
    if bias is not None:
        inputs.append(_dequantize_bias(rw, node, bias, rw.product_scale(node, xs, ws, 1.0, nodes), nodes))
    result = rw.name(f"{node.output[0]}_float")
    nodes.append(rw.node("Conv", inputs, [result], f"{node.name or 'conv'}_float",
                         **_attributes(rw.helper, node)))
    rw.quantize(node, result, ys, yz, node.output[0], nodes)
    return nodes


def _dequantize_bias(rw: _Rewriter, node: Any, bias: str, scale: str, nodes: list[Any]) -> str:
    """DequantizeLinear of an int32 bias at ``scale``, with zero points of zeros (TVM's
    DequantizeLinear converter needs the zero point input)."""
    scale_value = rw.array(scale)
    shape = scale_value.shape if scale_value is not None else ()
    zero_point = rw.constant(rw.name(f"{bias}_zero_point"), np.zeros(shape, np.int32))
    return rw.dequantize(node, bias, scale, zero_point, nodes)


def _gemm(rw: _Rewriter, node: Any) -> list[Any]:
    a, a_s, a_z, b, b_s, b_z = node.input[:6]
    attrs = _attributes(rw.helper, node)
    nodes: list[Any] = []
    # B is quantized per output column: its axis 0 when transposed ([N, K]), else 1 ([K, N])
    b_axis = 0 if int(attrs.get("transB", 0)) else 1
    inputs = [rw.dequantize(node, a, a_s, a_z, nodes), rw.dequantize(node, b, b_s, b_z, nodes, b_axis)]
    bias = _optional(node, 6)
    if bias is not None:  # QGemm's bias is int32 at alpha * A's scale * B's scale
        scale = rw.product_scale(node, a_s, b_s, float(attrs.get("alpha", 1.0)), nodes)
        inputs.append(_dequantize_bias(rw, node, bias, scale, nodes))
    y_scale, y_zero_point = _optional(node, 7), _optional(node, 8)
    if y_scale is None:  # a float output
        nodes.append(rw.node("Gemm", inputs, [node.output[0]], f"{node.name or 'gemm'}_float", **attrs))
        return nodes
    result = rw.name(f"{node.output[0]}_float")
    nodes.append(rw.node("Gemm", inputs, [result], f"{node.name or 'gemm'}_float", **attrs))
    zero_point = y_zero_point or _zero_point_like(rw, node, a_z, nodes)
    rw.quantize(node, result, y_scale, zero_point, node.output[0], nodes)
    return nodes


def _zero_point_like(rw: _Rewriter, node: Any, model_zero_point: str, nodes: list[Any]) -> str:
    """A zero zero point of ``model_zero_point``'s type (QGemm's output zero point may be left out)."""
    value = rw.array(model_zero_point)
    dtype = value.dtype if value is not None else np.uint8
    name = rw.name(f"{node.name or node.op_type}_zero_point")
    return rw.constant(name, np.zeros((), dtype))


def _matmul(rw: _Rewriter, node: Any) -> list[Any]:
    a, a_s, a_z, b, b_s, b_z, ys, yz = node.input[:8]
    nodes: list[Any] = []
    data = rw.array(b)  # B is quantized per column (its last axis) when its scale is a vector
    b_axis = data.ndim - 1 if data is not None else 1
    inputs = [rw.dequantize(node, a, a_s, a_z, nodes), rw.dequantize(node, b, b_s, b_z, nodes, b_axis)]
    result = rw.name(f"{node.output[0]}_float")
    nodes.append(rw.node("MatMul", inputs, [result], f"{node.name or 'matmul'}_float"))
    rw.quantize(node, result, ys, yz, node.output[0], nodes)
    return nodes


def _elementwise(op_type: str) -> Callable[[_Rewriter, Any], list[Any]]:
    """QLinearAdd / QLinearMul (A, As, Az, B, Bs, Bz, Cs, Cz)."""

    def rewrite(rw: _Rewriter, node: Any) -> list[Any]:
        a, a_s, a_z, b, b_s, b_z, c_s = node.input[:7]
        nodes: list[Any] = []
        inputs = [rw.dequantize(node, a, a_s, a_z or None, nodes), rw.dequantize(node, b, b_s, b_z or None, nodes)]
        result = rw.name(f"{node.output[0]}_float")
        nodes.append(rw.node(op_type, inputs, [result], f"{node.name or op_type}_float"))
        c_z = _optional(node, 7) or _zero_point_like(rw, node, a_z, nodes)
        rw.quantize(node, result, c_s, c_z, node.output[0], nodes)
        return nodes

    return rewrite


def _unary(op_type: str, channels_last: bool = False, drop: tuple[str, ...] = ()
           ) -> Callable[[_Rewriter, Any], list[Any]]:
    """QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearAveragePool,
    QLinearSoftmax: (X, xs, xz, ys, yz) and the float op's own attributes."""

    def rewrite(rw: _Rewriter, node: Any) -> list[Any]:
        x, xs, xz, ys = node.input[:4]
        attrs = _attributes(rw.helper, node, drop=("channels_last", *drop))
        nodes: list[Any] = []
        value = rw.dequantize(node, x, xs, xz or None, nodes)
        last = channels_last and bool(next((rw.helper.get_attribute_value(a) for a in node.attribute
                                            if a.name == "channels_last"), 0))
        if last:  # the float ops are channels-first: NHWC -> NCHW and back
            value = _transpose(rw, node, value, [0, 3, 1, 2], nodes)
        result = rw.name(f"{node.output[0]}_float")
        nodes.append(rw.node(op_type, [value], [result], f"{node.name or op_type}_float", **attrs))
        if last:
            result = _transpose(rw, node, result, [0, 2, 3, 1], nodes)
        rw.quantize(node, result, ys, _optional(node, 4) or _zero_point_like(rw, node, xz, nodes),
                    node.output[0], nodes)
        return nodes

    return rewrite


def _transpose(rw: _Rewriter, node: Any, value: str, perm: list[int], nodes: list[Any]) -> str:
    output = rw.name(f"{value}_transposed")
    nodes.append(rw.node("Transpose", [value], [output], f"{node.name or node.op_type}_transpose", perm=perm))
    return output


def _softmax(rw: _Rewriter, node: Any) -> list[Any]:
    attrs = _attributes(rw.helper, node)
    if int(attrs.get("axis", -1)) != -1:
        raise ValueError(f"QLinearSoftmax {node.name!r}: only axis=-1 is supported (its axis is "
                         f"{attrs['axis']}); quantize the float model in QDQ format instead")
    return _unary("Softmax", drop=("opset", "axis"))(rw, node)


def _concat(rw: _Rewriter, node: Any) -> list[Any]:
    """QLinearConcat(Y_scale, Y_zero_point, X1, X1_scale, X1_zero_point, ...)."""
    ys, yz = node.input[:2]
    nodes: list[Any] = []
    rest = list(node.input[2:])
    inputs = [rw.dequantize(node, rest[i], rest[i + 1], rest[i + 2] or None, nodes) for i in range(0, len(rest), 3)]
    result = rw.name(f"{node.output[0]}_float")
    nodes.append(rw.node("Concat", inputs, [result], f"{node.name or 'concat'}_float",
                         **_attributes(rw.helper, node)))
    rw.quantize(node, result, ys, yz, node.output[0], nodes)
    return nodes


_STANDARD = {"QLinearConv": _conv, "QLinearMatMul": _matmul}
_MICROSOFT = {
    "QGemm": _gemm,
    "QLinearAdd": _elementwise("Add"),
    "QLinearMul": _elementwise("Mul"),
    "QLinearGlobalAveragePool": _unary("GlobalAveragePool", channels_last=True),
    "QLinearAveragePool": _unary("AveragePool", channels_last=True),
    "QLinearSigmoid": _unary("Sigmoid"),
    "QLinearLeakyRelu": _unary("LeakyRelu"),
    "QLinearSoftmax": _softmax,
    "QLinearConcat": _concat,
}
_HANDLERS = {(domain, name): rewrite for domain in ("", "ai.onnx") for name, rewrite in _STANDARD.items()}
_HANDLERS.update({(MICROSOFT, name): rewrite for name, rewrite in _MICROSOFT.items()})
QOPERATOR_OPS = frozenset(name for _, name in _HANDLERS)


def _handler(node: Any) -> Callable[[_Rewriter, Any], list[Any]] | None:
    return _HANDLERS.get((node.domain, node.op_type))
