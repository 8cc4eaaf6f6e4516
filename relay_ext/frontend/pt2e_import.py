"""PyTorch 2 quantized programs (torch.export + torchao's PT2E quantization) as Relay modules.

    loaded = from_exported_program("model.pt2")     # a relay_ext.frontend.models.LoadedModel
    loaded = from_exported_program(exported_program)  # a torch.export.ExportedProgram in memory

A PT2E program (``prepare_pt2e`` / ``convert_pt2e``, then ``torch.export.export`` and
``torch.export.save``) is a QDQ graph: float ATen ops (``aten.conv2d``, ``aten.linear``,
``aten.add`` ...) between ``quantized_decomposed.quantize_per_tensor`` /
``dequantize_per_tensor`` / ``dequantize_per_channel`` calls, with int8 weights. TVM 0.19's Relay
has no importer for it (only Relax has one), so :class:`_Converter` translates the graph node by
node: each quantize/dequantize becomes ``qnn.quantize`` / ``qnn.dequantize``, each ATen op the
Relay op that computes the same in float. The same :func:`~relay_ext.frontend.onnx_import.integer_ops`
that makes the ONNX QDQ graphs integer (``FakeQuantizationToInteger``, means and global average
pools rounded to nearest) then turns every ``dequantize -> op -> quantize`` region into QNN ops
(``qnn.conv2d``, ``qnn.dense``, ``qnn.requantize`` ...). A non-global ``aten.avg_pool2d`` is left
to TVM's ``qnn.avg_pool2d``, which truncates: its outputs may be one step below PyTorch's.

Why this converter and not ``torch.onnx.export`` of the program into the ONNX path: measured in
docs/models.md ("PT2E programs"). The converter reads the graph's shapes, constants and quantization
parameters as they are, needs no ONNX exporter (the program's exporter needs onnxscript, which
quantfuse does not install) and leaves no conv or dense layer in float.

The reference runtime is PyTorch running the program itself (``ExportedProgram.module()``: the QDQ
graph in float, as PyTorch defines the quantized model), and ``output_scale`` is the scale of the
``dequantize_per_tensor`` that produces the program's output, or, when the output is float (the
X86InductorQuantizer quantizes the inputs of the last linear layer, not its output), the step an
8-bit min/max observer would give it (:func:`float_output_step`). Input shapes come from the
program.

Two rewrites make the whole graph integer: ``FakeQuantizationToInteger`` runs with ``use_qat``, so
the last linear layer, whose output is float, becomes ``qnn.dense`` and a dequantize; and a
residual ``add`` of a dequantized tensor and a conv's float output (PT2E's conv + add pattern)
gets int32 quantize/dequantize pairs on both operands (:func:`_int32_residual_operands`), so that
the conv becomes ``qnn.conv2d`` too.

An ATen op the converter does not know is a :class:`UnsupportedOperator` (a ValueError: one line,
exit code 2 at the command line) naming the op and the graph node.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import tvm
from tvm import relay

from meta_rules.tvm_errors import tvm_error_message

from .models import DEFAULT_SEED, LoadedModel, _check_layout, _random_input, convert_to_nhwc
from .onnx_import import check_integer_compute, integer_ops, op_counts
from .optional_deps import require_torchao

logger = logging.getLogger(__name__)

PT2E_SUFFIXES = (".pt2",)
REFERENCE_NAME = "PyTorch PT2E int8"
# Ops that only move or reshape data: the dequantize before them still sets the output's step.
_SHAPE_OPS = frozenset({"aten.flatten", "aten.reshape", "aten.view", "aten._unsafe_view", "aten.permute",
                        "aten.squeeze", "aten.unsqueeze", "aten.clone", "aten.contiguous", "aten.dropout"})
_QUANTIZE = ("quantized_decomposed.quantize_per_tensor", "quantized_decomposed.quantize_per_channel")


class UnsupportedOperator(ValueError):
    """The program calls an operator the converter has no translation for."""


class ExportedProgramReference:
    """PyTorch running the exported program (its ``module()``), as the reference of a PT2E model:
    input array -> first output as numpy. ``torch_module`` is what ``bench`` times."""

    name = REFERENCE_NAME

    def __init__(self, module: torch.nn.Module) -> None:
        self.torch_module = module

    def __call__(self, data: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            output = self.torch_module(torch.from_numpy(np.ascontiguousarray(data)))
        if isinstance(output, (tuple, list)):
            output = output[0]
        return output.detach().numpy()


def is_pt2e_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a saved ExportedProgram (by its ``.pt2`` suffix)."""
    return os.fspath(path).lower().endswith(PT2E_SUFFIXES)


