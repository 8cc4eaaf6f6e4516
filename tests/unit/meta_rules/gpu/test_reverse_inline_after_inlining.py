"""ReverseInlineAfterInlining: the residual epilogue fuses; what AutoInline refuses stays refused."""

import pytest
import tvm
from tvm import te, tir

import meta_rules
from meta_rules import ReverseInlineAfterInlining
from meta_rules.gpu.reverse_inline_after_inlining import reverse_inline_blocker
from meta_rules.measure import fusion
from meta_rules.testing.fusion_workloads import residual_conv_epilogue

A100 = "nvidia/nvidia-a100"  # cuda-tensorcore rules
PLAIN_CUDA = ("cuda -arch=sm_70 -max_threads_per_block=1024 -max_shared_memory_per_block=49152 "
              "-thread_warp_size=32")
ROCM = "rocm"
VULKAN = "vulkan -max_shared_memory_per_block=32768"


def _names(mod):
    found = []
    tir.stmt_functor.post_order_visit(
        mod["main"].body, lambda n: found.append(n.name_hint) if isinstance(n, tir.Block) else None)
    return found


# --- design spaces: upstream keeps the accumulator in global memory, ours does not ---------------

@pytest.mark.parametrize("layout,target", [("NCHW", PLAIN_CUDA), ("NHWC", A100), ("NCHW", ROCM),
                                           ("NCHW", VULKAN)])
def test_residual_epilogue_fuses_under_ours_only(layout, target):
    mod = residual_conv_epilogue(layout)
    upstream = fusion.design_spaces(mod, target, "upstream", rand_state=1)
    ours = fusion.design_spaces(mod, target, "ours", rand_state=1)
    assert len(ours) == len(upstream) >= 1
    accumulator = f"conv2d_{layout.lower()}"
    assert [fusion.global_intermediates(s.mod) for s in upstream] == [[accumulator]] * len(upstream)
    assert [fusion.global_intermediates(s.mod) for s in ours] == [[]] * len(ours)
    for space in ours:  # the epilogue now lives in the conv's kernel: no T_add block of its own
        assert "T_add" not in _names(space.mod)
        assert any(inst.kind.name == "ReverseComputeInline" for inst in space.trace.insts)


def test_ours_space_replays_from_its_trace():
    # MetaSchedule's search replays design-space traces with new decisions: the rule's step must be
    # in the trace, so that the replayed schedule is the fused one.
    (space,) = fusion.design_spaces(residual_conv_epilogue(), PLAIN_CUDA, "ours", rand_state=1)
    replayed = tir.Schedule(residual_conv_epilogue())
    space.trace.apply_to_schedule(replayed, remove_postproc=False)
    tvm.ir.assert_structural_equal(replayed.mod, space.mod)


# --- the rule on hand-made schedules ---------------------------------------------------------------

def _producer_consumer(reads=lambda y, i: y[i] + 1, y_is_output=False):
    """x -> y = x * 3 (spatial) -> z = reads(y, i); the function returns z (and y if asked)."""
    x = te.placeholder((16,), "int32", name="x")
    y = te.compute((16,), lambda i: x[i] * 3, name="y")
    z = te.compute((16,), lambda i: reads(y, i), name="z")
    return tvm.IRModule({"main": te.create_prim_func([x, y, z] if y_is_output else [x, z])})


def _apply(mod, block="z", annotate=None):
    sch = tir.Schedule(mod)
    if annotate:
        sch.annotate(sch.get_block(annotate[0]), annotate[1], annotate[2])
    before = sch.mod
    (result,) = ReverseInlineAfterInlining().apply(sch, sch.get_block(block))
    return before, result


def test_single_producer_taken():
    before, result = _apply(_producer_consumer())
    assert "z" in _names(before) and "z" not in _names(result.mod)


