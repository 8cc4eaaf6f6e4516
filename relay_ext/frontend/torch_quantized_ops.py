"""Quantized PyTorch ops that TVM 0.19's PyTorch frontend cannot convert, and the import that adds them.

PyTorch's FX graph mode quantization (``prepare_fx`` / ``convert_fx``) fuses a batch norm into the
conv before it only when both are modules in the pattern it knows; elsewhere (a functional conv,
a conv subclass with its own ``forward`` such as efficientnet-pytorch's ``Conv2dStaticSamePadding``,
a batch norm after a pool or an add) it leaves a ``quantized::batch_norm2d``, which TVM 0.19 does
not convert ("The following operators are not implemented: ['quantized::batch_norm2d']").

:func:`from_pytorch` is TVM's ``relay.frontend.from_pytorch`` with converters for those ops
(:data:`CUSTOM_CONVERT_MAP`, passed as its ``custom_convert_map``). Two things the frontend does
not offer a hook for are added while it runs (:func:`quantized_op_hooks`):

* TVM learns the quantization parameters of an op's quantized *input* by walking the TorchScript
  graph back to the op that produced it, and knows where the output scale and zero point of each
  quantized op it converts are (``qnn_torch._get_quant_param_for_input``). An op it does not know
  is walked through as if it kept its input's parameters, so every op after a batch norm would be
  given the batch norm's *input* scale. The walk is taught where our ops keep theirs.
* TVM appends the input scale and zero point to the inputs of the quantized ops it knows
  (``qnn_torch.add_input_quant_params_to_op_inputs``); the same is done for ours, so their
  converters receive them the same way.

The same map replaces TVM's conversion of ``aten::adaptive_avg_pool2d`` on a quantized tensor:
TVM averages in int32, where division truncates, PyTorch rounds to nearest; on an
EfficientNet-style FX net (squeeze-excitation pools and a global pool before the classifier; 32x32,
4 inputs) that alone put TVM 4-7 output steps from PyTorch, 0 with the rounded pool
(:func:`rounded_adaptive_avg_pool2d`).

The converted batch norm stays int8 in and int8 out, as PyTorch's: it computes what PyTorch's
kernel computes (``aten/src/ATen/native/quantized/cpu/qbatch_norm.cpp``), per channel
``q_out = clamp(round(alpha_c * (q_in - zp_in) + beta_c) + zp_out)`` with
``alpha_c = gamma_c / sqrt(var_c + eps) * s_in / s_out`` and
``beta_c = (beta_c - mean_c * gamma_c / sqrt(var_c + eps)) / s_out``, in float32, as one
elementwise Relay expression that TVM fuses into the kernel that produces its input.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import tvm
from tvm import relay
from tvm.relay.frontend import pytorch as torch_frontend
from tvm.relay.frontend import qnn_torch
from tvm.relay.frontend.common import infer_shape

logger = logging.getLogger(__name__)

# Where each op added here keeps its output scale and zero point among its TorchScript inputs,
# like the table inside TVM's qnn_torch._get_quant_param_for_input.
OUTPUT_QUANT_PARAM_INDICES: dict[str, tuple[int, int]] = {
    # quantized::batch_norm2d(Tensor qx, Tensor? weight, Tensor? bias, Tensor mean, Tensor var,
    #                         float eps, float output_scale, int output_zero_point)
    "quantized::batch_norm2d": (6, 7),
    "quantized::batch_norm2d_relu": (6, 7),
}
# How many quantized tensors each op takes first (their scale and zero point are appended).
QUANTIZED_INPUT_COUNT: dict[str, int] = {"quantized::batch_norm2d": 1, "quantized::batch_norm2d_relu": 1}

_HOOK_LOCK = threading.RLock()


def _quantized_batch_norm(with_relu: bool) -> Callable[[list, list], relay.Expr]:
    """Converter of ``quantized::batch_norm2d(_relu)``: uint8 in, uint8 out (see the module doc)."""

    def convert(inputs: list, _input_types: list) -> relay.Expr:
        if len(inputs) != 10:
            raise ValueError(
                f"quantized batch norm: expected 8 inputs and the input's scale and zero point, got {len(inputs)} "
                "(was the TorchScript module imported through relay_ext.frontend.torch_quantized_ops.from_pytorch?)"
            )
        data, weight, bias, mean, var, eps, out_scale, out_zero, in_scale, in_zero = inputs
        channels = _channel_count(data)
        inv_sigma = relay.rsqrt(var + relay.const(float(eps), "float32"))
        gamma = inv_sigma if weight is None else weight * inv_sigma
        shift = -mean * gamma if bias is None else bias - mean * gamma
        out_scale, out_zero = _scalar(out_scale), _scalar(out_zero)
        alpha = gamma * relay.const(_scalar(in_scale) / out_scale, "float32")
        beta = shift / relay.const(out_scale, "float32")
        per_channel = (channels, 1, 1)  # NCHW: broadcast over H and W
        centered = relay.cast(data, "float32") - relay.const(float(_scalar(in_zero)), "float32")
        scaled = centered * relay.reshape(alpha, per_channel) + relay.reshape(beta, per_channel)
        shifted = relay.round(scaled) + relay.const(float(out_zero), "float32")
        low = float(out_zero) if with_relu else 0.0  # a ReLU in the quantized domain: max(q, zp)
        return relay.cast(relay.clip(shifted, low, 255.0), "uint8")

    return convert


def rounded_adaptive_avg_pool2d(data: relay.Expr, output_size: Sequence[int], **attrs: Any) -> relay.Expr:
    """``adaptive_avg_pool2d`` of a uint8 tensor, averaged in float32 and rounded to nearest, as
    PyTorch's quantized kernel does (TVM's frontend averages in int32: integer division truncates,
    so about half of the averages come out one step low)."""
    pooled = relay.nn.adaptive_avg_pool2d(relay.cast(data, "float32"), output_size=output_size, **attrs)
    return relay.cast(relay.round(pooled), "uint8")


def _adaptive_avg_pool2d(inputs: list, _input_types: list) -> relay.Expr:
    """Converter of ``aten::adaptive_avg_pool2d``: TVM's for a float input, rounded for a quantized one."""
    data = inputs[0]
    output_size = [int(_scalar(size)) if isinstance(size, relay.Constant) else size for size in inputs[1]]
    if relay.transform.InferTypeLocal(data).dtype == "uint8":
        return rounded_adaptive_avg_pool2d(data, output_size)
    return relay.nn.adaptive_avg_pool2d(data, output_size=output_size)