def from_exported_program(
    program: Any,
    layout: str = "NCHW",
    seed: int = DEFAULT_SEED,
    name: str | None = None,
) -> LoadedModel:
    """Import a PT2E-quantized ``torch.export`` program with one float32 input for TVM, its ops
    made integer.

    ``program`` is a path to a file written by ``torch.export.save`` or an ``ExportedProgram``.
    The input's shape is the program's (static shapes only). The example input is a random normal
    batch from ``seed``; ``layout="NHWC"`` converts the convs as
    :func:`relay_ext.frontend.models.load` does.

    Raises FileNotFoundError for a missing file,
    :class:`~relay_ext.frontend.optional_deps.MissingDependency` without torchao, and ValueError
    (one line) for a file that is not an exported program, a program that is not quantized, has
    dynamic or more than one input, or calls an op the converter lacks (:class:`UnsupportedOperator`).
    """
    require_torchao()
    _check_layout(layout)
    if isinstance(program, (str, os.PathLike)):
        name = name or os.path.splitext(os.path.basename(os.fspath(program)))[0]
        program = load_program(program)
    elif not isinstance(program, torch.export.ExportedProgram):
        raise ValueError(f"expected a torch.export.ExportedProgram or a .pt2 path, got {type(program).__name__}")
    name = name or "exported_program"
    mod, input_name, input_shape, scale = to_relay(program, name)
    # use_qat: PT2E leaves the output of the last linear layer float (no quantize after it).
    mod = integer_ops(mod, use_qat=True)
    check_integer_compute(mod, name)
    if layout == "NHWC":
        mod = convert_to_nhwc(mod)
    reference = ExportedProgramReference(program.module())
    example_input = _random_input(input_shape, seed)
    if scale is None:
        scale = float_output_step(reference(example_input))
    logger.info("imported %s (PT2E): input %s %s, output scale %s, layout %s",
                name, input_name, input_shape, scale, layout)
    return LoadedModel(
        name=name,
        torchscript=None,
        mod=mod,
        params={},
        input_name=input_name,
        input_shape=input_shape,
        example_input=example_input,
        output_scale=scale,
        layout=layout,
        quantized=True,
        reference=reference,
        reference_name=REFERENCE_NAME,
    )


def float_output_step(output: np.ndarray) -> float:
    """The step of a program whose output is float (X86InductorQuantizer quantizes the last linear
    layer's inputs, not its output): the scale an 8-bit min/max observer would give the output,
    ``(max - min) / 255`` of PyTorch's output on the example input. Steps of TVM's distance from
    PyTorch are counted in it, as for a dequantized output."""
    output = np.asarray(output, dtype=np.float64)
    spread = float(output.max() - output.min()) if output.size else 0.0
    return spread / 255 if spread > 0 else 1.0


