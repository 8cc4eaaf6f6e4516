"""The fusion measure, and the seed workload's design spaces under each variant."""

import numpy as np
import pytest
import tvm
from tvm import meta_schedule as ms
from tvm import te

import meta_rules
from meta_rules.measure import fusion
from meta_rules.testing.te_workloads import quantized_conv2d_nhwc, quantized_dense

A100 = "nvidia/nvidia-a100"  # sm_80: TVM picks its cuda-tensorcore defaults
PLAIN_CUDA = ("cuda -arch=sm_70 -max_threads_per_block=1024 -max_shared_memory_per_block=49152 "
              "-thread_warp_size=32")  # below sm_75: TVM's plain cuda defaults


def test_tensorcore_and_plain_cuda_defaults_are_what_we_think():
    a100 = meta_rules.schedule_rules(A100, "upstream")
    plain = meta_rules.schedule_rules(PLAIN_CUDA, "upstream")
    assert any(isinstance(r, ms.schedule_rule.MultiLevelTilingTensorCore) for r in a100)
    assert not any(isinstance(r, ms.schedule_rule.MultiLevelTilingTensorCore) for r in plain)


@pytest.mark.parametrize("target", [A100, PLAIN_CUDA])
@pytest.mark.parametrize("workload", [quantized_conv2d_nhwc, quantized_dense])
def test_seed_epilogue_fuses_under_ours_and_upstream_not_legacy(target, workload):
    mod = workload()
    counts = {v: fusion.design_space_intermediates(mod, target, v, rand_state=1) for v in meta_rules.VARIANTS}
    assert all(counts[v] for v in counts), counts  # every variant produced design spaces
    assert max(counts["legacy"]) >= 1, counts
    assert max(counts["ours"]) == 0, counts
    assert max(counts["upstream"]) == 0, counts


def test_legacy_intermediate_is_the_accumulator():
    spaces = fusion.design_spaces(quantized_conv2d_nhwc(), A100, "legacy", rand_state=1)
    assert {name for s in spaces for name in fusion.global_intermediates(s.mod)} == {"conv2d_nhwc"}


def test_global_intermediates_of_unscheduled_module():
    # Unscheduled, every intermediate is a root-level global buffer.
    names = fusion.global_intermediates(quantized_dense())
    assert set(names) == {"T_matmul_NT", "compile_engine_const", "T_add", "T_requantize", "T_clip"}


def test_global_intermediates_ignore_inlined_and_local_buffers():
    x = te.placeholder((64,), "float32", name="x")
    y = te.compute((64,), lambda i: x[i] * 2.0, name="y")
    z = te.compute((64,), lambda i: y[i] + 1.0, name="z")
    mod = tvm.IRModule({"main": te.create_prim_func([x, z])})
    assert fusion.global_intermediates(mod) == ["y"]

    sch = tvm.tir.Schedule(mod)
    sch.compute_inline(sch.get_block("y"))
    assert fusion.global_intermediates(sch.mod) == []

    sch = tvm.tir.Schedule(mod)
    sch.set_scope(sch.get_block("y"), 0, "local")
    assert fusion.global_intermediates(sch.mod) == []

    sch = tvm.tir.Schedule(mod)  # computed at a loop: a tile, not a round trip
    (i,) = sch.get_loops(sch.get_block("z"))
    outer, _ = sch.split(i, [8, 8])
    sch.compute_at(sch.get_block("y"), outer)
    assert fusion.global_intermediates(sch.mod) == []


# --- numbers: every variant's design spaces still compute the right thing ------------------------

SHAPE = dict(height=6, width=6, in_channels=8, out_channels=8)


def _reference(data, weight, multiplier, shift, zero_point=3):
    """numpy: conv2d NHWC (pad 1), + zero point, q_multiply_shift_per_axis (q=31), clip, uint8."""
    n, h, w, _ = data.shape
    kh, kw, _, o = weight.shape
    padded = np.pad(data.astype(np.int64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    acc = np.zeros((n, h, w, o), np.int64)
    for dy in range(kh):
        for dx in range(kw):
            acc += np.einsum("nhwc,co->nhwo", padded[:, dy:dy + h, dx:dx + w, :],
                             weight[dy, dx].astype(np.int64))
    x = acc + zero_point
    left = np.maximum(shift, 0).astype(np.int64)
    right = np.maximum(-shift, 0).astype(np.int64)
    x = (x << left) * multiplier.astype(np.int64)
    total = right + 31
    x = (x + (np.int64(1) << (total - 1))) >> total
    return np.clip(x.astype(np.int32), 0, 255).astype(np.uint8)


def _inputs(rng):
    data = rng.integers(-128, 128, (1, SHAPE["height"], SHAPE["width"], SHAPE["in_channels"]), dtype=np.int8)
    weight = rng.integers(-128, 128, (3, 3, SHAPE["in_channels"], SHAPE["out_channels"]), dtype=np.int8)
    multiplier = rng.integers(1 << 29, 1 << 30, SHAPE["out_channels"], dtype=np.int32)
    shift = rng.integers(-12, -6, SHAPE["out_channels"], dtype=np.int32)
    return data, weight, multiplier, shift


@pytest.mark.parametrize("variant", meta_rules.VARIANTS)
def test_design_spaces_build_on_llvm_and_match_numpy(variant):
    mod = quantized_conv2d_nhwc(**SHAPE)
    target = tvm.target.Target("llvm -num-cores 2")
    context = ms.TuneContext(mod=mod, target=target,
                             space_generator=meta_rules.space_generator(target, variant),
                             rand_state=7)
    spaces = context.generate_design_space()
    assert len(spaces) >= 2
    data, weight, multiplier, shift = _inputs(np.random.default_rng(0))
    expected = _reference(data, weight, multiplier, shift)
    assert expected.min() == 0 and expected.max() == 255 or len(np.unique(expected)) > 10
    dev = tvm.cpu()
    for sch in spaces:
        sch = sch.copy()
        for postproc in context.space_generator.postprocs:
            assert postproc.apply(sch)
        lib = tvm.build(sch.mod, target=target)
        out = tvm.nd.empty(expected.shape, "uint8", dev)
        lib(*(tvm.nd.array(a, dev) for a in (data, weight, multiplier, shift)), out)
        np.testing.assert_array_equal(out.numpy(), expected)
