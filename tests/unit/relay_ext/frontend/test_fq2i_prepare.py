"""relay_ext.frontend.fq2i_prepare's adds of two dequantized tensors (``single_rounding_adds``) on
hand-written Relay: integer after FakeQuantizationToInteger without ``qnn.add``, rounded once as
the float sum quantized (ONNX Runtime's QDQ ``Add``), where ``qnn.add`` rounds each operand first;
the int32 step (``int32_add_step``, shared with the PT2E import) never lets the sum overflow;
operands that are not per-tensor 8-bit dequantizes (PT2E's int32 pairs among them) left alone."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_ext.frontend.fq2i_prepare import FINEST_SUM_STEP_BITS, int32_add_step, single_rounding_adds
from relay_ext.frontend.qnn_passes import integer_ops, op_counts

SHAPE = (4, 256)
LEFT = (0.05, 3, "int8")    # scale, zero point, dtype
RIGHT = (0.03, -10, "int8")  # qnn.add takes one dtype for both operands
OUT = (0.07, -5, "int8")


def _dequantized(name: str, scale: float, zero_point: int, dtype: str) -> tuple[relay.Var, relay.Expr]:
    var = relay.var(name, shape=SHAPE, dtype=dtype)
    return var, relay.qnn.op.dequantize(var, relay.const(np.float32(scale)), relay.const(np.int32(zero_point)))


def _add_module(right: relay.Expr | None = None) -> tvm.IRModule:
    """``quantize(dequantize(a) + dequantize(b))`` (``right`` instead of ``dequantize(b)`` if given)."""
    a, left = _dequantized("a", *LEFT)
    params = [a]
    if right is None:
        b, right = _dequantized("b", *RIGHT)
        params.append(b)
    scale, zero_point, dtype = OUT
    out = relay.qnn.op.quantize(relay.add(left, right), relay.const(np.float32(scale)),
                                relay.const(np.int32(zero_point)), out_dtype=dtype)
    params += [param for param in relay.analysis.free_vars(right) if param not in params]
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function(params, out)))


def _inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"a": rng.integers(-128, 128, SHAPE).astype("int8"), "b": rng.integers(-128, 128, SHAPE).astype("int8")}


def _run(mod: tvm.IRModule, inputs: dict[str, np.ndarray]) -> np.ndarray:
    with tvm.transform.PassContext(opt_level=3):
        run = relay.create_executor("graph", mod=mod, target="llvm").evaluate()
    return run(**inputs).numpy().astype(np.int64)


def _float_sum_quantized(inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The sum of the dequantized operands quantized once, and where it lies within 1e-3 of a step
    of a rounding boundary (where float32 arithmetic may round either way)."""
    total = sum((inputs[name].astype(np.float64) - zero_point) * scale
                for name, (scale, zero_point, _) in (("a", LEFT), ("b", RIGHT)))
    exact = total / OUT[0]
    near_tie = np.abs(exact - np.floor(exact) - 0.5) < 1e-3
    return np.clip(np.round(exact) + OUT[1], -128, 127).astype(np.int64), near_tie


def test_add_of_two_dequantized_tensors_is_an_int32_sum_rounded_once():
    mod = _add_module()
    counts = op_counts(integer_ops(mod))
    assert not counts.get("qnn.add") and counts.get("add") == 1, counts
    assert not counts.get("qnn.dequantize") and not counts.get("qnn.quantize"), counts

    inputs = _inputs()
    expected, near_tie = _float_sum_quantized(inputs)
    single = _run(integer_ops(mod), inputs)
    assert np.array_equal(single[~near_tie], expected[~near_tie])
    # TVM's qnn.add (the pass alone) rounds each operand to the output step first.
    twice = _run(relay.transform.FakeQuantizationToInteger()(mod), inputs)
    assert op_counts(relay.transform.FakeQuantizationToInteger()(mod)).get("qnn.add") == 1
    assert np.count_nonzero(twice[~near_tie] != expected[~near_tie]) > 0


@pytest.mark.parametrize("ratio", [1.0, 2.5, 64.0, 65.0, 1000.0, 2.0**20, 2.0**23 - 1])
def test_the_int32_sum_of_two_8_bit_operands_cannot_overflow(ratio):
    fine = 0.01
    step = int32_add_step([fine * ratio, fine])
    assert step is not None and step <= fine
    # Each operand spans 255 of its steps: the largest sum in int32 steps stays below 2**31.
    assert 255 * (fine + fine * ratio) / step < 2.0**31
    # and the step is the finest power-of-two fraction that does (up to FINEST_SUM_STEP_BITS).
    bits = round(np.log2(fine / step))
    assert bits == FINEST_SUM_STEP_BITS or 255 * (fine + fine * ratio) / (step / 2) >= 2.0**31


def test_steps_too_far_apart_keep_qnn_add():
    assert int32_add_step([1.0, 2.0**-24]) is None
    assert int32_add_step([0.5]) == 0.5 * 2.0**-FINEST_SUM_STEP_BITS


def _int32_pair(expr: relay.Expr, step: float) -> relay.Expr:
    scale, zero = relay.const(np.float32(step)), relay.const(np.int32(0))
    return relay.qnn.op.dequantize(relay.qnn.op.quantize(expr, scale, zero, out_dtype="int32"), scale, zero)


def test_operands_already_int32_per_channel_or_float_are_left_alone():
    once = single_rounding_adds(_add_module())
    assert tvm.ir.structural_equal(single_rounding_adds(once), once)  # PT2E's pairs: not paired again
    per_channel = relay.qnn.op.dequantize(relay.var("b", shape=SHAPE, dtype="int8"),
                                          relay.const(np.full(SHAPE[1], 0.03, np.float32)),
                                          relay.const(np.zeros(SHAPE[1], np.int32)), axis=1)
    float_operand = relay.var("f", shape=SHAPE, dtype="float32")
    int32_operand = _int32_pair(relay.var("g", shape=SHAPE, dtype="float32"), 0.001)
    for right in (per_channel, float_operand, int32_operand):
        mod = _add_module(right)
        assert single_rounding_adds(mod) is mod
