"""relay_ext/lowering/x86/saturation_free_int8.py: uint8 x int8 convs exact on x86 without VNNI.

Without the split, TOPI's conv for ``llvm -mcpu=core-avx2`` multiplies with ``vpmaddubsw`` and a
random full-range conv had 94% of its outputs wrong (issue 32's PT2E families 15-26 steps off).
"""

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_ext.lowering import targets
from relay_ext.lowering.x86 import saturation_free_int8 as sat
from relay_ext.report.accuracy import build_untuned
from relay_ext.tuning import run_module

AVX2 = "llvm -mcpu=core-avx2"
AVX512_NO_VNNI = "llvm -mcpu=skylake-avx512"
VNNI = "llvm -mcpu=cascadelake"


def _runs_here(target: str):
    missing = targets.missing_features(target)
    return pytest.mark.skipif(bool(missing), reason=f"this host's OS does not enable {missing} ({target})")


def test_split_weights_is_exact_and_in_range():
    weights = np.arange(-128, 128, dtype=np.int64).astype("int8")
    high, low = sat.split_weights(weights)
    assert np.array_equal(2 * high.astype(np.int64) + low, weights.astype(np.int64))
    assert high.min() == -64 and high.max() == 63 and set(np.unique(low)) == {0, 1}
    assert not sat.can_saturate(high.reshape(1, -1)) and not sat.can_saturate(low.reshape(1, -1))


@pytest.mark.parametrize("weights, saturates", [
    ([[64, 64, -64, -64]], False),        # 255 * 128 = 32640 fits
    ([[65, 64, 0, 0]], True),             # 255 * 129 = 32895 does not
    ([[-65, -64, 1, 1]], True),           # -32895 < -32768
    ([[127, -128, 0, 1]], False),         # one large weight of each sign: no pair of one sign
    ([[1, 1, 1, 1], [127, 2, 0, 0]], True),  # one channel is enough
    ([[127, -128, 1]], False),            # 255 * 128 = 32640 for the pair (127, 1)
])
def test_can_saturate_takes_the_two_largest_of_a_sign_per_channel(weights, saturates):
    assert sat.can_saturate(np.array(weights)) == saturates


def test_can_saturate_reads_the_output_axis():
    per_input_channel = np.array([[100, 0], [100, 0]])  # axis 0: no channel holds two 100s
    assert sat.can_saturate(per_input_channel, output_axis=1)
    assert not sat.can_saturate(per_input_channel, output_axis=0)


