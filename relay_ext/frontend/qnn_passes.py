"""The QNN passes both QDQ importers share (:mod:`.onnx_import`, :mod:`.pt2e_import`): a Relay
module of ``qnn.quantize`` / ``qnn.dequantize`` around float ops made integer, and the checks of
the result.

* :func:`integer_ops` -- TVM's ``FakeQuantizationToInteger`` (each ``dequantize -> op -> quantize``
  region as QNN ops; adds of two dequantized tensors first given int32 operands, so that they
  round once, :func:`.fq2i_prepare.single_rounding_adds`), the copies it makes merged, then
  integer means and global average pools rounded to nearest (:class:`RoundIntegerMean`), as ONNX
  Runtime and PyTorch round them;
* :func:`check_integer_compute` -- a quantized model whose convs and dense layers all stayed float
  is refused, a partly float one logged;
* :func:`op_counts` -- how many calls of each operator ``main`` makes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, Dict, Optional

import numpy as np
import tvm
from tvm import relay
from tvm.relay import dataflow_pattern as pattern

from relay_ext.frontend.fq2i_prepare import per_channel_layout_handlers, prepare_linear_layers, single_rounding_adds

logger = logging.getLogger(__name__)

# Relay ops that do the arithmetic of a conv or dense layer: the ones that must become QNN.
FLOAT_COMPUTE_OPS = ("nn.conv2d", "nn.conv2d_transpose", "nn.dense", "nn.matmul", "nn.batch_matmul")
QNN_COMPUTE_OPS = ("qnn.conv2d", "qnn.conv2d_transpose", "qnn.dense", "qnn.batch_matmul")


def integer_ops(mod: tvm.IRModule, use_qat: bool = False) -> tvm.IRModule:
    """``dequantize -> op -> quantize`` regions as QNN ops (TVM's FakeQuantizationToInteger), with
    integer means and global average pools rounded to nearest (:class:`RoundIntegerMean`; a
    non-global average pool stays TVM's truncating ``qnn.avg_pool2d``). ``use_qat`` also
    converts ``dequantize -> op`` regions with no quantize after them (an op with a float output,
    such as PT2E's last linear layer) to the QNN op and a dequantize."""
    # Linear layers as the pass needs them: it crashes on a per-channel qnn.dense without units.
    mod = prepare_linear_layers(mod)
    # Adds of two dequantized 8-bit tensors summed in int32 and rounded once (not qnn.add's twice).
    mod = single_rounding_adds(mod)
    with numpy_constant_folding(), per_channel_layout_handlers():
        mod = relay.transform.FakeQuantizationToInteger(hard_fail=False, use_qat=use_qat)(mod)
    # The pass rewrites each quantize's region on its own: an op whose float output feeds two
    # regions is made integer in each (MobileNetV3's squeeze-excitation: a depthwise conv's output
    # is quantized for the pool and multiplied in float by the gate; its PT2E import had 50 QNN
    # convs for 48). The copies are the same calls: common subexpression elimination merges them.
    mod = relay.transform.EliminateCommonSubexpr()(relay.transform.InferType()(mod))
    main = pattern.rewrite(RoundIntegerMean(), relay.transform.InferType()(mod)["main"])
    rewritten = tvm.IRModule(mod.functions, mod.type_definitions)
    rewritten["main"] = main
    return relay.transform.InferType()(rewritten)


# The constant arithmetic FakeQuantizationToInteger's handlers fold (scale products, zero points).
_NUMPY_FOLDS = {"multiply": np.multiply, "divide": np.divide, "add": np.add, "subtract": np.subtract}


@contextlib.contextmanager
def numpy_constant_folding() -> Iterator[None]:
    """FakeQuantizationToInteger's handlers fold their constant expressions (a conv's scale
    product, zero points of zeros, each seven times per conv) with ``FoldConstantExpr``, which
    compiles each with LLVM (and ``infer_shape`` type-checks a module per call): most of the
    import of a model with many convs (docs/BENCHMARKS.md). Within this block the handlers'
    ``fold_constant`` computes constants, products, quotients, sums, differences,
    ``zeros_like``, ``cast``, ``broadcast_to`` and ``reshape`` of constants with numpy (IEEE
    arithmetic in the same dtype: the same values), and ``infer_shape`` of such a constant from
    its array; anything else goes to TVM as it would without the block. The module it makes is
    structurally equal to the one without it (tests/unit/relay_ext/frontend/test_qnn_passes.py)."""
    from tvm.relay.transform import fake_quantization_to_integer as fq2i

    original_fold, original_shape = fq2i.fold_constant, fq2i.infer_shape
    # Each expression's value once: the pass asks about overlapping expressions, and a graph
    # shares subexpressions (walked as a tree, MobileNetV3's import ran for many minutes).
    memo: Dict[relay.Expr, Optional[np.ndarray]] = {}

    def fold(expr: relay.Expr) -> relay.Expr:
        value = _numpy_value(expr, memo)
        return relay.const(value) if value is not None else original_fold(expr)

    def infer_shape(expr: relay.Expr) -> Any:
        value = _numpy_value(expr, memo)
        return list(value.shape) if value is not None else original_shape(expr)

    fq2i.fold_constant, fq2i.infer_shape = fold, infer_shape
    try:
        yield
    finally:
        fq2i.fold_constant, fq2i.infer_shape = original_fold, original_shape


def _numpy_value(expr: relay.Expr, memo: Dict[relay.Expr, Optional[np.ndarray]]
                 ) -> np.ndarray | None:
    """``expr``'s value computed with numpy, None where it is not a constant expression of the
    ops below; each expression computed once (``memo``)."""
    if expr not in memo:
        memo[expr] = _compute(expr, memo)
    return memo[expr]


def _compute(expr: relay.Expr, memo: Dict[relay.Expr, Optional[np.ndarray]]) -> np.ndarray | None:
    if isinstance(expr, relay.Constant):
        return expr.data.numpy()
    if not isinstance(expr, relay.Call) or not isinstance(expr.op, tvm.ir.Op):
        return None
    args = [_numpy_value(arg, memo) for arg in expr.args]
    if any(arg is None for arg in args):
        return None
    name = expr.op.name
    if name in _NUMPY_FOLDS and len(args) == 2 and args[0].dtype == args[1].dtype and args[0].dtype.kind == "f":
        return np.asarray(_NUMPY_FOLDS[name](args[0], args[1]), dtype=args[0].dtype)
    if name == "zeros_like" and len(args) == 1:
        return np.zeros_like(args[0])
    if name == "cast" and len(args) == 1:
        return args[0].astype(str(expr.attrs.dtype))
    if name == "broadcast_to" and len(args) == 1:
        return np.broadcast_to(args[0], [int(dim) for dim in expr.attrs.shape]).copy()
    if name == "reshape" and len(args) == 1 and all(int(dim) >= -1 for dim in expr.attrs.newshape):
        return args[0].reshape([int(dim) for dim in expr.attrs.newshape])
    return None


class RoundIntegerMean(pattern.DFPatternCallback):
    """``mean`` / ``global_avg_pool2d`` / ``adaptive_avg_pool2d`` of an int32 cast -> the same
    average in float32, rounded to nearest, cast back to int32.

    FakeQuantizationToInteger averages quantized values in int32, where division truncates: about
    half of the averages come out one step low. ONNX Runtime's quantized average pool rounds.
    """

    def __init__(self) -> None:
        super().__init__()
        self.data = pattern.wildcard()
        integer = pattern.is_op("cast")(self.data).has_attr({"dtype": "int32"}) | pattern.is_op(
            "qnn.requantize")(self.data, *[pattern.wildcard() for _ in range(4)]).has_attr({"out_dtype": "int32"})
        self.average = (pattern.is_op("mean")(integer) | pattern.is_op("nn.global_avg_pool2d")(integer)
                        | pattern.is_op("nn.adaptive_avg_pool2d")(integer))
        self.pattern = self.average

    def callback(self, pre: relay.Expr, post: relay.Expr, node_map: dict) -> relay.Expr:
        average = node_map[self.average][0]
        as_float = relay.cast(average.args[0], "float32")
        averaged = relay.Call(average.op, [as_float], average.attrs, average.type_args, average.span)
        return relay.cast(relay.round(averaged), "int32")


def op_counts(mod: tvm.IRModule) -> dict[str, int]:
    """How many calls of each operator ``main`` makes."""
    counts: dict[str, int] = {}

    def visit(node: relay.Expr) -> None:
        if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op):
            counts[node.op.name] = counts.get(node.op.name, 0) + 1

    relay.analysis.post_order_visit(mod["main"].body, visit)
    return counts


def check_integer_compute(mod: tvm.IRModule, name: str) -> None:
    """ValueError when no conv or dense layer became QNN; a warning naming the float ones left."""
    counts = op_counts(mod)
    float_ops = {op: counts[op] for op in FLOAT_COMPUTE_OPS if counts.get(op)}
    integer = sum(counts.get(op, 0) for op in QNN_COMPUTE_OPS)
    if float_ops and not integer:
        raise ValueError(
            f"{name}: no conv or dense layer of the quantized model became integer "
            f"(float: {_listing(float_ops)}); are its QuantizeLinear/DequantizeLinear pairs around them?"
        )
    if float_ops:
        logger.warning("%s: %d conv/dense layers are int8, these stay float32: %s", name, integer, _listing(float_ops))


def _listing(counts: dict[str, int]) -> str:
    return ", ".join(f"{count} {op}" for op, count in counts.items())
