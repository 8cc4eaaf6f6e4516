"""relay_ext/lowering/x86/int16_winograd.py and int16_winograd_rewrite.py: exact int8 3x3 convs as
int16 Winograd F(2x2, 3x3).

Every build is compared with the exact sum in numpy (QNN pads with the input zero point); the
rewrite is checked to take the convs it should (uint8 data on ``vpmaddubsw``, int16 pairs) and
to leave the others (strided, small, a VNNI target, weights whose sums could overflow int32).
"""

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_ext.build import compile
from relay_ext.lowering.config import BUILD_OPTIONS
from relay_ext.lowering.prefold import prefold
from relay_ext.lowering.targets import normalize_target
from relay_ext.lowering.x86 import int16_winograd, int16_winograd_rewrite, x86_codegen
from relay_ext.measure.run import run_module
from conftest import AVX2
from helpers import AVX512_NO_VNNI, VNNI, exact_qnn_conv, needs_host_for


def _conv(channels, size, weight_max=127, stride=1, zx=77, zw=0, kernel_dtype="int8", seed=0):
    """A qnn.conv2d 3x3, pad 1 (int32 out) of ``channels`` -> ``channels``: module, input, sum."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (1, channels, size, size)).astype("uint8")
    low, high = (-weight_max, weight_max + 1) if kernel_dtype == "int8" else (0, 256)
    weights = rng.integers(low, high, (channels, channels, 3, 3)).astype(kernel_dtype)
    var = relay.var("data", shape=data.shape, dtype="uint8")
    body = relay.qnn.op.conv2d(var, relay.const(weights), relay.const(zx), relay.const(zw),
                               relay.const(0.5), relay.const(0.25), kernel_size=(3, 3),
                               channels=channels, strides=(stride, stride), padding=(1, 1),
                               out_dtype="int32")
    mod = tvm.IRModule.from_expr(relay.Function([var], body))
    return mod, data, exact_qnn_conv(data, weights, zx, zw, stride, pad=1)


def _winograd_calls(mod: tvm.IRModule, target: str) -> int:
    x86_codegen.install()
    folded = prefold(mod, {}, normalize_target(target), BUILD_OPTIONS)
    found = []
    relay.analysis.post_order_visit(folded["main"], lambda e: found.append(e) if isinstance(
        e, relay.Call) and getattr(e.op, "name", "") == int16_winograd.OP_NAME else None)
    return len(found)


# (channels, size, weight_max, kernel dtype, weight zero point): int8 weights too small to
# saturate vpmaddubsw keep uint8 data; full-range ones take int16 pairs; odd and even sizes; 64
# channels run per row of tiles, 128 each stage over the whole tensor
CASES = [(64, 8, 63, "int8", 0), (64, 7, 127, "int8", 0), (64, 9, 127, "uint8", 131),
         (128, 6, 127, "int8", 0),
         # tile grids widened for the register tile: 13 -> 14 columns (per row of tiles), 5 x 5
         # -> 5 x 6 tiles (all tiles at once)
         (64, 26, 127, "int8", 0), (128, 10, 127, "int8", 0)]


@needs_host_for(AVX2)
@pytest.mark.parametrize("channels, size, weight_max, kernel_dtype, zw", CASES)
def test_the_winograd_conv_is_exact(channels, size, weight_max, kernel_dtype, zw):
    mod, data, expected = _conv(channels, size, weight_max, zw=zw, kernel_dtype=kernel_dtype)
    assert _winograd_calls(mod, AVX2) == 1
    built = compile(mod, {}, AVX2, schedule="default")
    assert int16_winograd.OP_NAME.split(".")[1] in built.lib.get_graph_json()
    (out,) = run_module(built, {"data": data})
    assert np.array_equal(out, expected), f"{np.mean(out != expected):.0%} of the outputs differ"


@needs_host_for(AVX512_NO_VNNI)
def test_the_winograd_conv_is_exact_on_avx512_lanes():
    mod, data, expected = _conv(64, 7)
    assert _winograd_calls(mod, AVX512_NO_VNNI) == 1
    (out,) = run_module(compile(mod, {}, AVX512_NO_VNNI, schedule="default"), {"data": data})
    assert np.array_equal(out, expected)


@needs_host_for(AVX2)
def test_the_no_search_build_keeps_the_winograd_conv_exact():
    """Through MetaSchedule's task extraction, the rule designs and the per-task choice."""
    mod, data, expected = _conv(64, 8)
    built = compile(mod, {}, AVX2, schedule="no-search", threads=2)
    assert int16_winograd.OP_NAME.split(".")[1] in built.lib.get_graph_json()
    (out,) = run_module(built, {"data": data})
    assert np.array_equal(out, expected)