def test_block_left_after_chains_are_inlined_is_taken():
    # The residual add: two producers when AutoInline visits it, one after the chains are inlined.
    x = te.placeholder((16,), "int32", name="x")
    r = te.placeholder((16,), "int32", name="r")
    acc = te.compute((16,), lambda i: x[i] * 3, name="acc")
    left = te.compute((16,), lambda i: acc[i] - 5, name="left")
    right = te.compute((16,), lambda i: r[i] * 2, name="right")
    add = te.compute((16,), lambda i: left[i] + right[i], name="add")
    sch = tir.Schedule(tvm.IRModule({"main": te.create_prim_func([x, r, add])}))
    rule = ReverseInlineAfterInlining()
    rule.apply(sch, sch.get_block("add"))
    assert "add" in _names(sch.mod)           # two producers: refused, as AutoInline refuses it
    assert reverse_inline_blocker(sch, sch.get_sref(sch.get_block("add"))) == "2 producers"
    sch.compute_inline(sch.get_block("left"))
    sch.compute_inline(sch.get_block("right"))
    rule.apply(sch, sch.get_block("add"))
    assert _names(sch.mod) == ["acc", "root"]  # the second chance: add lives in acc now


def test_producer_read_at_two_points_left_alone():
    before, result = _apply(_producer_consumer(lambda y, i: y[i] + y[tvm.tir.min(i + 1, 15)]))
    tvm.ir.assert_structural_equal(result.mod, before)


def test_producer_that_is_an_output_block_left_alone():
    before, result = _apply(_producer_consumer(y_is_output=True))
    tvm.ir.assert_structural_equal(result.mod, before)


@pytest.mark.parametrize("annotation,reason", [
    (("y", "meta_schedule.auto_tensorize", "wmma_sync_16x16x16_s8s8s32"),
     "its producer is tensorized"),
    (("z", "meta_schedule.inline_rule", "disable"), "inlining disabled by annotation"),
])
def test_annotated_blocks_left_alone(annotation, reason):
    before, result = _apply(_producer_consumer(), annotate=annotation)
    tvm.ir.assert_structural_equal(result.mod, before)
    assert reverse_inline_blocker(result, result.get_sref(result.get_block("z"))) == reason


def test_reduction_block_left_alone():
    x = te.placeholder((16, 4), "int32", name="x")
    y = te.compute((16, 4), lambda i, j: x[i, j] + 1, name="y")
    k = te.reduce_axis((0, 4), name="k")
    z = te.compute((16,), lambda i: te.sum(y[i, k], axis=k), name="z")
    sch = tir.Schedule(tvm.IRModule({"main": te.create_prim_func([x, z])}))
    before = sch.mod
    ReverseInlineAfterInlining().apply(sch, sch.get_block("z"))
    tvm.ir.assert_structural_equal(sch.mod, before)
    assert reverse_inline_blocker(sch, sch.get_sref(sch.get_block("z"))) == "not a spatial block"


def test_inlined_block_is_skipped():
    sch = tir.Schedule(_producer_consumer())
    z = sch.get_block("z")
    sch.reverse_compute_inline(z)
    after = sch.mod
    ReverseInlineAfterInlining().apply(sch, z)  # the block RV no longer resolves: nothing to do
    tvm.ir.assert_structural_equal(sch.mod, after)


# --- where it sits ----------------------------------------------------------------------------------

def test_placed_right_after_autoinline_on_gpu_only():
    from tvm import meta_schedule as ms

    for target in (PLAIN_CUDA, A100, ROCM, VULKAN, "metal", "opencl"):
        rules = meta_rules.schedule_rules(target, "ours")
        kinds = [type(r) for r in rules]
        at = kinds.index(ReverseInlineAfterInlining)
        assert kinds[at - 1] is ms.schedule_rule.AutoInline, target
        assert kinds.count(ReverseInlineAfterInlining) == 1
    for target in ("llvm -num-cores 2", "llvm -mcpu=cascadelake -num-cores 2"):
        assert ReverseInlineAfterInlining not in [type(r) for r in meta_rules.schedule_rules(target)]


@pytest.mark.parametrize("workload", ["residual", "pool"])
def test_rules_survive_clone(workload):
    # A tune clones its TuneContext (search threads, task scheduler): each rule's clone must be a
    # TVM object again, or PostOrderApply's clone crashes the process.
    from tvm import meta_schedule as ms

    from meta_rules.testing.fusion_workloads import avg_pool_cast

    mod = residual_conv_epilogue() if workload == "residual" else avg_pool_cast()
    context = ms.TuneContext(mod=mod, target=PLAIN_CUDA, rand_state=1,
                             space_generator=meta_rules.space_generator(PLAIN_CUDA, "ours"))
    clone = context.clone()
    assert [fusion.global_intermediates(s.mod) for s in clone.generate_design_space()] \
        == [[] for _ in context.generate_design_space()]