def load_program(path: str | os.PathLike) -> Any:
    """``torch.export.load(path)``, with a missing or foreign file as one-line errors."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"PT2E model file not found: {path}")
    # torch.export.load logs the traceback of a failed first attempt (a warning) before its
    # fallback; the error below says what the user needs in one line.
    export_logger = logging.getLogger("torch.export")
    level = export_logger.level
    export_logger.setLevel(logging.ERROR)
    try:
        return torch.export.load(path)
    except Exception as error:  # zipfile, pickle, serialization errors
        raise ValueError(
            f"{path} is not a program saved with torch.export.save: {tvm_error_message(error, limit=300)}"
        ) from error
    finally:
        export_logger.setLevel(level)


# --- the graph to Relay --------------------------------------------------------------------------


def op_name(target: Any) -> str:
    """``aten.conv2d`` for ``torch.ops.aten.conv2d.default``; ``operator.getitem`` for Python's."""
    if isinstance(target, torch._ops.OpOverload):  # pylint: disable=protected-access
        return f"{target.namespace}.{target._opname}"  # pylint: disable=protected-access
    return f"{getattr(target, '__module__', '') or ''}.{getattr(target, '__name__', str(target))}".lstrip(".")


def to_relay(program: Any, name: str) -> tuple[tvm.IRModule, str, tuple[int, ...], float | None]:
    """The program as a Relay module with qnn.quantize/qnn.dequantize and float ops (not yet
    integer), its input's name and shape, and the output's quantization scale (None when the
    output is not dequantized)."""
    converter = _Converter(program, name)
    if not any(node.op == "call_function" and op_name(node.target) in _QUANTIZE
               for node in converter.graph_module.graph.nodes):
        raise ValueError(
            f"{name} is a float program (no quantized_decomposed.quantize_per_tensor calls): quantize it "
            "first with torchao's prepare_pt2e / convert_pt2e, then torch.export it (docs/models.md)"
        )
    body = converter.convert()
    func = relay.Function([converter.input_var], body)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(func))
    return mod, converter.input_name, converter.input_shape, converter.output_scale


