"""relay_ext/lowering/x86/int16_pair_conv.py: exact int8 convs and dense without VNNI, on vpmaddwd.

Each build is compared with the exact sum in numpy (QNN pads with the input zero point), and its
code is read: ``vpmaddwd`` from the int16 conv, no ``vpmaddubsw`` (which could saturate).
"""

import re

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_ext.build import compile
from relay_ext.lowering.targets import normalize_target
from relay_ext.lowering.x86 import int16_pair_conv, vnni_conv_schedule, x86_codegen
from relay_ext.measure.run import run_module
from relay_ext.report.layout_transforms import layout_transforms_of_module
from conftest import AVX2
from helpers import AVX512_NO_VNNI, VNNI, exact_qnn_conv, needs_host_for



CONVS = [
    dict(cin=32, cout=64, k=1, size=14),                    # a 1x1 conv between int8 blocks
    dict(cin=64, cout=128, k=1, size=14, stride=2),         # strided 1x1 (ResNet's downsample)
    dict(cin=32, cout=32, k=1, size=15, stride=2),          # strided 1x1, an odd input size
    dict(cin=24, cout=40, k=1, size=7),                     # channels padded to 16 and sliced
    dict(cin=32, cout=32, k=1, size=28),                    # 1x1, both vectors of a block at once
    dict(cin=3, cout=32, k=3, size=16, stride=2, pad=1),    # a stem: 3 input channels
    dict(cin=64, cout=64, k=3, size=14, pad=1),             # 3x3, padding by the zero point
    dict(cin=16, cout=16, k=3, size=7, pad=1, data_dtype="int8", zx=-5),  # int8 data
    dict(cin=32, cout=48, k=3, size=7, pad=1),              # 7 columns: one vector per pass on AVX2
    dict(cin=16, cout=32, k=1, size=7, kernel_dtype="uint8", zw=131),      # a weight zero point
    dict(cin=16, cout=32, k=1, size=7, zw=np.arange(32) % 5 - 2),          # per-channel
]


def _conv_case(cin, cout, k, size, stride=1, pad=0, data_dtype="uint8", kernel_dtype="int8", zx=77,
               zw=0, seed=0, dilation=1):
    generator = np.random.default_rng(seed)
    info_d, info_k = np.iinfo(data_dtype), np.iinfo(kernel_dtype)
    data = generator.integers(info_d.min, info_d.max + 1, (1, cin, size, size)).astype(data_dtype)
    weights = generator.integers(info_k.min, info_k.max + 1, (cout, cin, k, k)).astype(kernel_dtype)
    var = relay.var("data", shape=data.shape, dtype=data_dtype)
    zw_const = relay.const(np.asarray(zw, "int32"))
    body = relay.qnn.op.conv2d(var, relay.const(weights), relay.const(zx), zw_const, relay.const(0.5),
                               relay.const(np.full(cout, 0.25, "float32")) if np.ndim(zw) else relay.const(0.25),
                               kernel_size=(k, k), channels=cout, strides=(stride, stride),
                               padding=(pad, pad), dilation=(dilation, dilation), out_dtype="int32")
    mod = tvm.IRModule.from_expr(relay.Function([var], body))
    return mod, data, exact_qnn_conv(data, weights, zx, zw, stride, pad, dilation)


def _int16_convs(mod: tvm.IRModule, target: str) -> list:
    """The ``nn.conv2d`` calls on int16 operands after QNN's legalization for ``target``."""
    x86_codegen.install()
    with tvm.target.Target(target):
        legal = relay.transform.InferType()(relay.qnn.transform.Legalize()(relay.transform.InferType()(mod)))
    found = []
    relay.analysis.post_order_visit(legal["main"], lambda e: found.append(e) if isinstance(e, relay.Call)
                                    and getattr(e.op, "name", "") == "nn.conv2d"
                                    and e.args[0].checked_type.dtype == "int16" else None)
    return found


@pytest.mark.parametrize("target, int16", [(AVX2, True), (AVX512_NO_VNNI, True),
                                           ("llvm -mcpu=cascadelake", False),
                                           ("llvm -mcpu=nehalem", False)])  # SSE only: the split
def test_a_conv_that_could_saturate_becomes_an_int16_conv_only_without_vnni(target, int16):
    mod, _, _ = _conv_case(**CONVS[0])
    assert len(_int16_convs(mod, target)) == (1 if int16 else 0)


