"""Quantized ONNX models (QDQ or QOperator, as ONNX Runtime's ``quantize_static`` writes them) as
Relay modules.

    loaded = from_onnx("model.onnx")                       # a relay_ext.frontend.models.LoadedModel
    loaded = from_onnx("model.onnx", input_shape=(1, 3, 224, 224))  # for a dynamic input

TVM 0.19's ONNX frontend turns each ``QuantizeLinear`` / ``DequantizeLinear`` into
``qnn.quantize`` / ``qnn.dequantize`` but leaves the op between them in float32: a QDQ conv
arrives as ``dequantize -> nn.conv2d -> quantize``, which would be tuned and run as a float conv.
:func:`~relay_ext.frontend.qnn_passes.integer_ops` rewrites those regions into QNN ops
(``qnn.conv2d``, ``qnn.dense``, ``qnn.add``, ...) with TVM's ``FakeQuantizationToInteger`` pass,
then rounds integer means and global average pools (what ResNet and MobileNetV2 use) to nearest as
ONNX Runtime does (:class:`~relay_ext.frontend.qnn_passes.RoundIntegerMean`). A non-global ``AveragePool`` is left to TVM's ``qnn.avg_pool2d``,
which truncates: its outputs may be one step below ONNX Runtime's. The result is checked: a
quantized model whose convs and dense layers all stayed float is refused, and a partly float one is
logged.

The reference runtime is ONNX Runtime on the CPU running the QDQ graph as written
(:class:`~relay_ext.frontend.onnx_reference.OnnxRuntimeReference`; its int8 kernels can saturate on
CPUs without VNNI, see that module), and ``output_scale`` the scale of the ``DequantizeLinear``
that produces the model's output, so :func:`relay_ext.report.accuracy.step_error` counts TVM's
distance from the model in output steps.

A QOperator file (``QLinearConv``, ``QLinearAdd``, ``QGemm``, ...) is first rewritten as the
equivalent QDQ graph (:func:`~relay_ext.frontend.onnx_qoperator.to_qdq`), which the steps above
import like ONNX Runtime's QDQ export of the same network; its reference runs that QDQ graph as
written, and the peers of bench run the file as given.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from tvm import relay

from meta_rules.base.tvm_errors import tvm_error_message

from relay_ext.frontend.models import DEFAULT_SEED, LoadedModel, check_layout, convert_to_nhwc, random_input
from relay_ext.frontend.onnx_qoperator import QOPERATOR_OPS, qoperator_ops, to_qdq
from relay_ext.frontend.onnx_reference import OnnxRuntimeReference
# integer_ops, check_integer_compute: the QNN passes shared with the PT2E import; op_counts and
# FLOAT_COMPUTE_OPS are importable from here too.
from relay_ext.frontend.qnn_passes import FLOAT_COMPUTE_OPS, check_integer_compute, integer_ops, op_counts  # noqa: F401
from relay_ext.frontend.optional_deps import require_onnx, require_onnxruntime

logger = logging.getLogger(__name__)

# Nodes that make an ONNX model quantized: QDQ pairs, or ONNX Runtime's QOperator format.
QUANTIZATION_OPS = frozenset(
    {"QuantizeLinear", "DequantizeLinear", "ConvInteger", "MatMulInteger", *QOPERATOR_OPS}
)
# Ops that only move or reshape data: a DequantizeLinear before them still sets the output's step.
_SHAPE_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose"})


def from_onnx(
    path: str | os.PathLike,
    input_shape: Sequence[int] | None = None,
    layout: str = "NCHW",
    seed: int = DEFAULT_SEED,
) -> LoadedModel:
    """Import a quantized ONNX model with one float32 input for TVM, its ops made integer.

    The input's name and shape are read from the model. ``input_shape`` gives the whole shape; it
    is needed when a dimension is dynamic (a named or unknown batch size, say) and must agree with
    the fixed ones. The example input is a random normal batch from ``seed``. ``layout="NHWC"``
    converts the module's convs as :func:`relay_ext.frontend.models.load` does.

    Raises FileNotFoundError for a missing file, :class:`~relay_ext.frontend.optional_deps.MissingDependency`
    when onnx or onnxruntime is missing, and ValueError (one line) for a model that is not ONNX,
    is not quantized, has a dynamic input without ``input_shape``, or that TVM cannot import.
    """
    onnx = require_onnx()
    require_onnxruntime()
    check_layout(layout)
    path = os.fspath(path)
    model = _load(onnx, path)
    if not is_quantized(model):
        raise ValueError(
            f"{path} is a float ONNX model (no QuantizeLinear/DequantizeLinear nodes): quantize it first, e.g. with "
            "onnxruntime.quantization.quantize_static(..., quant_format=QuantFormat.QDQ)"
        )
    input_name, model_shape = model_input(model)
    shape = resolve_input_shape(path, input_name, model_shape, input_shape)
    name = os.path.splitext(os.path.basename(path))[0]
    qoperator = qoperator_ops(model)
    if qoperator:
        model = to_qdq(model)
        logger.info("%s is in QOperator format (%s): imported as its QDQ equivalent", name,
                    ", ".join(f"{count} {op}" for op, count in sorted(qoperator.items())))
    try:
        mod, params = relay.frontend.from_onnx(model, shape={input_name: shape}, dtype="float32", freeze_params=True)
    except Exception as error:  # the frontend raises anything from asserts to TVMError
        raise ValueError(
            f"TVM's ONNX frontend could not import {name!r} with input {input_name} {shape}: {tvm_error_message(error, limit=500)}"
        ) from error
    mod = integer_ops(mod)
    check_integer_compute(mod, name)
    scale = output_dequantize_scale(model)
    if layout == "NHWC":
        mod = convert_to_nhwc(mod)
    reference = OnnxRuntimeReference(path, input_name, graph=model.SerializeToString() if qoperator else None)
    logger.info("imported %s (ONNX): input %s %s, output scale %s, layout %s", name, input_name, shape, scale, layout)
    return LoadedModel(
        name=name,
        torchscript=None,
        mod=mod,
        params=params,
        input_name=input_name,
        input_shape=shape,
        example_input=random_input(shape, seed),
        output_scale=scale,
        layout=layout,
        quantized=True,
        reference=reference,
        reference_name=reference.name,
    )


# --- reading the ONNX model ---------------------------------------------------------------------


def _load(onnx: Any, path: str) -> Any:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"ONNX file not found: {path}")
    try:
        model = onnx.load(path)
        onnx.checker.check_model(model)
    except Exception as error:  # protobuf's DecodeError, onnx's ValidationError, ...
        raise ValueError(f"{path} is not a valid ONNX model: {tvm_error_message(error, limit=500)}") from error
    return model


def is_quantized(model: Any) -> bool:
    """Whether the ONNX graph has quantization nodes (QDQ pairs, QLinear ops or QGemm)."""
    return any(node.op_type in QUANTIZATION_OPS for node in model.graph.node)


def model_input(model: Any) -> tuple[str, tuple[int | None, ...]]:
    """The graph's one real input (initializers are not inputs): its name and shape, None where a
    dimension is dynamic. ValueError unless there is exactly one input and it is float32."""
    onnx = require_onnx()
    initializers = {tensor.name for tensor in model.graph.initializer}
    inputs = [value for value in model.graph.input if value.name not in initializers]
    if len(inputs) != 1:
        raise ValueError(f"the ONNX model must have exactly one input, it has {len(inputs)}: {[v.name for v in inputs]}")
    tensor_type = inputs[0].type.tensor_type
    if tensor_type.elem_type != onnx.TensorProto.FLOAT:
        dtype = onnx.TensorProto.DataType.Name(tensor_type.elem_type)
        raise ValueError(f"the ONNX model's input {inputs[0].name!r} is {dtype}; only a float32 input is supported")
    dims = tuple(dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else None
                 for dim in tensor_type.shape.dim)
    return inputs[0].name, dims


def resolve_input_shape(
    path: str, input_name: str, model_shape: tuple[int | None, ...], input_shape: Sequence[int] | None
) -> tuple[int, ...]:
    """The model's input shape with ``input_shape`` filling its dynamic dimensions (see :func:`from_onnx`)."""
    shown = "x".join("?" if dim is None else str(dim) for dim in model_shape)
    if input_shape is None:
        if any(dim is None for dim in model_shape):
            raise ValueError(
                f"{path}: input {input_name!r} has dynamic dimensions ({shown}); give its shape with "
                f"--input-shape (input_shape=), e.g. {','.join('1' if d is None else str(d) for d in model_shape)}"
            )
        return tuple(int(dim) for dim in model_shape)
    try:
        shape = tuple(int(dim) for dim in input_shape)
    except (TypeError, ValueError):
        raise ValueError(f"input shape must be a sequence of positive integers, got {input_shape!r}") from None
    if any(dim < 1 for dim in shape):
        raise ValueError(f"input shape must be a sequence of positive integers, got {input_shape!r}")
    fits = len(shape) == len(model_shape) and all(m is None or m == d for m, d in zip(model_shape, shape))
    if not fits:
        raise ValueError(
            f"{path}: input shape {'x'.join(map(str, shape))} does not fit input {input_name!r} of shape {shown}"
        )
    return shape


def output_dequantize_scale(model: Any) -> float | None:
    """The scale of the per-tensor ``DequantizeLinear`` that makes the graph's first output
    (through shape-only ops such as Reshape or Flatten), or None when there is none."""
    onnx = require_onnx()
    producers = {output: node for node in model.graph.node for output in node.output}
    constants = {tensor.name: tensor for tensor in model.graph.initializer}
    constants.update({node.output[0]: attr.t for node in model.graph.node if node.op_type == "Constant"
                      for attr in node.attribute if attr.name == "value"})
    node = producers.get(model.graph.output[0].name)
    while node is not None and node.op_type in _SHAPE_OPS:
        node = producers.get(node.input[0])
    if node is None or node.op_type != "DequantizeLinear" or node.input[1] not in constants:
        return None
    scale = onnx.numpy_helper.to_array(constants[node.input[1]])
    return float(scale.reshape(())) if scale.size == 1 else None
