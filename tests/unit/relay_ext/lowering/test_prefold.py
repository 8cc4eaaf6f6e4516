"""relay_ext/lowering/prefold.py: Relay's constant folding done once with numpy before extraction
and the build (build time). Each numpy fold must give the constant TVM's FoldConstant
gives (bit for bit), and a prefolded model the same tasks and outputs as the model itself."""

import numpy as np
import pytest
import tvm
from tvm import meta_schedule as ms
from tvm import relay

from relay_ext.frontend.models import SEVEN_BIT_ACTIVATIONS
from relay_ext.lowering.config import pass_config
from relay_ext.lowering.prefold import layout_transform, numpy_fold_constants, prefold
from relay_ext.lowering.relay_build import copy_module
from relay_ext.lowering.targets import normalize_target
from relay_ext.lowering.x86 import seven_bit_conv
from relay_ext.build import compile
from relay_ext.measure.run import run_module
from relay_ext.tuning import extract_tasks
from conftest import AVX2


def _tvm_fold(expr: relay.Expr) -> np.ndarray:
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([], expr)))
    folded = relay.transform.FoldConstant()(mod)["main"].body
    assert isinstance(folded, relay.Constant), folded
    return folded.data.numpy()


def _numpy_fold(expr: relay.Expr) -> np.ndarray:
    mod, counts = numpy_fold_constants(tvm.IRModule.from_expr(relay.Function([], expr)))
    body = mod["main"].body
    assert isinstance(body, relay.Constant) and counts, (body, counts)
    return body.data.numpy()


def _same(expr_of):
    ours, theirs = _numpy_fold(expr_of()), _tvm_fold(expr_of())
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)


def test_round_is_half_away_from_zero_as_llvm_round():
    ties = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, -0.49999997, 3.7, -3.7, 0.0],
                    "float32")
    _same(lambda: relay.round(relay.const(ties)))
    assert _numpy_fold(relay.round(relay.const(ties))).tolist()[:6] == [-3, -2, -1, 1, 2, 3]


def test_a_weight_quantization_chain_folds_to_tvms_values():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((16, 8, 3, 3)).astype("float32")
    scale = (np.abs(weight).reshape(16, -1).max(axis=1) / 127).astype("float32")
    weight[0, 0, 0, :3] = np.array([0.5, 1.5, -2.5], "float32") * scale[0]  # ties after dividing

    def chain():  # qnn.quantize(weight, scale, 0, axis=0) as QNN canonicalization writes it
        scaled = relay.round(relay.divide(relay.const(weight),
                                          relay.expand_dims(relay.const(scale), 1, 3)))
        clipped = relay.clip(relay.add(scaled, relay.cast(relay.const(0), "float32")), -128, 127)
        return relay.cast(clipped, "int8")
    _same(chain)
    int8 = rng.integers(-128, 128, (16, 72)).astype("int8")
    _same(lambda: relay.sum(relay.cast(relay.const(int8), "int32"), axis=[1], keepdims=True))
    big = rng.integers(-2**31, 2**31 - 1, 64, dtype=np.int64).astype("int32")
    _same(lambda: relay.multiply(relay.const(np.int32(7)), relay.const(big)))  # wraps


@pytest.mark.parametrize("src, dst, shape", [
    ("OIHW", "OIHW4i16o4i", (32, 32, 3, 3)),   # x86's int8 conv weight layout
    ("NCHW", "NCHW16c", (1, 32, 4, 4)),
    ("NCHW16c", "NCHW", (1, 2, 4, 4, 16)),
    ("OIHW16i16o", "OIHW4i16o4i", (2, 2, 1, 1, 16, 16)),
    ("NC", "NC16n4c", (32, 8)),
])
def test_layout_transform_matches_tvms(src, dst, shape):
    data = np.random.default_rng(1).integers(-128, 128, shape).astype("int8")
    _same(lambda: relay.layout_transform(relay.const(data), src, dst))
    assert layout_transform(data, src, dst).size == data.size


def test_an_op_numpy_does_not_compute_is_left_to_relay():
    expr = relay.exp(relay.const(np.ones(4, "float32")))
    mod, counts = numpy_fold_constants(tvm.IRModule.from_expr(relay.Function([], expr)))
    assert not counts and isinstance(mod["main"].body, relay.Call)


def test_a_prefolded_model_has_the_same_tasks_and_outputs(tiny):
    target = normalize_target(AVX2)
    folded = prefold(tiny.mod, tiny.params, target, pass_config("ours"))
    text = folded["main"].astext(show_meta_data=False)
    assert "qnn." not in text and "layout_transform(meta" not in text  # weights folded
    assert not folded["main"].params[1:]  # the weights are constants now, not parameters

    def workloads(tasks):
        return sorted(int(tvm.ir.structural_hash(t.dispatched[0])) for t in tasks)
    # extract_tasks prefolds (as every build does): against Relay's own extraction
    # (the model's 7-bit activations mark, which prefold reads, set for Relay's legalization too)
    with seven_bit_conv.activations(bool(tiny.mod.get_attr(SEVEN_BIT_ACTIVATIONS))):
        relay_own = ms.relay_integration.extract_tasks(copy_module(tiny.mod), target, tiny.params,
                                                       pass_config=pass_config("ours"))
    assert workloads(extract_tasks(folded, None, target)) == workloads(relay_own)
    assert prefold(folded, None, target, pass_config("ours")) is folded  # already prefolded
    # TVM's default build below opt level 3 prefolds nothing itself: the folded module against
    # the module as given
    ours = run_module(compile(folded, None, target, schedule="default", opt_level=2), tiny.inputs)
    theirs = run_module(compile(tiny.mod, tiny.params, target, schedule="default", opt_level=2),
                        tiny.inputs)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def test_a_prefolded_model_builds_where_requantize_is_a_per_axis_multiply(tiny):
    """On a target without fast int8 a per-channel requantize is ``fixed_point_multiply_per_axis``,
    whose axes prefold's layout pass makes two; Relay's own pipeline must not run that pass again
    (its check wants one axis): the tasks extract and the no-search build runs."""
    target = normalize_target("llvm -num-cores 2")
    folded = prefold(tiny.mod, tiny.params, target, pass_config("ours"))
    assert "fixed_point_multiply_per_axis" in folded["main"].astext(show_meta_data=False)
    assert extract_tasks(tiny.mod, tiny.params, target)
    built = compile(tiny.mod, tiny.params, target, schedule="no-search", choose_per_task=False)
    assert run_module(built.lib, tiny.inputs)[0].shape == (1, 10)