@pytest.mark.parametrize("stride, pad, sliced", [(2, 0, True), (1, 0, False), (2, 1, False)])
def test_a_strided_1x1_conv_reads_its_pixels_sliced_out_at_stride_1(stride, pad, sliced):
    """Without padding, a strided 1x1 int16 conv runs with stride 1 on the pixels it reads,
    sliced out of its widened input; with padding (the sliced pixels would differ) or stride 1
    it keeps its own strides."""
    mod, _, _ = _conv_case(cin=64, cout=128, k=1, size=14, stride=stride, pad=pad)
    (conv,) = _int16_convs(mod, AVX2)
    strides = tuple(int(s) for s in conv.attrs.strides)
    producer = getattr(conv.args[0].op, "name", "")
    assert (strides, producer) == (((1, 1), "strided_slice") if sliced else ((stride, stride), "subtract"))
    if sliced:
        assert [int(s) for s in conv.args[0].attrs.strides] == [2, 2]
        assert [int(e) for e in conv.args[0].checked_type.shape] == [1, 64, 7, 7]


def _explicitly_padded(pad_value: float):
    """CONVS' 3x3 conv (pad 1, input zero point 77) with its padding as an ``nn.pad`` of
    ``pad_value`` in front of an unpadded conv, as TVM's PyTorch importer writes it."""
    mod, data, expected = _conv_case(cin=64, cout=64, k=3, size=14, pad=1)
    call = mod["main"].body
    attrs = {key: call.attrs[key] for key in call.attrs.keys()}
    attrs["padding"] = (0, 0, 0, 0)
    (var,) = mod["main"].params
    padded = relay.nn.pad(var, ((0, 0), (0, 0), (1, 1), (1, 1)), relay.const(pad_value))
    body = relay.qnn.op.conv2d(padded, *call.args[1:], **attrs)
    return tvm.IRModule.from_expr(relay.Function([var], body)), data, expected


@pytest.mark.parametrize("pad_value, folded", [(77.0, True), (0.0, False)])
def test_a_pad_by_the_zero_point_in_front_of_the_conv_is_its_padding(pad_value, folded):
    """A pad with the input zero point is the conv's own padding: the int16 conv pads (with 0,
    after the shift) inside its kernel; a pad of another value stays a pad."""
    mod, _, _ = _explicitly_padded(pad_value)
    (conv,) = _int16_convs(mod, AVX2)
    padding = [int(p) for p in conv.attrs.padding]
    pads = []
    relay.analysis.post_order_visit(conv, lambda e: pads.append(e) if isinstance(e, relay.Call)
                                    and getattr(e.op, "name", "") == "nn.pad" else None)
    assert (padding, len(pads)) == (([1, 1, 1, 1], 0) if folded else ([0, 0, 0, 0], 1))


@needs_host_for(AVX2)
def test_a_conv_whose_pad_was_folded_is_exact():
    mod, data, expected = _explicitly_padded(77.0)
    (out,) = run_module(compile(mod, {}, AVX2, schedule="default"), {"data": data})
    assert np.array_equal(out, expected), f"{np.mean(out != expected):.0%} of the outputs differ"


@needs_host_for(AVX2)
@pytest.mark.parametrize("case", CONVS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()
                                                              if not isinstance(v, np.ndarray)))
def test_untuned_avx2_conv_is_exact_and_multiplies_with_vpmaddwd(case):
    mod, data, expected = _conv_case(**case)
    built = compile(mod, {}, AVX2, schedule="default")
    (out,) = run_module(built, {"data": data})
    assert np.array_equal(out, expected), f"{np.mean(out != expected):.0%} of the outputs differ"
    asm = built.lib.get_lib().get_source("asm")
    assert "vpmaddwd" in asm and "vpmaddubsw" not in asm


@needs_host_for(AVX2)
@pytest.mark.parametrize("cin, cout", [(16, 32), (3, 24)])
def test_a_dilated_conv_is_exact_whether_or_not_its_channels_fit_the_blocks(cin, cout):
    """TVM pads no channels of a dilated conv: 16 -> 32 channels take the int16 NCHWc conv all
    the same, 3 -> 24 (unpadded) TOPI's NCHW conv on int16."""
    mod, data, expected = _conv_case(cin=cin, cout=cout, k=3, size=9, pad=2, dilation=2)
    built = compile(mod, {}, AVX2, schedule="default")
    (out,) = run_module(built, {"data": data})
    assert np.array_equal(out, expected)