CUSTOM_CONVERT_MAP: dict[str, Callable[[list, list], relay.Expr]] = {
    "quantized::batch_norm2d": _quantized_batch_norm(with_relu=False),
    "quantized::batch_norm2d_relu": _quantized_batch_norm(with_relu=True),
    "aten::adaptive_avg_pool2d": _adaptive_avg_pool2d,
}


def from_pytorch(
    script_module: Any,
    input_infos: Sequence[tuple[str, Sequence[int]]],
    custom_convert_map: Mapping[str, Callable] | None = None,
    **kwargs: Any,
) -> tuple[tvm.IRModule, dict[str, tvm.nd.NDArray]]:
    """TVM's ``relay.frontend.from_pytorch`` with :data:`CUSTOM_CONVERT_MAP` (the caller's
    ``custom_convert_map`` entries win) and :func:`quantized_op_hooks` in force."""
    converters = {**CUSTOM_CONVERT_MAP, **(custom_convert_map or {})}
    with quantized_op_hooks():
        return relay.frontend.from_pytorch(script_module, list(input_infos), custom_convert_map=converters, **kwargs)


@contextlib.contextmanager
def quantized_op_hooks() -> Iterator[None]:
    """While the block runs, TVM's PyTorch frontend imports what FX graph mode quantization makes
    and TVM 0.19 does not know (see the module doc):

    * the ops of :data:`OUTPUT_QUANT_PARAM_INDICES`: where they keep their output scale and zero
      point (``qnn_torch._get_quant_param_for_input``), and their input's scale and zero point
      appended to their inputs (``qnn_torch.add_input_quant_params_to_op_inputs``);
    * packed weights held by the top module rather than by a quantized submodule (FX's functional
      ``F.conv2d`` / ``F.linear``: attributes such as ``stem_packed_weight_0``), which TVM only
      looks for under the name ``<module>._packed_params`` (``pytorch.convert_params`` and
      ``qnn_torch.get_weight_quant_params``).

    It replaces those four functions of ``tvm.relay.frontend`` for the duration of the block
    (under a lock, so concurrent imports in threads wait for each other) and restores them after;
    each replacement calls TVM's own function and adds to its result.
    """
    with _HOOK_LOCK:
        originals = {
            (qnn_torch, "_get_quant_param_for_input"): qnn_torch._get_quant_param_for_input,  # pylint: disable=protected-access
            (qnn_torch, "add_input_quant_params_to_op_inputs"): qnn_torch.add_input_quant_params_to_op_inputs,
            (qnn_torch, "get_weight_quant_params"): qnn_torch.get_weight_quant_params,
            (torch_frontend, "convert_params"): torch_frontend.convert_params,
        }
        find_original = originals[(qnn_torch, "_get_quant_param_for_input")]
        add_original = originals[(qnn_torch, "add_input_quant_params_to_op_inputs")]
        unpack_original = originals[(qnn_torch, "get_weight_quant_params")]
        convert_params_original = originals[(torch_frontend, "convert_params")]
        top_level_packed: dict[str, str] = {}  # "<attribute>._packed_params" -> "conv" / "linear"

        def find(value: Any) -> tuple[Any, Any]:
            return _quant_params_of_input(value, find_original)

        def add_input_params(graph: Any) -> dict:
            scales_for_bias = add_original(graph)
            for node in graph.nodes():
                for index in range(QUANTIZED_INPUT_COUNT.get(node.kind(), 0)):
                    scale, zero_point = find(node.inputsAt(index))
                    if scale is None:
                        raise ValueError(f"{node.kind()}: cannot find the quantization parameters of input {index}")
                    node.addInput(scale)
                    node.addInput(zero_point)
            return scales_for_bias

        def convert_params(graph: Any, *args: Any, **kwargs: Any) -> tuple:
            params, tensors, packed_param_map, debug_names = convert_params_original(graph, *args, **kwargs)
            for node in graph.findAllNodes("prim::GetAttr", recurse=True):
                kind = _PACKED_KINDS.get(str(node.output().type()))
                name = node.output().debugName()
                if kind is not None and name not in packed_param_map:
                    key = f"{_attribute_path(node)}.{_PACKED_SUFFIX}"
                    packed_param_map[name] = key
                    top_level_packed[key] = kind
            return params, tensors, packed_param_map, debug_names

        def get_weight_quant_params(script_module: Any, packed_param_names: Any) -> dict:
            names = list(packed_param_names)
            quant_params = unpack_original(script_module, names)
            for key in names:
                if key not in quant_params and key in top_level_packed:
                    quant_params[key] = _unpack(script_module, key, top_level_packed[key])
            return quant_params

        qnn_torch._get_quant_param_for_input = find  # pylint: disable=protected-access
        qnn_torch.add_input_quant_params_to_op_inputs = add_input_params
        qnn_torch.get_weight_quant_params = get_weight_quant_params
        torch_frontend.convert_params = convert_params
        try:
            yield
        finally:
            for (module, name), function in originals.items():
                setattr(module, name, function)