class _Converter:
    """One pass over the program's graph in order, a Relay expression (or a Python value) per node."""

    def __init__(self, program: Any, name: str) -> None:
        self.program = program
        self.name = name
        self.graph_module = program.graph_module
        self.values: dict[Any, Any] = {}
        self.constants = self._lifted_constants()
        user_inputs = [spec.arg.name for spec in program.graph_signature.input_specs
                       if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT]
        if len(user_inputs) != 1:
            raise ValueError(f"{name}: the program must take exactly one input tensor, it takes {len(user_inputs)}")
        self.input_name = user_inputs[0]
        self.input_shape: tuple[int, ...] = ()
        self.input_var: relay.Var | None = None
        self.output_scale: float | None = None

    def _lifted_constants(self) -> dict[str, torch.Tensor]:
        """Placeholder name -> tensor for the parameters, buffers and constants lifted into inputs."""
        signature = self.program.graph_signature
        kinds = torch.export.graph_signature.InputKind
        found = {}
        for spec in signature.input_specs:
            if spec.kind in (kinds.PARAMETER, kinds.BUFFER, kinds.CONSTANT_TENSOR):
                tensor = self.program.state_dict.get(spec.target)
                if tensor is None:
                    tensor = self.program.constants.get(spec.target)
                if tensor is None:
                    raise ValueError(f"{self.name}: the program has no value for {spec.target!r}")
                found[spec.arg.name] = tensor.detach()
        return found

    def convert(self) -> relay.Expr:
        output = None
        for node in self.graph_module.graph.nodes:
            if node.op == "placeholder":
                self.values[node] = self._placeholder(node)
            elif node.op == "get_attr":
                self.values[node] = self._tensor_value(getattr(self.graph_module, node.target))
            elif node.op == "call_function":
                self.values[node] = self._call(node)
            elif node.op == "output":
                output = self._output(node)
            else:
                raise UnsupportedOperator(f"{self.name}: graph node {node.name!r} is a {node.op}, which quantfuse cannot convert")
        if output is None:
            raise ValueError(f"{self.name}: the program has no output")
        return output

    # --- nodes ---

    def _placeholder(self, node: Any) -> Any:
        if node.name in self.constants:
            return self._tensor_value(self.constants[node.name])
        value = node.meta.get("val")
        if value is None or not isinstance(value, torch.Tensor):
            raise ValueError(f"{self.name}: input {node.name!r} is not a tensor")
        if value.dtype != torch.float32:
            raise ValueError(f"{self.name}: input {node.name!r} is {value.dtype}; only a float32 input is supported")
        try:
            shape = tuple(int(dim) for dim in value.shape)
        except TypeError:
            raise ValueError(f"{self.name}: input {node.name!r} has dynamic dimensions ({tuple(value.shape)}); "
                             "export the program with static shapes") from None
        self.input_shape = shape
        self.input_var = relay.var(node.name, shape=shape, dtype="float32")
        return self.input_var

    def _tensor_value(self, tensor: Any) -> Any:
        if isinstance(tensor, torch.Tensor):
            return _Constant(tensor.detach().cpu().numpy())
        return tensor

    def _output(self, node: Any) -> relay.Expr:
        outputs = node.args[0]
        first = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
        if isinstance(outputs, (tuple, list)) and len(outputs) != 1:
            logger.warning("%s: the program has %d outputs; quantfuse uses the first", self.name, len(outputs))
        self.output_scale = self._output_dequantize_scale(first)
        return self._expr(self.values[first])

    def _output_dequantize_scale(self, node: Any) -> float | None:
        while node.op == "call_function" and op_name(node.target) in _SHAPE_OPS:
            node = node.args[0]
        if node.op != "call_function" or op_name(node.target) != "quantized_decomposed.dequantize_per_tensor":
            return None
        scale = self._arg(node, 1)
        scale = scale.array if isinstance(scale, _Constant) else np.asarray(scale)
        return float(scale.reshape(())) if scale.size == 1 else None

    def _call(self, node: Any) -> Any:
        name = op_name(node.target)
        convert = _CONVERTERS.get(name)
        if convert is None:
            raise UnsupportedOperator(
                f"{self.name}: operator {name} (graph node {node.name!r}) is not supported by quantfuse's "
                f"PT2E import; supported: {', '.join(sorted(_CONVERTERS))}"
            )
        try:
            return convert(self, node)
        except UnsupportedOperator:
            raise
        except Exception as error:
            raise UnsupportedOperator(
                f"{self.name}: could not convert {name} (graph node {node.name!r}): {tvm_error_message(error, limit=300)}"
            ) from error

    # --- arguments ---

    def _arg(self, node: Any, index: int, keyword: str | None = None, default: Any = None) -> Any:
        if index < len(node.args):
            value = node.args[index]
        elif keyword is not None and keyword in node.kwargs:
            value = node.kwargs[keyword]
        else:
            return default
        return self._value(value)

    def _value(self, value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            return self.values[value]
        if isinstance(value, (list, tuple)):
            return type(value)(self._value(item) for item in value)
        return value

    def _expr(self, value: Any, dtype: str = "float32") -> relay.Expr:
        if isinstance(value, relay.Expr):
            return value
        if isinstance(value, _Constant):
            return relay.const(value.array)
        if isinstance(value, (int, float, bool)):
            return relay.const(value, dtype)
        raise ValueError(f"expected a tensor, got {value!r}")

    def _input(self, node: Any, index: int = 0) -> relay.Expr:
        return self._expr(self._arg(node, index))

    @staticmethod
    def _shape(node: Any) -> tuple[int, ...]:
        return tuple(int(dim) for dim in node.meta["val"].shape)


class _Constant:
    """A tensor of the program (weight, bias, quantization scale) as numpy, until an op uses it."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


def _pair(value: Any, length: int = 2) -> tuple[int, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value) * (length if len(value) == 1 else 1)
    return (int(value),) * length


def _dtype(torch_dtype: torch.dtype) -> str:
    return {torch.uint8: "uint8", torch.int8: "int8", torch.int32: "int32"}[torch_dtype]


def _quantize(converter: _Converter, node: Any) -> relay.Expr:
    per_channel = op_name(node.target).endswith("per_channel")
    data = converter._input(node)
    scale, zero_point = converter._arg(node, 1), converter._arg(node, 2)
    axis = int(converter._arg(node, 3)) if per_channel else -1
    quant_min, quant_max, dtype = (converter._arg(node, i) for i in ((4, 5, 6) if per_channel else (3, 4, 5)))
    out_dtype = _dtype(dtype)
    quantized = relay.qnn.op.quantize(data, _float_const(scale), _int_const(zero_point), axis=axis,
                                      out_dtype=out_dtype)
    info = np.iinfo(out_dtype)
    if (quant_min, quant_max) != (info.min, info.max):
        quantized = relay.clip(quantized, quant_min, quant_max)
    return quantized


def _dequantize(converter: _Converter, node: Any) -> relay.Expr:
    per_channel = op_name(node.target).endswith("per_channel")
    data = converter._arg(node, 0)
    scale, zero_point = converter._arg(node, 1), converter._arg(node, 2)
    axis = int(converter._arg(node, 3)) if per_channel else -1
    if isinstance(data, _Constant):  # an int8 weight
        data = relay.const(data.array)
    return relay.qnn.op.dequantize(data, _float_const(scale), _int_const(zero_point), axis=axis)


def _float_const(value: Any) -> relay.Constant:
    array = value.array if isinstance(value, _Constant) else np.asarray(value)
    return relay.const(array.astype("float32").reshape(-1) if array.size > 1 else array.astype("float32").reshape(()))


def _int_const(value: Any) -> relay.Constant:
    """A zero point as an int32 constant; per-channel zero points that are all equal (PT2E's
    symmetric weights: all 0) as one scalar, so that QNN's lowering sees the zero point and drops
    the correction terms a nonzero weight zero point needs (input sums per output channel)."""
    array = value.array if isinstance(value, _Constant) else np.asarray(value if value is not None else 0)
    array = array.astype("int32").reshape(-1)
    if array.size == 1 or np.all(array == array[0]):
        return relay.const(array[0])
    return relay.const(array)


def _conv2d(converter: _Converter, node: Any) -> relay.Expr:
    data, weight = converter._input(node, 0), converter._input(node, 1)
    bias = converter._arg(node, 2, "bias")
    weight_shape = tuple(int(d) for d in node.args[1].meta["val"].shape)
    if len(weight_shape) != 4:
        raise UnsupportedOperator(f"only 2-D convolutions are supported, weight shape {weight_shape}")
    padding = converter._arg(node, 4, "padding", [0])
    if isinstance(padding, str):
        raise UnsupportedOperator(f"padding={padding!r} (give the padding as numbers)")
    out = relay.nn.conv2d(
        data, weight,
        strides=_pair(converter._arg(node, 3, "stride", [1])),
        padding=_pair(padding),
        dilation=_pair(converter._arg(node, 5, "dilation", [1])),
        groups=int(converter._arg(node, 6, "groups", 1)),
        channels=weight_shape[0],
        kernel_size=weight_shape[2:],
    )
    return out if bias is None else relay.nn.bias_add(out, converter._expr(bias), axis=1)


def _linear(converter: _Converter, node: Any) -> relay.Expr:
    data, weight = converter._input(node, 0), converter._input(node, 1)
    bias = converter._arg(node, 2, "bias")
    in_shape = tuple(int(d) for d in node.args[0].meta["val"].shape)
    units = int(node.args[1].meta["val"].shape[0])
    if len(in_shape) != 2:
        data = relay.reshape(data, (-1, in_shape[-1]))
    out = relay.nn.dense(data, weight, units=units)
    if bias is not None:
        out = relay.nn.bias_add(out, converter._expr(bias), axis=-1)
    if len(in_shape) != 2:
        out = relay.reshape(out, converter._shape(node))
    return out


def _binary(op: Callable[[relay.Expr, relay.Expr], relay.Expr]) -> Callable[[_Converter, Any], relay.Expr]:
    def convert(converter: _Converter, node: Any) -> relay.Expr:
        alpha = node.kwargs.get("alpha", 1)
        left, right = converter._input(node, 0), converter._input(node, 1)
        if alpha != 1:
            right = relay.multiply(right, relay.const(float(alpha)))
        if op is relay.add and alpha == 1:
            left, right = _int32_residual_operands(node, left, right)
        return op(left, right)

    return convert


# The int32 step of a residual add, as a fraction of its quantized operand's step (see below).
RESIDUAL_STEP_FRACTION = 1.0 / 256


def _int32_residual_operands(node: Any, left: relay.Expr, right: relay.Expr) -> tuple[relay.Expr, relay.Expr]:
    """X86InductorQuantizer leaves a conv's output float when it feeds a residual add (PT2E fuses
    conv + add in one int8 kernel): ``add(dequantize(a), conv(...)) -> quantize``. For
    FakeQuantizationToInteger both operands of the add must be quantized alike, so both get an
    int32 quantize/dequantize pair at a step 256 times finer than ``a``'s, zero point 0: the conv
    becomes ``qnn.conv2d`` requantized to that int32 step, ``a`` is only shifted, and the add is
    integer. The conv's output is rounded to 1/256 of ``a``'s step, far below the add's own output
    step, where PyTorch adds in float."""
    args = node.args[:2]
    quantized = [_dequantized_scale(arg) for arg in args]
    if (quantized[0] is None) == (quantized[1] is None):
        return left, right  # both quantized (an integer add as it is) or neither
    step = relay.const(np.float32((quantized[0] or quantized[1]) * RESIDUAL_STEP_FRACTION))
    zero = relay.const(np.int32(0))

    def fake_int32(expr: relay.Expr) -> relay.Expr:
        return relay.qnn.op.dequantize(relay.qnn.op.quantize(expr, step, zero, out_dtype="int32"), step, zero)

    return fake_int32(left), fake_int32(right)


def _dequantized_scale(arg: Any) -> float | None:
    """The step of ``arg`` when it is a per-tensor dequantize's output, else None."""
    if not isinstance(arg, torch.fx.Node) or arg.op != "call_function":
        return None
    if op_name(arg.target) != "quantized_decomposed.dequantize_per_tensor":
        return None
    scale = arg.args[1]
    if isinstance(scale, (int, float)):
        return float(scale)
    return None


