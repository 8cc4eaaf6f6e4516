"""Variant rule sets built from TVM's own defaults, and their bad input."""

import pytest
import tvm
from tvm import meta_schedule as ms

import meta_rules
from meta_rules import ComputeReductionAtConsumer, InlineConstantBlocks, ReverseInlineAfterInlining

TARGETS = {
    "llvm": "llvm -num-cores 2",
    "llvm-vnni": "llvm -mcpu=cascadelake -num-cores 2",
    "llvm-avx512": "llvm -mcpu=skylake-avx512 -num-cores 2",
    "cuda": "cuda -arch=sm_70 -max_threads_per_block=1024 -max_shared_memory_per_block=49152 "
            "-thread_warp_size=32",
    "cuda-tensorcore": "nvidia/nvidia-a100",
}


def _target(name):
    if name == "hexagon":
        return tvm.target.hexagon("v68", num_cores=2)
    return tvm.target.Target(TARGETS[name])


def _tvm_defaults(target):
    space = ms.space_generator.PostOrderApply()
    ms.TuneContext(mod=meta_rules.rule_sets._probe_module(), target=target, space_generator=space)
    return [type(r) for r in space.sch_rules]


def _types(rules):
    return [type(r) for r in rules]


@pytest.mark.parametrize("name", list(TARGETS) + ["hexagon"])
def test_variants_edit_tvm_defaults(name):
    target = _target(name)
    tvm_rules = _tvm_defaults(target)
    assert ms.schedule_rule.InlineConstantScalars in tvm_rules

    upstream = _types(meta_rules.schedule_rules(target, "upstream"))
    assert upstream == tvm_rules

    legacy = _types(meta_rules.schedule_rules(target, "legacy"))
    assert legacy == [t for t in tvm_rules if t is not ms.schedule_rule.InlineConstantScalars]

    ours = _types(meta_rules.schedule_rules(target, "ours"))
    assert ours[0] is ms.schedule_rule.ApplyCustomRule
    assert ours[1] is InlineConstantBlocks
    assert ms.schedule_rule.InlineConstantScalars not in ours
    # the fusion rules come on the targets whose AutoInline reverse-inlines (GPU), nowhere else
    fusion_rules = (ReverseInlineAfterInlining, ComputeReductionAtConsumer)
    gpu = name.startswith("cuda")
    assert [t for t in ours if t in fusion_rules] == (list(fusion_rules) if gpu else [])
    assert [t for t in ours[:1] + ours[2:] if t not in fusion_rules] == legacy
    # before the first AutoInline and the first tiling rule
    assert ours.index(InlineConstantBlocks) < ours.index(ms.schedule_rule.AutoInline)


def test_vnni_defaults_come_from_tvm():
    # TVM picks its x86 VNNI rule set (with MultiLevelTilingWithIntrin) for cascadelake.
    ours = meta_rules.schedule_rules(_target("llvm-vnni"), "ours")
    assert any(isinstance(r, ms.schedule_rule.MultiLevelTilingWithIntrin) for r in ours)
    plain = meta_rules.schedule_rules(_target("llvm"), "ours")
    assert not any(isinstance(r, ms.schedule_rule.MultiLevelTilingWithIntrin) for r in plain)


def test_tensorcore_defaults_for_a100():
    rules = meta_rules.schedule_rules("nvidia/nvidia-a100", "ours")
    assert any(isinstance(r, ms.schedule_rule.MultiLevelTilingTensorCore) for r in rules)


def test_space_generator_carries_the_variant():
    space = meta_rules.space_generator(TARGETS["cuda"], "ours")
    assert isinstance(space, ms.space_generator.PostOrderApply)
    # Once inside the C++ PostOrderApply our Python rule is a PyScheduleRule handle:
    # check what it does instead of its Python class.
    assert isinstance(space.sch_rules[0], ms.schedule_rule.ApplyCustomRule)
    sch = tvm.tir.Schedule(_scalar_constant_consumer())
    space.sch_rules[1].apply(sch, sch.get_block("compile_engine_const"))
    assert "compile_engine_const" not in sch.mod.script()
    assert len(space.postprocs) == len(meta_rules.postprocs(TARGETS["cuda"], "upstream"))
    assert set(type(m) for m in space.mutator_probs) == set(
        type(m) for m in meta_rules.mutator_probs(TARGETS["cuda"]))


def _scalar_constant_consumer():
    from tvm import te

    from meta_rules.testing.te_workloads import scalar_constant

    x = te.placeholder((8,), "int32", name="x")
    const = scalar_constant(2)
    out = te.compute((8,), lambda i: x[i] * const(), name="out")
    return tvm.IRModule({"main": te.create_prim_func([x, out])})


def test_unknown_variant_lists_valid_ones():
    for func in (meta_rules.schedule_rules, meta_rules.postprocs, meta_rules.space_generator):
        with pytest.raises(ValueError, match="ours, upstream, legacy"):
            func("llvm -num-cores 2", "fastest")


