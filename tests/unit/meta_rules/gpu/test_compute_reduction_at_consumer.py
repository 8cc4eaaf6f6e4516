"""ComputeReductionAtConsumer: the pool's sum fuses into its cast; recomputation never happens."""

import pytest
import tvm
from tvm import te, tir

import meta_rules
from meta_rules import ComputeReductionAtConsumer
from meta_rules.gpu.compute_reduction_at_consumer import reduction_fusion_blocker
from meta_rules.measure import fusion
from meta_rules.testing.fusion_workloads import avg_pool_cast

A100 = "nvidia/nvidia-a100"
PLAIN_CUDA = ("cuda -arch=sm_70 -max_threads_per_block=1024 -max_shared_memory_per_block=49152 "
              "-thread_warp_size=32")
VULKAN = "vulkan -max_shared_memory_per_block=32768"


@pytest.mark.parametrize("layout,target", [("NCHW", PLAIN_CUDA), ("NHWC", A100), ("NCHW", "rocm"),
                                           ("NHWC", VULKAN)])
def test_pool_sum_fuses_under_ours_only(layout, target):
    mod = avg_pool_cast(layout)
    upstream = fusion.design_spaces(mod, target, "upstream", rand_state=1)
    ours = fusion.design_spaces(mod, target, "ours", rand_state=1)
    assert len(ours) == len(upstream) == 2  # CrossThreadReduction: fused across threads, and not
    assert sorted(fusion.global_intermediates(s.mod) for s in upstream) == [[], ["pool_sum"]]
    assert [fusion.global_intermediates(s.mod) for s in ours] == [[], []]
    scopes = sorted(buf.scope() for s in ours for buf in s.mod["main"].body.block.alloc_buffers)
    assert scopes == ["local", "shared"]  # ours' second space keeps the sum in a register


def _reduction_then(consume, shape=(16,), outputs_reduction=False):
    """red[i] = sum_k x[i, k]; out = consume(red, index) over ``shape``."""
    x = te.placeholder((16, 8), "int32", name="x")
    k = te.reduce_axis((0, 8), name="k")
    red = te.compute((16,), lambda i: te.sum(x[i, k], axis=k), name="red")
    out = te.compute(shape, lambda *i: consume(red, *i), name="out")
    return tvm.IRModule({"main": te.create_prim_func([x, red, out] if outputs_reduction
                                                     else [x, out])})


def _apply(mod):
    """The module before, the schedule the rule returns, and the reason it gave to leave it."""
    sch = tir.Schedule(mod)
    block = sch.get_block("red")
    reason = reduction_fusion_blocker(sch, block, sch.get_sref(block))
    (result,) = ComputeReductionAtConsumer().apply(sch, block)
    return mod, result, reason


def test_elementwise_consumer_gets_the_reduction_in_a_local_buffer():
    before, result, reason = _apply(_reduction_then(lambda red, i: red[i] * 2))
    assert reason is None
    assert fusion.global_intermediates(before) == ["red"]
    assert fusion.global_intermediates(result.mod) == []
    (loop,) = result.get_loops(result.get_block("out"))
    red_loops = result.get_loops(result.get_block("red"))  # the consumer's, a unit one, k
    assert [int(result.get(lp).extent) for lp in red_loops] == [16, 1, 8]
    assert result.get(red_loops[0]).same_as(result.get(loop))
    assert [b.scope() for b in result.mod["main"].body.block.alloc_buffers] == ["local"]


@pytest.mark.parametrize("consume,shape,why", [
    (lambda red, i: red[i] + red[tvm.tir.min(i + 1, 15)], (16,),
     "its consumer reads it at several points"),
    (lambda red, i, j: red[i] * j, (16, 4), "its consumer reads some element more than once"),
    (lambda red, i: red[i // 2], (16,), "its consumer reads some element more than once"),
])
def test_consumers_that_would_recompute_are_left_alone(consume, shape, why):
    before, result, reason = _apply(_reduction_then(consume, shape))
    assert reason == why
    tvm.ir.assert_structural_equal(result.mod, before)


def test_output_reduction_left_alone():
    before, result, reason = _apply(_reduction_then(lambda red, i: red[i] * 2,
                                                    outputs_reduction=True))
    assert reason == "an output block"
    tvm.ir.assert_structural_equal(result.mod, before)


def test_two_consumers_left_alone():
    x = te.placeholder((16, 8), "int32", name="x")
    k = te.reduce_axis((0, 8), name="k")
    red = te.compute((16,), lambda i: te.sum(x[i, k], axis=k), name="red")
    a = te.compute((16,), lambda i: red[i] + 1, name="a")
    b = te.compute((16,), lambda i: red[i] * 2, name="b")
    before, result, reason = _apply(tvm.IRModule({"main": te.create_prim_func([x, a, b])}))
    assert reason == "2 consumers"
    tvm.ir.assert_structural_equal(result.mod, before)


def test_reduction_already_moved_left_alone():
    sch = tir.Schedule(_reduction_then(lambda red, i: red[i] * 2))
    (loop,) = sch.get_loops(sch.get_block("out"))
    outer, _ = sch.split(loop, [4, 4])
    sch.compute_at(sch.get_block("red"), outer)  # serial, unannotated, but the consumer's loop
    before = sch.mod
    (result,) = ComputeReductionAtConsumer().apply(sch, sch.get_block("red"))
    tvm.ir.assert_structural_equal(result.mod, before)


def test_spatial_block_left_alone():
    x = te.placeholder((16,), "int32", name="x")
    y = te.compute((16,), lambda i: x[i] + 1, name="red")  # named like the reduction: name is moot
    z = te.compute((16,), lambda i: y[i] * 2, name="z")
    before, result, reason = _apply(tvm.IRModule({"main": te.create_prim_func([x, z])}))
    assert reason == "not a reduction"
    tvm.ir.assert_structural_equal(result.mod, before)


def test_placed_right_after_cross_thread_reduction_on_gpu_only():
    from tvm import meta_schedule as ms

    for target in (PLAIN_CUDA, A100, "rocm", VULKAN, "metal", "opencl"):
        kinds = [type(r) for r in meta_rules.schedule_rules(target, "ours")]
        at = kinds.index(ComputeReductionAtConsumer)
        assert kinds[at - 1] is ms.schedule_rule.CrossThreadReduction, target
    for variant in ("upstream", "legacy"):
        assert ComputeReductionAtConsumer not in [
            type(r) for r in meta_rules.schedule_rules(PLAIN_CUDA, variant)]
    assert ComputeReductionAtConsumer not in [
        type(r) for r in meta_rules.schedule_rules("llvm -num-cores 2", "ours")]
