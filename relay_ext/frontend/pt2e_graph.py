"""Walking a PT2E program's graph: one Relay expression (or Python value) per FX node, in order.

:class:`GraphConverter` reads the program's input, its lifted constants (weights, biases,
quantization scales) and each ``call_function`` node's arguments, and hands every node to the
converter of its op (a table ``op name -> converter(graph, node)``, :mod:`.pt2e_ops`). Two kinds of
failure are kept apart:

* :class:`UnsupportedOperator` (a ValueError: one line, exit code 2 at the command line): the
  program calls an op, or an op with arguments, that quantfuse cannot convert -- the user's
  program is beyond what quantfuse takes, and the line names the op and the graph node;
* :class:`ConverterError` (a RuntimeError, not the user's fault): a converter that knows the op
  failed on it -- a bug of quantfuse, said as one (the op and node named, the cause chained).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from tvm import relay

from meta_rules.base.tvm_errors import tvm_error_message

logger = logging.getLogger(__name__)

# Ops that only move or reshape data: the dequantize before them still sets the output's step.
SHAPE_OPS = frozenset({"aten.flatten", "aten.reshape", "aten.view", "aten._unsafe_view", "aten.permute",
                       "aten.transpose", "aten.squeeze", "aten.unsqueeze", "aten.clone", "aten.contiguous",
                       "aten.dropout", "aten.dropout_"})
DEQUANTIZE_PER_TENSOR = "quantized_decomposed.dequantize_per_tensor"
QUANTIZE_PER_TENSOR = "quantized_decomposed.quantize_per_tensor"
_RELAY_DTYPES = {torch.uint8: "uint8", torch.int8: "int8", torch.int32: "int32"}


def relay_dtype(torch_dtype: torch.dtype) -> str:
    """The Relay dtype of a quantize's integer dtype (uint8, int8, int32)."""
    return _RELAY_DTYPES[torch_dtype]


def clipped_quantize(expr: relay.Expr, scale: relay.Expr, zero_point: relay.Expr, dtype: str,
                     quant_min: int | None = None, quant_max: int | None = None,
                     axis: int = -1) -> relay.Expr:
    """``qnn.quantize`` to ``dtype``, clipped to ``quant_min .. quant_max`` where they narrow the
    dtype's range (PT2E's 7-bit ranges, XNNPACK's -127 weights)."""
    quantized = relay.qnn.op.quantize(expr, scale, zero_point, axis=axis, out_dtype=dtype)
    info = np.iinfo(dtype)
    low = info.min if quant_min is None else quant_min
    high = info.max if quant_max is None else quant_max
    if (low, high) != (info.min, info.max):
        quantized = relay.clip(quantized, low, high)
    return quantized


class UnsupportedOperator(ValueError):
    """The program calls an operator (or an operator with arguments) the converter cannot translate."""


class ConverterError(RuntimeError):
    """A converter failed on an op it supports: quantfuse's bug, not the program's."""


def op_name(target: Any) -> str:
    """``aten.conv2d`` for ``torch.ops.aten.conv2d.default``; ``operator.getitem`` for Python's."""
    if isinstance(target, torch._ops.OpOverload):  # pylint: disable=protected-access
        return f"{target.namespace}.{target._opname}"  # pylint: disable=protected-access
    return f"{getattr(target, '__module__', '') or ''}.{getattr(target, '__name__', str(target))}".lstrip(".")


class Constant:
    """A tensor of the program (weight, bias, quantization scale) as numpy, until an op uses it."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


Converter = Callable[["GraphConverter", Any], Any]


class GraphConverter:
    """One pass over the program's graph in order; ``converters`` maps op names to converters."""

    def __init__(self, program: Any, name: str, converters: Mapping[str, Converter]) -> None:
        self.program = program
        self.name = name
        self.converters = converters
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
        """The Relay expression of the program's (first) output."""
        output = None
        for node in self.graph_module.graph.nodes:
            if node.op == "placeholder":
                self.values[node] = self._placeholder(node)
            elif node.op == "get_attr":
                self.values[node] = self.tensor_value(getattr(self.graph_module, node.target))
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
            return self.tensor_value(self.constants[node.name])
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

    @staticmethod
    def tensor_value(tensor: Any) -> Any:
        """A torch tensor as a :class:`Constant`; anything else as it is."""
        if isinstance(tensor, torch.Tensor):
            return Constant(tensor.detach().cpu().numpy())
        return tensor

    def _output(self, node: Any) -> relay.Expr:
        outputs = node.args[0]
        first = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
        if isinstance(outputs, (tuple, list)) and len(outputs) != 1:
            logger.warning("%s: the program has %d outputs; quantfuse uses the first", self.name, len(outputs))
        self.output_scale = self._output_dequantize_scale(first)
        return self.expr(self.values[first])

    def _output_dequantize_scale(self, node: Any) -> float | None:
        while node.op == "call_function" and op_name(node.target) in SHAPE_OPS:
            node = node.args[0]
        if node.op != "call_function" or op_name(node.target) != DEQUANTIZE_PER_TENSOR:
            return None
        scale = self.arg(node, 1)
        scale = scale.array if isinstance(scale, Constant) else np.asarray(scale)
        return float(scale.reshape(())) if scale.size == 1 else None

    def _call(self, node: Any) -> Any:
        name = op_name(node.target)
        convert = self.converters.get(name)
        if convert is None:
            raise UnsupportedOperator(
                f"{self.name}: operator {name} (graph node {node.name!r}) is not supported by quantfuse's "
                f"PT2E import; supported: {', '.join(sorted(self.converters))}"
            )
        try:
            return convert(self, node)
        except UnsupportedOperator as error:
            raise UnsupportedOperator(f"{self.name}: {name} (graph node {node.name!r}): {error}") from None
        except Exception as error:  # a converter of a supported op failed: ours to fix
            raise ConverterError(
                f"{self.name}: quantfuse's PT2E converter failed on {name} (graph node {node.name!r}): "
                f"{type(error).__name__}: {tvm_error_message(error, limit=300)}"
            ) from error

    # --- arguments, for the op converters ---

    def arg(self, node: Any, index: int, keyword: str | None = None, default: Any = None) -> Any:
        """The node's argument ``index`` (or ``keyword``), converted: a Relay expression, a
        :class:`Constant` or a Python value; ``default`` when it is not given."""
        if index < len(node.args):
            value = node.args[index]
        elif keyword is not None and keyword in node.kwargs:
            value = node.kwargs[keyword]
        else:
            return default
        return self.value(value)

    def value(self, value: Any) -> Any:
        """An FX argument (a node, a list of them, a Python value) as converted values."""
        if isinstance(value, torch.fx.Node):
            return self.values[value]
        if isinstance(value, (list, tuple)):
            return type(value)(self.value(item) for item in value)
        return value

    @staticmethod
    def expr(value: Any, dtype: str = "float32") -> relay.Expr:
        """A converted value as a Relay expression (constants and numbers as ``relay.const``)."""
        if isinstance(value, relay.Expr):
            return value
        if isinstance(value, Constant):
            return relay.const(value.array)
        if isinstance(value, (int, float, bool)):
            return relay.const(value, dtype)
        raise TypeError(f"expected a tensor, got {value!r}")

    def input(self, node: Any, index: int = 0) -> relay.Expr:
        """The node's argument ``index`` as a Relay expression."""
        return self.expr(self.arg(node, index))

    @staticmethod
    def shape(node: Any) -> tuple[int, ...]:
        """The static shape of the node's (tensor) value, from the program's metadata."""
        return tuple(int(dim) for dim in node.meta["val"].shape)