def _unary(op: Callable[[relay.Expr], relay.Expr]) -> Callable[[_Converter, Any], relay.Expr]:
    return lambda converter, node: op(converter._input(node, 0))


def _hardsigmoid(x: relay.Expr) -> relay.Expr:
    return relay.divide(relay.clip(relay.add(x, relay.const(3.0)), 0.0, 6.0), relay.const(6.0))


def _hardtanh(converter: _Converter, node: Any) -> relay.Expr:
    return relay.clip(converter._input(node), float(converter._arg(node, 1, "min_val", -1.0)),
                      float(converter._arg(node, 2, "max_val", 1.0)))


def _max_pool2d(converter: _Converter, node: Any) -> relay.Expr:
    kernel = _pair(converter._arg(node, 1))
    stride = converter._arg(node, 2, "stride", []) or kernel
    return relay.nn.max_pool2d(converter._input(node), pool_size=kernel, strides=_pair(stride),
                               padding=_pair(converter._arg(node, 3, "padding", 0)),
                               dilation=_pair(converter._arg(node, 4, "dilation", 1)),
                               ceil_mode=bool(converter._arg(node, 5, "ceil_mode", False)))


def _avg_pool2d(converter: _Converter, node: Any) -> relay.Expr:
    kernel = _pair(converter._arg(node, 1))
    stride = converter._arg(node, 2, "stride", []) or kernel
    if converter._arg(node, 6, "divisor_override") is not None:
        raise UnsupportedOperator("avg_pool2d with divisor_override")
    return relay.nn.avg_pool2d(converter._input(node), pool_size=kernel, strides=_pair(stride),
                               padding=_pair(converter._arg(node, 3, "padding", 0)),
                               ceil_mode=bool(converter._arg(node, 4, "ceil_mode", False)),
                               count_include_pad=bool(converter._arg(node, 5, "count_include_pad", True)))