# TorchScript classes of packed weights, and the unpack op for each.
_PACKED_KINDS = {
    "__torch__.torch.classes.quantized.Conv2dPackedParamsBase": "conv",
    "__torch__.torch.classes.quantized.LinearPackedParamsBase": "linear",
}
_PACKED_SUFFIX = "_packed_params"  # TVM strips "._packed_params" to name the weight and bias vars


def _attribute_path(getattr_node: Any) -> str:
    """``a.b.c`` for a chain of ``prim::GetAttr`` nodes ending at ``getattr_node``."""
    names = []
    node = getattr_node
    while node.kind() == "prim::GetAttr":
        names.append(node.s("name"))
        node = node.input().node()
    return ".".join(reversed(names))


def _unpack(script_module: Any, key: str, kind: str) -> Any:
    """TVM's weight record (``qnn_torch.ConvPackedParam`` / ``QNNParam``) for the packed weight at
    attribute path ``key`` minus its ``._packed_params`` suffix."""
    import torch  # pylint: disable=import-outside-toplevel

    packed = script_module
    for name in key[: -len(_PACKED_SUFFIX) - 1].split("."):
        packed = getattr(packed, name)
    if kind == "conv":
        weight, bias = torch.ops.quantized.conv2d_unpack(packed)
        return qnn_torch.make_conv_packed_param(weight, bias, packed)
    weight, bias = torch.ops.quantized.linear_unpack(packed)
    return qnn_torch.make_qnn_param(weight, bias)


def _quant_params_of_input(value: Any, find_original: Callable[[Any], tuple[Any, Any]]) -> tuple[Any, Any]:
    """TVM's walk (from the producer of ``value`` back through first inputs, to the first node
    that names its output scale and zero point), stopping at our ops too.

    At each node TVM's own lookup is asked about that node alone (through :class:`_OneNode`, which
    hides the node's inputs from it), so TVM's table is used as it is, not copied.
    """
    node = value.node()
    while True:
        indices = OUTPUT_QUANT_PARAM_INDICES.get(node.kind())
        if indices is not None:
            return node.inputsAt(indices[0]), node.inputsAt(indices[1])
        scale, zero_point = find_original(_OneNode(node))
        if scale is not None:
            return scale, zero_point
        inputs = list(node.inputs())
        if not inputs:
            return None, None
        node = inputs[0].node()


class _OneNode:
    """A TorchScript value stand-in whose producer shows its kind and inputs by index but no input
    list, so TVM's lookup answers for that node without walking further back."""

    def __init__(self, node: Any) -> None:
        self._node = node

    def node(self) -> "_OneNode":
        return self

    def kind(self) -> str:
        return self._node.kind()

    def inputsAt(self, index: int) -> Any:  # noqa: N802 - the TorchScript API's name
        return self._node.inputsAt(index)

    def inputs(self) -> list:
        return []


def _scalar(value: Any) -> float:
    """A Python number from a TorchScript constant as the frontend passes it (number or Relay constant)."""
    if isinstance(value, relay.Constant):
        return value.data.numpy().item()
    if isinstance(value, (int, float)):
        return value
    raise ValueError(f"expected a constant quantization parameter, got {type(value).__name__}")


def _channel_count(data: relay.Expr) -> int:
    shape = infer_shape(data)
    if len(shape) != 4:
        raise ValueError(f"quantized::batch_norm2d expects an NCHW tensor, got shape {tuple(shape)}")
    return int(shape[1])
