"""How far TVM's output is from PyTorch's, in output quantization steps.

A quantized model's output is dequantized: ``(q - zero_point) * scale``. Two implementations that
disagree on rounding somewhere inside give outputs a whole number of ``scale`` steps apart, so
``max |tvm - torch| / scale`` is the natural measure of agreement.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relay
from tvm.relay import dataflow_pattern as pattern

from relay_ext.frontend.models import LoadedModel, run_torchscript  # noqa: F401 - re-exported here
from relay_ext.frontend.torch_quantized_ops import rounded_adaptive_avg_pool2d
from relay_ext.build.entry import compile  # pylint: disable=redefined-builtin
from relay_ext.measure.run import run_module

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepError:
    """Agreement of two dequantized outputs: the largest and mean distance in steps, and the share
    of output elements that are equal (within a tenth of a step)."""

    max_steps: float
    mean_steps: float
    fraction_equal: float


def quantization_step_error(tvm_output: np.ndarray, torch_output: np.ndarray, scale: float) -> float:
    """The largest distance between the two outputs, in steps of ``scale`` (0.0 when identical)."""
    return step_error(tvm_output, torch_output, scale).max_steps


def step_error(tvm_output: np.ndarray, torch_output: np.ndarray, scale: float) -> StepError:
    """Max and mean distance in steps of ``scale``, and the share of elements equal."""
    tvm_output = np.asarray(tvm_output, dtype=np.float64)
    torch_output = np.asarray(torch_output, dtype=np.float64)
    if tvm_output.shape != torch_output.shape:
        raise ValueError(f"output shapes differ: TVM {tvm_output.shape}, PyTorch {torch_output.shape}")
    if not scale > 0:
        raise ValueError(f"the quantization scale must be positive, got {scale!r}")
    steps = np.abs(tvm_output - torch_output) / scale
    if steps.size == 0:
        return StepError(0.0, 0.0, 1.0)
    return StepError(float(steps.max()), float(steps.mean()), float(np.mean(steps < 0.1)))


def compare_untuned_with_reference(model: LoadedModel, target: str = "llvm") -> StepError:
    """Step error of TVM's untuned build of ``model`` (TVM's default schedules, at Relay's own
    default opt level 2: ``relay_ext.compile(..., schedule="default", opt_level=2)``) against its
    reference runtime (the TorchScript module, or ONNX Runtime for an ONNX model), on the example
    input. Needs a quantized model (one with an output scale)."""
    if model.output_scale is None:
        raise ValueError(f"model {model.name!r} has no output quantization scale (is it quantized?)")
    built = compile(model, target=target, schedule="default", opt_level=2)
    tvm_output = run_module(built, model.inputs)[0]
    error = step_error(tvm_output, model.run_reference(), model.output_scale)
    logger.info(
        "%s (%s): TVM vs %s max %.2f steps, mean %.3f, %.1f%% equal",
        model.name,
        model.layout,
        model.reference_name,
        error.max_steps,
        error.mean_steps,
        100 * error.fraction_equal,
    )
    return error


# --- diagnosis: round like PyTorch --------------------------------------------------------------


class _RoundedIntegerAveragePool(pattern.DFPatternCallback):
    """``cast<uint8>(adaptive_avg_pool2d(cast<int32>(x)))`` -> the same pool in float32, rounded.

    TVM's frontend averages quantized tensors in int32, and integer division truncates; PyTorch's
    quantized adaptive average pool rounds to nearest.
    """

    def __init__(self) -> None:
        super().__init__()
        self.data = pattern.wildcard()
        upcast = pattern.is_op("cast")(self.data).has_attr({"dtype": "int32"})
        self.pool = pattern.is_op("nn.adaptive_avg_pool2d")(upcast)
        self.pattern = pattern.is_op("cast")(self.pool).has_attr({"dtype": "uint8"})

    def callback(self, pre: relay.Expr, post: relay.Expr, node_map: dict) -> relay.Expr:
        data = node_map[self.data][0]
        pool = node_map[self.pool][0]
        return rounded_adaptive_avg_pool2d(
            data, pool.attrs.output_size, layout=pool.attrs.layout, out_layout=pool.attrs.out_layout
        )


class _FloatQuantizedAdd(pattern.DFPatternCallback):
    """``qnn.add`` -> dequantize both operands, add in float32, quantize once.

    TVM's ``qnn.add`` requantizes each operand to the output scale and adds the integers: two
    roundings. PyTorch's quantized add dequantizes, adds in float and quantizes: one rounding.
    """

    def __init__(self) -> None:
        super().__init__()
        self.pattern = pattern.is_op("qnn.add")(*[pattern.wildcard() for _ in range(8)])

    def callback(self, pre: relay.Expr, post: relay.Expr, node_map: dict) -> relay.Expr:
        lhs, rhs, lhs_scale, lhs_zero, rhs_scale, rhs_zero, out_scale, out_zero = post.args
        total = relay.qnn.op.dequantize(lhs, lhs_scale, lhs_zero) + relay.qnn.op.dequantize(rhs, rhs_scale, rhs_zero)
        return relay.qnn.op.quantize(total, out_scale, out_zero, out_dtype="uint8")


def with_torch_rounding(mod: tvm.IRModule) -> tvm.IRModule:
    """A copy of ``mod`` that rounds like PyTorch where TVM's PyTorch frontend does not.

    A diagnostic, not part of the tuning flow: it replaces the integer average pool and ``qnn.add``
    (see the two rewrites above) by float versions, so that any remaining difference from PyTorch
    comes from elsewhere (conv/dense requantization).
    """
    main = relay.transform.InferType()(mod)["main"]
    for rewrite in (_RoundedIntegerAveragePool(), _FloatQuantizedAdd()):
        main = pattern.rewrite(rewrite, main)
    rewritten = tvm.IRModule(mod.functions, mod.type_definitions)
    rewritten["main"] = main
    return relay.transform.InferType()(rewritten)