def _adaptive_avg_pool2d(converter: _Converter, node: Any) -> relay.Expr:
    size = _pair(converter._arg(node, 1))
    if size == (1, 1):
        return relay.nn.global_avg_pool2d(converter._input(node))
    return relay.nn.adaptive_avg_pool2d(converter._input(node), output_size=size)


def _mean(converter: _Converter, node: Any) -> relay.Expr:
    dims = converter._arg(node, 1, "dim")
    axis = None if dims is None else [int(d) for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
    return relay.mean(converter._input(node), axis=axis, keepdims=bool(converter._arg(node, 2, "keepdim", False)))


def _cat(converter: _Converter, node: Any) -> relay.Expr:
    tensors = [converter._expr(value) for value in converter._arg(node, 0)]
    return relay.concatenate(tensors, axis=int(converter._arg(node, 1, "dim", 0)))


def _reshape(converter: _Converter, node: Any) -> relay.Expr:
    return relay.reshape(converter._input(node), converter._shape(node))


def _permute(converter: _Converter, node: Any) -> relay.Expr:
    return relay.transpose(converter._input(node), [int(d) for d in converter._arg(node, 1, "dims")])


def _identity(converter: _Converter, node: Any) -> Any:
    return converter._arg(node, 0)


def _no_value(converter: _Converter, node: Any) -> None:  # metadata asserts return nothing
    return None


def _getitem(converter: _Converter, node: Any) -> Any:
    return converter._arg(node, 0)[int(node.args[1])]


_CONVERTERS: dict[str, Callable[[_Converter, Any], Any]] = {
    "quantized_decomposed.quantize_per_tensor": _quantize,
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
    "aten.sigmoid": _unary(relay.sigmoid),
    "aten.hardsigmoid": _unary(_hardsigmoid),
    "aten.hardswish": _unary(lambda x: relay.multiply(x, _hardsigmoid(x))),
    "aten.hardswish_": _unary(lambda x: relay.multiply(x, _hardsigmoid(x))),
    "aten.silu": _unary(lambda x: relay.multiply(x, relay.sigmoid(x))),
    "aten.silu_": _unary(lambda x: relay.multiply(x, relay.sigmoid(x))),
    "aten.max_pool2d": _max_pool2d,
    "aten.avg_pool2d": _avg_pool2d,
    "aten.adaptive_avg_pool2d": _adaptive_avg_pool2d,
    "aten.mean": _mean,
    "aten.cat": _cat,
    "aten.flatten": _reshape,
    "aten.reshape": _reshape,
    "aten.view": _reshape,
    "aten._unsafe_view": _reshape,
    "aten.squeeze": _reshape,
    "aten.unsqueeze": _reshape,
    "aten.permute": _permute,
    "aten.clone": _identity,
    "aten.contiguous": _identity,
    "aten.dropout": _identity,
    "aten.alias": _identity,
    "aten.detach": _identity,
    "aten._assert_tensor_metadata": _no_value,
    "_operator.getitem": _getitem,
}

__all__ = ["ExportedProgramReference", "op_counts", "UnsupportedOperator", "from_exported_program", "is_pt2e_file",
           "load_program", "op_name", "to_relay", "PT2E_SUFFIXES", "REFERENCE_NAME"]