@pytest.mark.parametrize("channels, stride, prefetches", [
    (128, 1, True),   # whole-tensor GEMMs: each reads its weights once, from memory
    (64, 1, False),   # per row of tiles: every row reads all the weights (cache)
    (128, 2, False),  # strided: the direct int16 conv, whose build gained nothing from it
])
def test_only_the_whole_tensor_gemms_prefetch_their_next_weights(channels, stride, prefetches):
    mod, _, _ = _conv(channels, 8, stride=stride)
    asm = compile(mod, {}, AVX2, schedule="default").lib.get_lib().get_source("asm")
    assert ("prefetcht1" in asm) == prefetches


@pytest.mark.parametrize("target, channels, stride, rewritten", [
    (AVX2, 64, 1, 1), (AVX2, 64, 2, 0),  # strided: no F(2x2, 3x3)
    (AVX2, 32, 1, 0),                    # below MIN_CHANNELS
    (VNNI, 64, 1, 0),                    # vpdpbusd multiplies 64 pairs an instruction: direct
    ("llvm -mcpu=nehalem", 64, 1, 0),    # SSE only: no int16 pairs
])
def test_the_rewrite_takes_stride_one_convs_without_vnni_only(target, channels, stride, rewritten):
    mod, _, _ = _conv(channels, 8, stride=stride)
    assert _winograd_calls(mod, target) == rewritten


def test_weights_whose_sums_could_overflow_int32_keep_the_direct_conv():
    extreme = np.full((16, 1024, 3, 3), 255, np.int64)
    assert int16_winograd_rewrite.int32_bound(extreme) > int16_winograd_rewrite.INT32_MAX
    full_range = np.random.default_rng(0).integers(-255, 256, (64, 512, 3, 3))
    assert int16_winograd_rewrite.int32_bound(full_range) < int16_winograd_rewrite.INT32_MAX
    u = int16_winograd_rewrite.transform_weights(np.full((16, 16, 3, 3), -255, np.int64), 8)
    assert u.dtype == np.int16 and u.shape == (16, 2, 8, 8, 2) and np.abs(u).max() == 9 * 255


def test_the_weight_transform_is_four_times_winograds():
    """U' = G' g G'^T with G' = 2G: 4x the textbook transform, in integers."""
    g = np.random.default_rng(1).integers(-128, 128, (16, 2, 3, 3))
    G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    textbook = np.einsum("ai,kcij,bj->abkc", G, g, G).reshape(16, 16, 2)
    packed = int16_winograd_rewrite.transform_weights(g, 8)  # [16, K/8, C/2, 8, 2]
    unpacked = packed.transpose(0, 1, 3, 2, 4).reshape(16, 16, 2)
    assert np.array_equal(unpacked, 4 * textbook)


def test_the_winograd_task_reads_as_the_conv_it_replaces():
    """The op keeps the conv's attributes: the profile's layer pairing and the peak's count of
    multiply-adds see a 3x3 conv of its shape."""
    from relay_ext.latency.layer_pairing import conv_macs, conv_signature
    from relay_ext.lowering.tasks import lowered_tasks

    x86_codegen.install()
    mod, _, _ = _conv(64, 8)
    tasks = lowered_tasks(mod, {}, normalize_target(AVX2), "ours")
    (task,) = [task for task in tasks if "winograd" in task.task_name]
    assert conv_signature(task) == (64, 64, 3, 1, 8, 8)
    assert conv_macs(task) == 64 * 8 * 8 * 9 * 64


def test_a_module_with_the_op_saves_and_loads():
    """The op is registered on import: a prefolded module round-trips through JSON (as copies of
    modules do) in any process that imported quantfuse."""
    x86_codegen.install()
    mod, _, _ = _conv(64, 8)
    folded = prefold(mod, {}, normalize_target(AVX2), BUILD_OPTIONS)
    again = tvm.ir.load_json(tvm.ir.save_json(folded))
    assert tvm.ir.structural_equal(again, folded)
    assert int16_winograd.OP_NAME in again.astext()


@pytest.mark.parametrize("zero_point, taken", [(77, True), (0, True), (-5, False), (300, False)])
def test_int16_data_is_taken_only_as_uint8_minus_a_uint8_zero_point(zero_point, taken):
    """Inputs within +-255 are what the transforms' int16 and int32 bounds assume."""
    x = relay.var("x", shape=(1, 4, 8, 8, 16), dtype="uint8")
    data = relay.subtract(relay.cast(x, "int16"), relay.const(zero_point, "int16"))
    typed = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], data)))
    assert int16_winograd_rewrite._uint8_range(typed["main"].body) is taken  # pylint: disable=protected-access


@pytest.mark.parametrize("low, high, taken", [(0, 255, True), (0, 127, True), (-1, 255, False),
                                              (0, 256, False)])
def test_a_clip_into_the_uint8_range_cast_to_int16_is_taken(low, high, taken):
    """Where no pad separates the conv from the requantize before it, Relay casts the int32
    clip to int16 directly (the cast to uint8 between them dropped)."""
    x = relay.var("x", shape=(1, 4, 8, 8, 16), dtype="int32")
    data = relay.cast(relay.clip(x, low, high), "int16")
    typed = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], data)))
    assert int16_winograd_rewrite._uint8_range(typed["main"].body) is taken  # pylint: disable=protected-access