def _conv(data_dtype="uint8", kernel_dtype="int8", channels=(16, 16), groups=1, weights=None,
          zero_points=(3, 0), seed=0):
    generator = np.random.default_rng(seed)
    cin, cout = channels
    info_d, info_k = np.iinfo(data_dtype), np.iinfo(kernel_dtype)
    data = generator.integers(info_d.min, info_d.max + 1, (1, cin, 7, 7)).astype(data_dtype)
    if weights is None:
        weights = generator.integers(info_k.min, info_k.max + 1, (cout, cin // groups, 3, 3)).astype(kernel_dtype)
    var = relay.var("data", shape=data.shape, dtype=data_dtype)
    zx, zw = zero_points
    body = relay.qnn.op.conv2d(var, relay.const(weights), relay.const(zx), relay.const(zw), relay.const(0.5),
                               relay.const(0.25), kernel_size=(3, 3), channels=cout, padding=(1, 1),
                               groups=groups, out_dtype="int32")
    mod = tvm.IRModule.from_expr(relay.Function([var], body))
    # The exact result in numpy: padding is with the input zero point, as QNN pads.
    padded = np.pad(data.astype(np.int64) - zx, ((0, 0), (0, 0), (1, 1), (1, 1)))
    kernel = weights.astype(np.int64) - zw
    expected = np.zeros((1, cout, 7, 7), np.int64)
    per_group_in, per_group_out = cin // groups, cout // groups
    for o in range(cout):
        g = o // per_group_out
        for i in range(3):
            for j in range(3):
                window = padded[0, g * per_group_in:(g + 1) * per_group_in, i:i + 7, j:j + 7]
                expected[0, o] += np.einsum("chw,c->hw", window, kernel[o, :, i, j])
    return mod, data, expected


def _legalized_calls(mod: tvm.IRModule, target: str, op: str) -> int:
    with tvm.target.Target(target):
        legal = relay.qnn.transform.Legalize()(relay.transform.InferType()(mod))
    found = []
    relay.analysis.post_order_visit(
        legal["main"], lambda e: found.append(e) if isinstance(e, relay.Call) and getattr(e.op, "name", "") == op else None)
    return len(found)


def test_a_saturating_conv_is_split_in_two_only_without_vnni():
    sat.install()
    mod, _, _ = _conv()
    assert _legalized_calls(mod, AVX2, "qnn.conv2d") == 2
    assert _legalized_calls(mod, AVX512_NO_VNNI, "qnn.conv2d") == 2
    assert _legalized_calls(mod, VNNI, "qnn.conv2d") == 1
    assert _legalized_calls(mod, "llvm -mcpu=cascadelake -mattr=-avx512vnni", "qnn.conv2d") == 2


def test_a_conv_whose_weights_cannot_saturate_stays_one_conv():
    sat.install()
    weights = np.random.default_rng(1).integers(-64, 64, (16, 16, 3, 3)).astype("int8")
    mod, _, _ = _conv(weights=weights)
    assert _legalized_calls(mod, AVX2, "qnn.conv2d") == 1


@_runs_here(AVX2)
@pytest.mark.parametrize("case", [
    dict(),                                              # uint8 x int8, as PT2E and ONNX Runtime make them
    dict(data_dtype="int8", zero_points=(-5, 0)),        # int8 data: TVM shifts it to uint8 first
    dict(kernel_dtype="uint8", zero_points=(3, 128)),    # uint8 weights: shifted to int8, zero point 0
    dict(kernel_dtype="uint8", zero_points=(0, 131)),    # ... and a nonzero int8 zero point
    dict(channels=(16, 16), groups=16),                  # depthwise
    dict(channels=(3, 8)),                               # a stem: 3 input channels, padded by TVM
])
@pytest.mark.parametrize("opt_level", [2, 3])  # 3: FoldScaleAxis, which folds constant multiplies into weights
def test_untuned_avx2_conv_is_exact(case, opt_level):
    mod, data, expected = _conv(**case)
    with tvm.transform.PassContext(opt_level=opt_level):
        (out,) = run_module(build_untuned(mod, {}, AVX2), {"data": data})
    assert np.array_equal(out, expected), f"{np.mean(out != expected):.0%} of the outputs differ"


def test_task_extraction_sees_the_split():
    from tvm import meta_schedule as ms

    sat.install()
    mod, _, _ = _conv()
    with tvm.transform.PassContext(opt_level=3):
        tasks = ms.relay_integration.extract_tasks(mod, tvm.target.Target(f"{AVX2} -num-cores 2"), {})
    convs = [task for task in tasks if "conv2d" in task.task_name]
    assert sum(task.weight for task in convs) == 2, [(task.task_name, task.weight) for task in tasks]


def _dense(seed=0):
    generator = np.random.default_rng(seed)
    data = generator.integers(0, 256, (2, 64)).astype("uint8")
    weights = generator.integers(-128, 128, (32, 64)).astype("int8")
    var = relay.var("data", shape=data.shape, dtype="uint8")
    body = relay.qnn.op.dense(var, relay.const(weights), relay.const(7), relay.const(0), relay.const(0.5),
                              relay.const(0.25), units=32, out_dtype="int32")
    expected = (data.astype(np.int64) - 7) @ weights.astype(np.int64).T
    return tvm.IRModule.from_expr(relay.Function([var], body)), data, expected


def test_dense_is_split_only_where_the_avx512_dot_product_may_be_used():
    sat.install()
    mod, _, _ = _dense()
    assert _legalized_calls(mod, AVX512_NO_VNNI, "qnn.dense") == 2
    assert _legalized_calls(mod, AVX2, "qnn.dense") == 1  # TOPI's dense is exact there
    assert _legalized_calls(mod, VNNI, "qnn.dense") == 1


@_runs_here(AVX512_NO_VNNI)
def test_untuned_avx512_dense_is_exact():
    mod, data, expected = _dense()
    (out,) = run_module(build_untuned(mod, {}, AVX512_NO_VNNI), {"data": data})
    assert np.array_equal(out, expected)