@needs_host_for(AVX512_NO_VNNI)
def test_untuned_avx512_conv_without_vnni_is_exact_and_multiplies_with_vpmaddwd():
    mod, data, expected = _conv_case(**CONVS[4])
    built = compile(mod, {}, AVX512_NO_VNNI, schedule="default")
    (out,) = run_module(built, {"data": data})
    assert np.array_equal(out, expected)
    asm = built.lib.get_lib().get_source("asm")
    assert "zmm" in asm and "vpmaddwd" in asm and "vpmaddubsw" not in asm


@needs_host_for(AVX2)
def test_a_dense_runs_as_a_1x1_int16_conv_and_is_exact():
    generator = np.random.default_rng(3)
    data = generator.integers(0, 256, (2, 160)).astype("uint8")
    weights = generator.integers(-128, 128, (100, 160)).astype("int8")
    var = relay.var("data", shape=data.shape, dtype="uint8")
    body = relay.qnn.op.dense(var, relay.const(weights), relay.const(77), relay.const(0), relay.const(0.5),
                              relay.const(0.25), units=100)
    mod = tvm.IRModule.from_expr(relay.Function([var], body))
    assert len(_int16_convs(mod, AVX2)) == 1
    built = compile(mod, {}, AVX2, schedule="default")
    (out,) = run_module(built, {"data": data})
    assert np.array_equal(out, (data.astype(np.int64) - 77) @ weights.T.astype(np.int64))
    assert "vpmaddwd" in built.lib.get_lib().get_source("asm")


@needs_host_for(AVX2)
def test_weights_bound_as_parameters_are_widened_by_relay_ops():
    mod, data, expected = _conv_case(**CONVS[4])
    call = mod["main"].body
    weight = relay.var("weight", shape=call.args[1].data.shape, dtype="int8")
    body = relay.qnn.op.conv2d(call.args[0], weight, *call.args[2:], **{k: call.attrs[k] for k in call.attrs.keys()})
    var_mod = tvm.IRModule.from_expr(relay.Function(list(mod["main"].params) + [weight], body))
    assert len(_int16_convs(var_mod, AVX2)) == 1
    built = compile(var_mod, {"weight": call.args[1].data}, AVX2, schedule="default")
    (out,) = run_module(built, {"data": data})
    assert np.array_equal(out, expected)


def test_two_int16_convs_share_the_int8_block_no_layout_copy_between_them():
    """The int16 conv takes the int8 convs' 16-channel blocks: nothing but the input's and the
    output's layout transform around a chain of two."""
    data = relay.var("data", shape=(1, 32, 14, 14), dtype="uint8")
    generator = np.random.default_rng(0)

    def conv(x, cin, cout):
        w = relay.const(generator.integers(-128, 128, (cout, cin, 1, 1)).astype("int8"))
        y = relay.qnn.op.conv2d(x, w, relay.const(3), relay.const(0), relay.const(0.5), relay.const(0.25),
                                kernel_size=(1, 1), channels=cout)
        return relay.qnn.op.requantize(y, relay.const(0.125), relay.const(0), relay.const(0.5),
                                       relay.const(3), out_dtype="uint8")

    mod = tvm.IRModule.from_expr(relay.Function([data], conv(conv(data, 32, 64), 64, 32)))
    x86_codegen.install()
    count = layout_transforms_of_module(mod, {}, tvm.target.Target(AVX2))
    assert count.between_convs == 0, count.line()
    assert len(_int16_convs(mod, AVX2)) == 2


