"""relay_ext/lowering/x86/seven_bit_conv.py: uint8 x int8 convs exact on AVX2 with ``vpmaddubsw``.

The conv splits each activation in its low 7 bits (every input, ``vpmaddubsw``) and its high
bit (per tile and channel block, only where a flag says a value above 127 is read). The tests
check the kernel against numpy for every share of values above 127 (none, a few, half, all),
the flags, which targets and modules take it, and that a Relay build of a TorchScript model's
conv uses it and is exact.
"""

import numpy as np
import pytest
import tvm
from tvm import relay, te

from relay_ext.build import compile
from relay_ext.frontend.models import SEVEN_BIT_ACTIVATIONS
from relay_ext.lowering.x86 import saturation_free_int8 as sat
from relay_ext.lowering.x86 import seven_bit_conv as seven
from relay_ext.measure.run import run_module
from relay_ext.schedules.topi_only import topi_only
from helpers import needs_host_for

AVX2 = "llvm -mcpu=core-avx2"
AVX2_CORES = f"{AVX2} -num-cores 2"


def _numpy_conv(data: np.ndarray, weights: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """The exact conv of NCHW{c}c data and OIHW{c/4}i16o4i weights, in the output's NCHW16c."""
    batch, blocks, height, width, ic_bn = data.shape
    oc_chunks, _, kernel_h, kernel_w, _, oc_bn, _ = weights.shape
    x = data.transpose(0, 1, 4, 2, 3).reshape(batch, blocks * ic_bn, height, width).astype(np.int64)
    w = weights.transpose(0, 5, 1, 4, 6, 2, 3).reshape(oc_chunks * oc_bn, blocks * ic_bn, kernel_h,
                                                       kernel_w).astype(np.int64)
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out_h, out_w = (x.shape[2] - kernel_h) // stride + 1, (x.shape[3] - kernel_w) // stride + 1
    out = np.zeros((batch, w.shape[0], out_h, out_w), np.int64)
    for i in range(kernel_h):
        for j in range(kernel_w):
            window = x[:, :, i:i + stride * (out_h - 1) + 1:stride, j:j + stride * (out_w - 1) + 1:stride]
            out += np.einsum("nchw,oc->nohw", window, w[:, :, i, j])
    return out.reshape(batch, oc_chunks, oc_bn, out_h, out_w).transpose(0, 1, 3, 4, 2)


def _inputs(data_shape, weight_shape, above_127: float, seed: int = 0):
    """7-bit data with a share ``above_127`` of values in 128..255, and full-range int8 weights
    (which saturate ``vpmaddubsw`` with any value above 127)."""
    generator = np.random.default_rng(seed)
    data = generator.integers(0, 128, data_shape).astype("uint8")
    high = generator.random(data_shape) < above_127
    data[high] = generator.integers(128, 256, int(high.sum()))
    weights = generator.integers(-128, 128, weight_shape).astype("int8")
    return data, weights


@needs_host_for(AVX2)
@pytest.mark.parametrize("in_channels, out_channels, size, kernel, stride, ic_bn", [
    (64, 32, 14, 1, 1, 16),   # 1x1
    (32, 32, 14, 3, 1, 16),   # 3x3, padded
    (32, 32, 14, 3, 2, 16),   # 3x3, stride 2
    (64, 32, 16, 1, 2, 16),   # 1x1, stride 2
    (4, 16, 20, 7, 2, 4),     # a stem: 4-channel blocks, 7x7 stride 2
])
@pytest.mark.parametrize("above_127", [0.0, 0.001, 0.5, 1.0])
def test_the_conv_is_exact_whatever_share_of_its_inputs_is_above_127(
        in_channels, out_channels, size, kernel, stride, ic_bn, above_127):
    data_t = te.placeholder((1, in_channels // ic_bn, size, size, ic_bn), "uint8", name="data")
    weights_t = te.placeholder((out_channels // 16, in_channels // ic_bn, kernel, kernel, ic_bn // 4, 16, 4),
                               "int8", name="weights")
    target = tvm.target.Target(AVX2_CORES)
    with target:
        out = seven.conv2d_nchwc_seven_bit(data_t, weights_t, (stride, stride), (kernel // 2, kernel // 2),
                                           (1, 1), "", "")
        func = tvm.build(seven.schedule_conv2d_nchwc_seven_bit([out]), [data_t, weights_t, out], target)
    assert "vpmaddubsw" in func.get_source("asm")
    data, weights = _inputs([int(x) for x in data_t.shape], [int(x) for x in weights_t.shape], above_127)
    result = tvm.nd.empty([int(x) for x in out.shape], "int32")
    func(tvm.nd.array(data), tvm.nd.array(weights), result)
    expected = _numpy_conv(data, weights, stride, kernel // 2)
    assert np.array_equal(result.numpy(), expected), f"{np.mean(result.numpy() != expected):.1%} differ"


@needs_host_for(AVX2)
def test_an_nchw_output_fused_in_is_exact_too():
    """A conv whose fused epilogue ends in a layout transform to NCHW (4 output axes)."""
    data_t = te.placeholder((1, 2, 9, 9, 16), "uint8", name="data")
    weights_t = te.placeholder((2, 2, 3, 3, 4, 16, 4), "int8", name="weights")
    target = tvm.target.Target(AVX2_CORES)
    with target:
        conv = seven.conv2d_nchwc_seven_bit(data_t, weights_t, (2, 2), (1, 1), (1, 1), "", "")
        out = te.compute((1, 32, 5, 5), lambda n, c, h, w: conv[n, c // 16, h, w, c % 16] + 1,
                         name="to_nchw", tag="injective")
        func = tvm.build(seven.schedule_conv2d_nchwc_seven_bit([out]), [data_t, weights_t, out], target)
    data, weights = _inputs((1, 2, 9, 9, 16), (2, 2, 3, 3, 4, 16, 4), above_127=0.01)
    result = tvm.nd.empty((1, 32, 5, 5), "int32")
    func(tvm.nd.array(data), tvm.nd.array(weights), result)
    expected = _numpy_conv(data, weights, 2, 1).transpose(0, 1, 4, 2, 3).reshape(1, 32, 5, 5) + 1
    assert np.array_equal(result.numpy(), expected)


def test_the_flags_mark_each_output_pixel_whose_window_reads_a_value_above_127():
    data = np.zeros((1, 2, 9, 9, 16), "uint8")
    data[0, 1, 4, 6, 3] = 200  # one value above 127, in channel block 1
    data[0, 0, 0, 0, 5] = 127  # 127 has no high bit
    placeholder = te.placeholder(data.shape, "uint8", name="data")
    flags = seven.flags(placeholder, 4, 4, (3, 3), (2, 2))
    schedule = te.create_schedule(flags.op)
    func = tvm.build(schedule, [placeholder, flags], "llvm")
    result = tvm.nd.empty((1, 2, 4, 4), "uint8")
    func(tvm.nd.array(data), result)
    expected = np.zeros((1, 2, 4, 4), "uint8")
    # output pixel (oh, ow) reads input rows 2*oh..2*oh+2 and columns 2*ow..2*ow+2
    for oh in range(4):
        for ow in range(4):
            expected[0, 1, oh, ow] = 2 * oh <= 4 <= 2 * oh + 2 and 2 * ow <= 6 <= 2 * ow + 2
    assert np.array_equal(result.numpy(), expected)


@pytest.mark.parametrize("target, served", [
    (AVX2, True), ("llvm -mcpu=znver2", True),
    ("llvm -mcpu=skylake-avx512", False),   # AVX-512BW: its int16 convs take 32 products a vpmaddwd
    ("llvm -mcpu=cascadelake", False),      # VNNI: exact as it is
    ("llvm -mcpu=alderlake", False),        # AVX-VNNI
    ("llvm", False), ("llvm -mtriple=aarch64-linux-gnu", False),
])
def test_it_serves_avx2_targets_without_avx512bw_or_vnni(target, served):
    assert seven.serves(tvm.target.Target(target)) == served


def _qnn_conv(data_dtype: str = "uint8", seed: int = 0, kernel: int = 3, out_channels: int = 32):
    """A qnn.conv2d of full-range int8 weights (they could saturate ``vpmaddubsw``), and the
    exact result of full-range data (half of it above 127) in numpy."""
    generator = np.random.default_rng(seed)
    info = np.iinfo(data_dtype)
    data = generator.integers(info.min, info.max + 1, (1, 32, 8, 8)).astype(data_dtype)
    weights = generator.integers(-128, 128, (out_channels, 32, kernel, kernel)).astype("int8")
    zero_point = 3 if data_dtype == "uint8" else -3
    var = relay.var("data", shape=data.shape, dtype=data_dtype)
    body = relay.qnn.op.conv2d(var, relay.const(weights), relay.const(zero_point), relay.const(0),
                               relay.const(0.5), relay.const(0.25), kernel_size=(kernel, kernel),
                               channels=out_channels, padding=(kernel // 2,) * 2, strides=(2, 2),
                               out_dtype="int32")
    mod = tvm.IRModule.from_expr(relay.Function([var], body))
    x = np.pad(data.astype(np.int64) - zero_point, ((0, 0), (0, 0), (kernel // 2,) * 2, (kernel // 2,) * 2))
    expected = np.zeros((1, out_channels, 4, 4), np.int64)
    for i in range(kernel):
        for j in range(kernel):
            expected += np.einsum("nchw,oc->nohw", x[:, :, i:i + 7:2, j:j + 7:2], weights[:, :, i, j])
    return mod, data, expected


def _conv_dtypes(mod: tvm.IRModule, target: str, seven_bit: bool) -> list:
    """(data dtype, weight dtype) of each conv after QNN's legalization and canonicalization."""
    sat.install()
    with tvm.target.Target(target), seven.activations(seven_bit):
        lowered = relay.qnn.transform.CanonicalizeOps()(relay.transform.InferType()(
            relay.qnn.transform.Legalize()(relay.transform.InferType()(mod))))
    found = []
    relay.analysis.post_order_visit(lowered["main"], lambda e: found.append(
        (e.args[0].checked_type.dtype, e.args[1].checked_type.dtype))
        if isinstance(e, relay.Call) and getattr(e.op, "name", "") == "nn.conv2d" else None)
    return found


def test_only_seven_bit_modules_of_served_targets_keep_uint8_convs():
    mod, _, _ = _qnn_conv()
    assert _conv_dtypes(mod, AVX2, seven_bit=True) == [("uint8", "int8")]
    assert _conv_dtypes(mod, AVX2, seven_bit=False) == [("int16", "int16")]
    assert _conv_dtypes(mod, "llvm -mcpu=skylake-avx512", seven_bit=True) == [("int16", "int16")]
    assert _conv_dtypes(mod, "llvm -mcpu=cascadelake", seven_bit=True) == [("uint8", "int8")]
    int8_data, _, _ = _qnn_conv("int8")  # shifted to uint8 by TVM: about half above 127
    assert _conv_dtypes(int8_data, AVX2, seven_bit=True) == [("int16", "int16")]
    # too few products per input value (32 output channels x 1 tap) for its passes over the input
    narrow, _, _ = _qnn_conv(kernel=1)
    assert not seven.pays((32, 32, 1, 1)) and seven.pays((256, 32, 1, 1)) and seven.pays((32, 8, 3, 3))
    assert _conv_dtypes(narrow, AVX2, seven_bit=True) == [("int16", "int16")]
    # weights that cannot saturate: an int16 conv too where seven-bit convs are compiled (they
    # take every uint8 x int8 conv), the single uint8 conv elsewhere
    small = relay.qnn.op.conv2d(mod["main"].params[0], relay.const(np.ones((32, 32, 3, 3), "int8")),
                                relay.const(3), relay.const(0), relay.const(0.5), relay.const(0.25),
                                kernel_size=(3, 3), channels=32, out_dtype="int32")
    small_mod = tvm.IRModule.from_expr(relay.Function(mod["main"].params, small))
    assert _conv_dtypes(small_mod, AVX2, seven_bit=False) == [("int16", "int16")]
    assert _conv_dtypes(small_mod, "llvm -mcpu=skylake-avx512", seven_bit=False) == [("uint8", "int8")]


@needs_host_for(AVX2)
@pytest.mark.parametrize("kernel, out_channels", [(1, 256), (3, 32)])
def test_a_module_marked_seven_bit_builds_exact_vpmaddubsw_convs(kernel, out_channels):
    mod, data, expected = _qnn_conv(kernel=kernel, out_channels=out_channels)
    outputs = {}
    for marked in (True, False):
        marked_mod = mod.with_attr(SEVEN_BIT_ACTIVATIONS, True) if marked else mod
        built = compile(marked_mod, {}, AVX2_CORES, schedule="default")
        (outputs[marked],) = run_module(built, {"data": data})
        asm = built.lib.get_lib().get_source("asm")
        assert ("vpmaddubsw" in asm) == marked
    assert np.array_equal(outputs[True], expected) and np.array_equal(outputs[False], expected)


@needs_host_for(AVX2)
def test_a_relay_uint8_conv_is_exact_and_a_dilated_one_builds():
    """An ``nn.conv2d`` of uint8 x int8 written in Relay (no QNN legalization in between) on a
    served target: the seven-bit conv, exact on full-range data (TOPI's would saturate); a
    dilated one, which the seven-bit conv does not take, keeps TVM's."""
    generator = np.random.default_rng(3)
    data = generator.integers(0, 256, (1, 16, 9, 9)).astype("uint8")
    weights = generator.integers(-128, 128, (32, 16, 1, 1)).astype("int8")
    var = relay.var("data", shape=data.shape, dtype="uint8")
    conv = relay.nn.conv2d(var, relay.const(weights), kernel_size=(1, 1), channels=32, out_dtype="int32")
    built = compile(tvm.IRModule.from_expr(relay.Function([var], conv)), {}, AVX2_CORES, schedule="default")
    (out,) = run_module(built, {"data": data})
    expected = np.einsum("nchw,oc->nohw", data.astype(np.int64), weights[:, :, 0, 0].astype(np.int64))
    assert np.array_equal(out, expected) and "vpmaddubsw" in built.lib.get_lib().get_source("asm")
    dilated_weights = generator.integers(-8, 8, (32, 16, 3, 3)).astype("int8")
    dilated = relay.nn.conv2d(var, relay.const(dilated_weights), kernel_size=(3, 3), channels=32,
                              dilation=(2, 2), out_dtype="int32")
    built = compile(tvm.IRModule.from_expr(relay.Function([var], dilated)), {}, AVX2_CORES,
                    schedule="default")
    (out,) = run_module(built, {"data": data})
    assert out.shape == (1, 32, 5, 5)


def test_its_tasks_keep_the_topi_schedule():
    data = te.placeholder((1, 2, 8, 8, 16), "uint8", name="data")
    weights = te.placeholder((2, 2, 1, 1, 4, 16, 4), "int8", name="weights")
    with tvm.target.Target(AVX2_CORES):
        out = seven.conv2d_nchwc_seven_bit(data, weights, (1, 1), (0, 0), (1, 1), "", "")
    workload = tvm.IRModule({"main": te.create_prim_func([data, weights, out])})
    assert topi_only(workload).startswith("seven-bit conv")