@pytest.mark.parametrize("target", ["c", "webgpu"])
def test_target_without_defaults_lists_kinds_with_defaults(target):
    with pytest.raises(ValueError) as info:
        meta_rules.schedule_rules(target, "ours")
    message = str(info.value)
    assert "no default rules" in message and target in message
    for kind in ("llvm", "cuda", "hexagon", "rocm", "vulkan"):
        assert kind in message.split("target kinds with defaults:")[1]
    assert "webgpu" not in message.split("target kinds with defaults:")[1]


def test_invalid_target_string():
    with pytest.raises(ValueError, match="invalid target 'not-a-target'"):
        meta_rules.schedule_rules("not-a-target")


@pytest.mark.parametrize("name", ["llvm", "llvm-vnni", "cuda"])
def test_ours_rejects_flat_layouts_right_after_tvm_rewrites_them(name):
    target = _target(name)
    upstream = _types(meta_rules.postprocs(target, "upstream"))
    ours = _types(meta_rules.postprocs(target, "ours"))
    assert meta_rules.RejectFlatLayoutRewrite not in upstream
    assert meta_rules.RejectFlatLayoutRewrite not in _types(meta_rules.postprocs(target, "legacy"))
    if ms.postproc.RewriteLayout in upstream:  # the CPU targets
        assert ours[ours.index(ms.postproc.RewriteLayout) + 1] is meta_rules.RejectFlatLayoutRewrite
        assert len(ours) == len(upstream) + 1
    else:
        assert meta_rules.RejectFlatLayoutRewrite not in ours


def _names(items):
    """Class names, ours by the class ``@derived_object`` wrapped."""
    return [type(getattr(item, "_inst", item)).__name__ for item in items]


# "ours" for one target of each kind of rule set, in full: what placing the rules must give.
OURS = {
    "llvm -num-cores 2": (
        ["ApplyCustomRule", "InlineConstantBlocks", "AutoInline", "AddRFactor", "MultiLevelTiling",
         "ParallelizeVectorizeUnroll", "RandomComputeLocation"],
        ["DisallowDynamicLoop", "RewriteParallelVectorizeUnroll", "RewriteReductionBlock",
         "RewriteLayout", "RejectFlatLayoutRewrite"]),
    "llvm -mcpu=sapphirerapids -num-cores 2": (
        ["ApplyCustomRule", "InlineConstantBlocks", "AutoInline", "AMXConv", "AddRFactor",
         "MultiLevelTilingWithIntrin", "MultiLevelTiling", "ParallelizeVectorizeUnroll",
         "RandomComputeLocation"],
        ["DisallowDynamicLoop", "RewriteParallelVectorizeUnroll", "RewriteReductionBlock",
         "TensorizeAMXConv", "RewriteTensorize", "RewriteLayout", "RejectFlatLayoutRewrite"]),
    TARGETS["cuda"]: (
        ["ApplyCustomRule", "InlineConstantBlocks", "MultiLevelTiling", "AutoInline",
         "ReverseInlineAfterInlining", "CrossThreadReduction", "ComputeReductionAtConsumer",
         "ParallelizeVectorizeUnroll", "AutoBind"],
        ["DisallowDynamicLoop", "RewriteCooperativeFetch", "RewriteUnboundBlock",
         "RewriteParallelVectorizeUnroll", "RewriteReductionBlock", "VerifyLoweredGPUCode"]),
}


@pytest.mark.parametrize("target", list(OURS))
def test_ours_places_each_rule_where_it_says(target):
    rules, procs, _ = meta_rules.rule_set(target, "ours")
    assert (_names(rules), _names(procs)) == OURS[target]


def test_each_rule_says_for_which_targets_it_applies():
    from meta_rules.rule_sets import OUR_POSTPROCS, OUR_RULES

    cpu, amx, gpu = (tvm.target.Target(t) for t in ("llvm", "llvm -mcpu=sapphirerapids", "vulkan"))
    serves = {type(r._inst).__name__: [r.is_target_available(t) for t in (cpu, amx, gpu)]
              for r in (make() for make in OUR_RULES + OUR_POSTPROCS)}
    assert serves == {
        "InlineConstantBlocks": [True, True, True],
        "AMXConv": [False, True, False],
        "ReverseInlineAfterInlining": [False, False, True],
        "ComputeReductionAtConsumer": [False, False, True],
        "VerifyLoweredGPUCode": [False, False, True],
        "TensorizeAMXConv": [False, True, False],
        "RejectFlatLayoutRewrite": [True, True, False],
    }


class _Rule:
    def is_target_available(self, target):
        return target == "here"


def test_place_puts_a_rule_after_each_default_it_follows_or_instead_of_one_it_replaces():
    from meta_rules.base.placement import Placement, place

    class After(_Rule, Placement):
        def follows(self, default):
            return default == "a"

    class Instead(_Rule, Placement):
        def replaces(self, default):
            return default == "b"

    class First(_Rule, Placement):
        leads_otherwise = True

    def names(items):
        return [type(i).__name__ if isinstance(i, _Rule) else i for i in items]

    assert names(place(["a", "b", "a"], [After, Instead, First], "here")) == \
        ["First", "a", "After", "Instead", "a", "After"]
    assert place(["a", "b"], [After, Instead, First], "elsewhere") == ["a", "b"]
    placed = place(["a", "x", "a"], [After], "here")
    assert placed[1] is not placed[4]  # a fresh rule at each place
