"""InlineConstantBlocks and the compute_inline custom rule, applied block by block."""

import pytest
import tvm
from tvm import meta_schedule as ms
from tvm import te, tir

import meta_rules
from meta_rules import InlineConstantBlocks, compute_inline
from meta_rules.testing.te_workloads import scalar_constant


def _consumer_of(const: te.Tensor, shape=(16,)) -> tvm.IRModule:
    x = te.placeholder(shape, "int32", name="x")
    if len(const.shape) == 0:
        out = te.compute(shape, lambda i: x[i] + const(), name="out")
    else:
        out = te.compute(shape, lambda i: x[i] + const[i % const.shape[0]], name="out")
    return tvm.IRModule({"main": te.create_prim_func([x, out])})


def _constant(kind: str) -> te.Tensor:
    if kind == "scalar":
        return scalar_constant(7)
    if kind == "one_element":
        return te.compute((1,), lambda i: tvm.tir.const(7, "int32"), name="T_full")
    if kind == "full16":
        return te.compute((16,), lambda i: tvm.tir.const(7, "int32"), name="T_full")
    if kind == "arange":
        return te.compute((16,), lambda i: i * 2, name="T_arange")
    raise AssertionError(kind)


def _block_names(sch: tir.Schedule):
    names = []
    sch.mod["main"].body  # noqa: B018 - make sure the module is materialised
    tvm.tir.stmt_functor.post_order_visit(
        sch.mod["main"].body,
        lambda n: names.append(n.name_hint) if isinstance(n, tir.Block) else None,
    )
    return names


def _const_block_name(kind: str) -> str:
    return {"scalar": "compile_engine_const", "one_element": "T_full",
            "full16": "T_full", "arange": "T_arange"}[kind]


@pytest.mark.parametrize("kind", ["scalar", "one_element", "full16", "arange"])
def test_ours_inlines_every_read_free_block(kind):
    sch = tir.Schedule(_consumer_of(_constant(kind)))
    name = _const_block_name(kind)
    result = InlineConstantBlocks().apply(sch, sch.get_block(name))
    assert len(result) == 1
    assert name not in _block_names(result[0])
    assert "out" in _block_names(result[0])


@pytest.mark.parametrize("kind,tvm_inlines", [
    ("scalar", True),        # TVM's InlineConstantScalars takes 0-d buffers only ...
    ("one_element", False),  # ... so a (1,) constant,
    ("full16", False),       # a broadcast constant
    ("arange", False),       # and an index-only block stay for it: the difference we add.
])
def test_tvm_inline_constant_scalars_covers_only_0d(kind, tvm_inlines):
    sch = tir.Schedule(_consumer_of(_constant(kind)))
    name = _const_block_name(kind)
    ms.schedule_rule.InlineConstantScalars().apply(sch, sch.get_block(name))
    assert (name not in _block_names(sch)) is tvm_inlines


def test_block_that_reads_a_buffer_is_not_touched():
    x = te.placeholder((16,), "int32", name="x")
    y = te.compute((16,), lambda i: x[i] * 3, name="y")
    out = te.compute((16,), lambda i: y[i] + 1, name="out")
    sch = tir.Schedule(tvm.IRModule({"main": te.create_prim_func([x, out])}))
    before = sch.mod
    InlineConstantBlocks().apply(sch, sch.get_block("y"))
    tvm.ir.assert_structural_equal(sch.mod, before)


def _constant_output_module() -> tvm.IRModule:
    const = te.compute((), lambda: tvm.tir.const(5, "int32"), name="only_const")
    return tvm.IRModule({"main": te.create_prim_func([const])})


def test_output_constant_block_left_alone_by_both_rules():
    mod = _constant_output_module()
    for apply in (InlineConstantBlocks().apply, compute_inline):
        sch = tir.Schedule(mod)
        result = apply(sch, sch.get_block("only_const"))  # must not raise
        assert len(result) == 1
        tvm.ir.assert_structural_equal(result[0].mod, mod)


def test_custom_rule_returns_schedule_unchanged_when_compute_inline_refuses():
    # A read-free block with two consumers that is a reduction cannot be compute-inlined.
    x = te.placeholder((16,), "int32", name="x")
    k = te.reduce_axis((0, 4), name="k")
    red = te.compute((16,), lambda i: te.sum(tvm.tir.const(1, "int32") + k, axis=k), name="red")
    out = te.compute((16,), lambda i: x[i] + red[i], name="out")
    mod = tvm.IRModule({"main": te.create_prim_func([x, out])})
    sch = tir.Schedule(mod)
    result = compute_inline(sch, sch.get_block("red"))
    assert len(result) == 1
    tvm.ir.assert_structural_equal(result[0].mod, mod)
    sch = tir.Schedule(mod)
    tvm.ir.assert_structural_equal(InlineConstantBlocks().apply(sch, sch.get_block("red"))[0].mod, mod)


def _annotated_constant_module() -> tvm.IRModule:
    const = te.compute((), lambda: tvm.tir.const(3, "int32"), name="c",
                       attrs={"schedule_rule": "compute_inline"})
    x = te.placeholder((16,), "int32", name="x")
    out = te.compute((16,), lambda i: x[i] + const(), name="out")
    return tvm.IRModule({"main": te.create_prim_func([x, out])})


@pytest.mark.parametrize("target", ["llvm", "cuda", "rocm", "vulkan", "metal", "opencl", "webgpu"])
def test_annotated_block_inlined_through_apply_custom_rule(target):
    space = ms.space_generator.PostOrderApply(
        sch_rules=[ms.schedule_rule.ApplyCustomRule()], postprocs=[], mutator_probs={}
    )
    context = ms.TuneContext(mod=_annotated_constant_module(), target=target,
                             space_generator=space, rand_state=0)
    (sch,) = context.generate_design_space()
    assert "c" not in _block_names(sch)
    assert "out" in _block_names(sch)


REQUIRED_KEYS = ["generic", "cpu", "gpu", "cuda", "rocm", "vulkan", "metal", "opencl", "webgpu",
                 "nvptx", "hexagon", "arm_cpu"]


@pytest.mark.parametrize("key", REQUIRED_KEYS)
def test_registered_under_every_required_key(key):
    assert tvm.get_global_func(f"meta_schedule.{key}.compute_inline", allow_missing=True) is not None


def test_every_key_of_tvm_target_kinds_is_registered():
    for key in meta_rules.base.custom_rules.target_kind_keys():
        assert tvm.get_global_func(f"meta_schedule.{key}.compute_inline", allow_missing=True), key


def test_registration_is_idempotent_and_never_replaces_a_foreign_function():
    calls = []

    def foreign(sch, block):
        calls.append(block)
        return [sch]

    tvm.register_func("meta_schedule.quantfuse_test_key.compute_inline", foreign)
    registered = meta_rules.register_compute_inline(extra_keys=["quantfuse_test_key"])
    assert registered == []  # everything was already there: ours from import, the foreign one
    func = tvm.get_global_func("meta_schedule.quantfuse_test_key.compute_inline")
    sch = tir.Schedule(_annotated_constant_module())
    func(sch, sch.get_block("c"))
    assert len(calls) == 1  # still the foreign function


def test_import_prints_nothing():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "import meta_rules"], capture_output=True, text=True,
                          check=True)
    assert proc.stdout == "" and proc.stderr == ""