@pytest.mark.parametrize("columns, lanes, width", [
    (56, 8, 4),      # AVX2: 12 accumulators, 2 vectors of 8 channels per column
    (14, 8, 2),      # 3 does not divide 14
    (7, 8, 1),       # no divisor of 7 between 1 and 6
    (28, 16, 14),    # AVX-512: 24 accumulators of 16 channels
    (112, 16, 14),   # 16 would fit 24 accumulators, but 16 x 64 bytes is TVM's heap size
])
def test_register_tile_fits_the_accumulators_and_the_stack(columns, lanes, width):
    assert int16_pair_conv.register_tile(columns, 16, lanes) == width
    assert width * (16 // lanes) <= int16_pair_conv.ACCUMULATORS[lanes]
    assert width * 16 * 4 < vnni_conv_schedule.STACK_BYTES


@pytest.mark.parametrize("columns, oc_bn, lanes, apart", [
    (7, 16, 8, 7),     # AVX2: 7 accumulators one vector at a time, not 1 column x 2 vectors
    (14, 16, 8, 7),    # 7 against 2 columns x 2 vectors
    (28, 16, 8, 0),    # 4 columns x 2 vectors = 8 together, more than 7 apart
    (56, 16, 8, 0),    # 4 x 2 at once against 8 apart: a tie keeps the vectors together
    (7, 16, 16, 0),    # AVX-512: a channel block is one vector
])
def test_a_channel_block_is_split_into_vectors_only_where_the_tile_grows(columns, oc_bn, lanes, apart):
    assert int16_pair_conv.one_vector_columns(columns, oc_bn, lanes) == apart


@pytest.mark.parametrize("height, width, channels, taps, outside", [
    (56, 56, 256, 1, True),    # ResNet-50's 1x1 convs at 56x56: each row reads all the weights
    (14, 14, 1024, 1, False),  # more channels than pixels: each channel block reads the input
    (14, 14, 64, 9, False),    # 3x3: 576 weights a channel of input
    (7, 7, 48, 1, True),
])
def test_rows_go_outside_the_channel_blocks_where_pixels_outnumber_weights(height, width, channels,
                                                                           taps, outside):
    assert vnni_conv_schedule.rows_outside(height, width, channels, taps) == outside


def test_the_exact_cases_run_in_both_loop_orders():
    """The exactness cases above hold convs in each order of the parallel loop."""
    def out_size(c):
        return (c["size"] + 2 * c.get("pad", 0) - c["k"]) // c.get("stride", 1) + 1

    orders = {vnni_conv_schedule.rows_outside(out_size(c), out_size(c), -(-c["cout"] // 16) * 16,
                                              c["k"] ** 2) for c in CONVS}
    assert orders == {True, False}


def test_pmaddwd_intrinsic_needs_avx2_or_avx512_lanes():
    with pytest.raises(ValueError, match="8 \\(AVX2\\) or 16"):
        int16_pair_conv.pmaddwd_intrinsic(4)


def test_a_target_without_fast_int8_keeps_tvms_own_int16_conv():
    """Plain llvm: TVM's QNN lowering makes int16 convs of its own, which keep TVM's path (the
    int16 intrinsic needs AVX2 or AVX-512BW lanes); the untuned build at opt level 3 is exact."""
    assert not int16_pair_conv.is_int16_conv("int16", "int16", tvm.target.Target("llvm"))
    assert int16_pair_conv.is_int16_conv("int16", "int16", tvm.target.Target(AVX2))
    mod, data, expected = _conv_case(**CONVS[4])
    built = compile(mod, {}, "llvm -num-cores 2", schedule="default")
    (out,) = run_module(built, {"data": data})
    assert np.array_equal(out, expected)


@pytest.mark.parametrize("target, options", [
    (AVX2, list(x86_codegen.INT16_LLVM_OPTIONS)),
    (AVX512_NO_VNNI, list(x86_codegen.INT16_LLVM_OPTIONS)),
    (VNNI, []),                                                    # vpdpbusd: nothing to combine
    ("llvm -mcpu=nehalem -num-cores 2", []),                       # no int16 convs
    (AVX2 + " -cl-opt=-x86-machine-combiner:bool=1", ["-x86-machine-combiner:bool=1"]),  # the user's
    (AVX2 + " -cl-opt=-unroll-threshold:int=50",
     ["-unroll-threshold:int=50", *x86_codegen.INT16_LLVM_OPTIONS]),
])
def test_targets_whose_convs_become_int16_pairs_get_their_llvm_options(target, options):
    assert [str(o) for o in normalize_target(target).attrs.get("cl-opt", [])] == options


def test_a_register_tile_keeps_its_accumulators_in_registers():
    """A 1x1 conv at 28 columns: a tile of 4 columns x 2 vectors, 8 accumulators. Without the
    machine combiner (the normalized AVX2 target) no vector goes to the stack; with it (the
    option set back by the user) its re-associated partial sums spill."""
    mod, _, _ = _conv_case(cin=64, cout=64, k=1, size=28)

    def stack_stores(target: str) -> int:
        asm = compile(mod, {}, target, schedule="default").lib.get_lib().get_source("asm")
        return len(re.findall(r"vmovdq[ua]\s+%ymm\d+, -?\d*\(%rsp\)", asm))

    assert stack_stores(AVX2) == 0
    assert stack_stores(AVX2 + " -cl-opt=-x86-machine-combiner:bool=1") > 0
