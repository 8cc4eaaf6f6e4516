"""relay_ext/lowering/x86/saturation_free_int8.py: uint8 x int8 convs exact on x86 without VNNI.

Without it, TOPI's conv for ``llvm -mcpu=core-avx2`` multiplies with ``vpmaddubsw`` and a
random full-range conv had 94% of its outputs wrong (PT2E classic CNNs 15-26 steps off). An NCHW
conv becomes an int16 conv (tests/unit/relay_ext/lowering/x86/test_int16_pair_conv.py); the
weight split this file tests is what other layouts and grouped convs get.
"""

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_ext.lowering.x86 import saturation_free_int8 as sat
from relay_ext.build import compile
from relay_ext.measure.run import run_module
from helpers import needs_host_for

AVX2 = "llvm -mcpu=core-avx2"
AVX512_NO_VNNI = "llvm -mcpu=skylake-avx512"
VNNI = "llvm -mcpu=cascadelake"


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
          zero_points=(3, 0), seed=0, nhwc=False):
    generator = np.random.default_rng(seed)
    cin, cout = channels
    info_d, info_k = np.iinfo(data_dtype), np.iinfo(kernel_dtype)
    data = generator.integers(info_d.min, info_d.max + 1, (1, cin, 7, 7)).astype(data_dtype)
    if weights is None:
        weights = generator.integers(info_k.min, info_k.max + 1, (cout, cin // groups, 3, 3)).astype(kernel_dtype)
    var = relay.var("data", shape=data.shape, dtype=data_dtype)
    zx, zw = zero_points
    layouts = {}
    if nhwc:
        var = relay.var("data", shape=data.transpose(0, 2, 3, 1).shape, dtype=data_dtype)
        layouts = dict(data_layout="NHWC", kernel_layout="HWIO")
    body = relay.qnn.op.conv2d(var, relay.const(weights.transpose(2, 3, 1, 0) if nhwc else weights),
                               relay.const(zx), relay.const(zw), relay.const(0.5), relay.const(0.25),
                               kernel_size=(3, 3), channels=cout, padding=(1, 1), groups=groups,
                               out_dtype="int32", **layouts)
    if nhwc:
        body = relay.transpose(body, (0, 3, 1, 2))
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
    return mod, (data.transpose(0, 2, 3, 1) if nhwc else data), expected


def _reductions(mod: tvm.IRModule, target: str, op: str) -> list:
    """The input-channel extent of each ``op`` call's weights after QNN's legalization for
    ``target``: one entry per call."""
    with tvm.target.Target(target):
        legal = relay.transform.InferType()(relay.qnn.transform.Legalize()(relay.transform.InferType()(mod)))
    found = []
    relay.analysis.post_order_visit(
        legal["main"], lambda e: found.append(int(e.args[1].checked_type.shape[str(e.attrs.kernel_layout).index("I")]))
        if isinstance(e, relay.Call) and getattr(e.op, "name", "") == op else None)
    return found


def test_a_saturating_nhwc_conv_becomes_one_conv_over_twice_the_channels_only_without_vnni():
    sat.install()
    mod, _, _ = _conv(nhwc=True)
    assert _reductions(mod, AVX2, "qnn.conv2d") == [32]
    assert _reductions(mod, AVX512_NO_VNNI, "qnn.conv2d") == [32]
    assert _reductions(mod, VNNI, "qnn.conv2d") == [16]
    assert _reductions(mod, "llvm -mcpu=cascadelake -mattr=-avx512vnni", "qnn.conv2d") == [32]
    nchw, _, _ = _conv()  # an NCHW conv: an int16 conv instead (no qnn.conv2d left)
    assert _reductions(nchw, AVX2, "qnn.conv2d") == [] and _reductions(nchw, VNNI, "qnn.conv2d") == [16]


def test_grouped_convs_and_weight_zero_points_take_two_convs():
    sat.install()
    grouped, _, _ = _conv(channels=(16, 16), groups=2)
    assert _reductions(grouped, AVX512_NO_VNNI, "qnn.conv2d") == [8, 8]
    assert _reductions(grouped, AVX2, "qnn.conv2d") == [8]  # TOPI's grouped int8 conv is exact there
    zero_point, _, _ = _conv(kernel_dtype="uint8", zero_points=(0, 131), nhwc=True)
    assert _reductions(zero_point, AVX2, "qnn.conv2d") == [16, 16]


def test_a_conv_whose_weights_cannot_saturate_stays_one_conv():
    sat.install()
    weights = np.random.default_rng(1).integers(-64, 64, (16, 16, 3, 3)).astype("int8")
    mod, _, _ = _conv(weights=weights)
    assert _reductions(mod, AVX512_NO_VNNI, "qnn.conv2d") == [16]
    # on AVX2 the uint8 x int8 NCHW convs left are the seven-bit convs: this one is an int16 conv
    # (tests/unit/relay_ext/lowering/x86/test_seven_bit_conv.py); NHWC stays one conv there
    assert _reductions(mod, AVX2, "qnn.conv2d") == []
    nhwc, _, _ = _conv(weights=weights, nhwc=True)
    assert _reductions(nhwc, AVX2, "qnn.conv2d") == [16]


@needs_host_for(AVX2)
@pytest.mark.parametrize("case", [
    dict(),                                              # uint8 x int8, as PT2E and ONNX Runtime make them
    dict(data_dtype="int8", zero_points=(-5, 0)),        # int8 data: TVM shifts it to uint8 first
    dict(kernel_dtype="uint8", zero_points=(3, 128)),    # uint8 weights: shifted to int8, zero point 0
    dict(kernel_dtype="uint8", zero_points=(0, 131)),    # ... and a nonzero int8 zero point
    dict(channels=(16, 16), groups=16),                  # depthwise
    dict(channels=(16, 16), groups=2),                   # grouped: two convs added
    dict(channels=(3, 8)),                               # a stem: 3 input channels, padded by TVM
    dict(nhwc=True),                                     # NHWC: one conv over twice the channels
    dict(kernel_dtype="uint8", zero_points=(0, 131), nhwc=True),  # NHWC, two convs added
])
@pytest.mark.parametrize("opt_level", [2, 3])  # 3: FoldScaleAxis, which folds constant multiplies into weights
def test_untuned_avx2_conv_is_exact(case, opt_level):
    mod, data, expected = _conv(**case)
    built = compile(mod, {}, AVX2, schedule="default", opt_level=opt_level)
    (out,) = run_module(built, {"data": data})
    assert np.array_equal(out, expected), f"{np.mean(out != expected):.0%} of the outputs differ"


@needs_host_for(AVX2)
def test_weights_bound_as_parameters_are_split_too():
    """A weight that is a parameter when QNN is legalized (bound later) is split with Relay ops."""
    mod, data, expected = _conv(nhwc=True)
    call = mod["main"].body.args[0]  # the conv, under the transpose back to NCHW
    weight = relay.var("weight", shape=call.args[1].data.shape, dtype="int8")
    body = relay.qnn.op.conv2d(call.args[0], weight, *call.args[2:], **{k: call.attrs[k] for k in call.attrs.keys()})
    body = relay.transpose(body, (0, 3, 1, 2))
    var_mod = tvm.IRModule.from_expr(relay.Function(list(mod["main"].params) + [weight], body))
    assert _reductions(var_mod, AVX2, "qnn.conv2d") == [32]
    built = compile(var_mod, {"weight": call.args[1].data}, AVX2, schedule="default", opt_level=2)
    (out,) = run_module(built, {"data": data})
    assert np.array_equal(out, expected)


def test_task_extraction_sees_the_split():
    """MetaSchedule's tasks come from the legalized graph: one conv task, over twice the weights."""
    from tvm import meta_schedule as ms

    sat.install()
    mod, _, _ = _conv(nhwc=True)
    with tvm.transform.PassContext(opt_level=3):
        tasks = ms.relay_integration.extract_tasks(mod, tvm.target.Target(f"{AVX2} -num-cores 2"), {})
    convs = [task for task in tasks if "conv2d" in task.task_name]
    assert len(convs) == 1 and convs[0].weight == 1, [(task.task_name, task.weight) for task in tasks]
    main = convs[0].dispatched[0]["main"]
    weights = [buffer for buffer in main.buffer_map.values() if buffer.dtype == "int8"]
    assert [int(np.prod([int(extent) for extent in b.shape])) for b in weights] == [2 * 16 * 16 * 3 * 3]
