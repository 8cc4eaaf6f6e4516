"""The ``inline_constants`` TE->TIR converter, ``relay_ext.pass_config`` and the TVM patch.

Quantized tasks are extracted from a small QNN Relay graph built with ``relay.qnn.op`` through
TVM's own extraction with our pass config, so the converter is reached the way TVM reaches it.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import tvm
from tvm import meta_schedule as ms
from tvm import relay, te, tir, topi

import relay_ext
from meta_rules.measure import fusion
from relay_ext import pass_config
from relay_ext.lowering import tir_converter as conv
from relay_ext.lowering.clamp_in_float import clamp_in_float
from relay_ext.lowering.inline_vector_lets import inline_vector_lets
from relay_ext.lowering.x86.prefetch_next_weights import prefetch_next_weights
from relay_ext.lowering.x86.round_and_convert import round_and_convert
from relay_ext.lowering.zero_based_loops import zero_based_loops

TARGETS = ["llvm -num-cores 2", "nvidia/nvidia-a100"]
ANNOTATION = ("schedule_rule", "compute_inline")
PATCH = Path(relay_ext.__file__).parent / "lowering" / "patches" / "te_compiler_cache.patch"


# --- models and helpers ---------------------------------------------------------------------------


def qnn_model() -> tvm.IRModule:
    """qnn.conv2d + bias + requantize + add + clip + cast, then qnn.dense + requantize."""
    rng = np.random.RandomState(0)
    data = relay.var("data", shape=(1, 8, 8, 8), dtype="uint8")
    weight = relay.const(rng.randint(-127, 127, (16, 8, 3, 3)).astype("int8"))
    conv = relay.qnn.op.conv2d(
        data, weight, relay.const(3), relay.const(0), relay.const(0.05), relay.const(0.02),
        kernel_size=(3, 3), channels=16, padding=(1, 1),
    )
    conv = relay.nn.bias_add(conv, relay.const(np.arange(16, dtype="int32")))
    conv = relay.qnn.op.requantize(
        conv, relay.const(0.001), relay.const(0), relay.const(0.1), relay.const(5), out_dtype="int32"
    )
    act = relay.cast(relay.clip(relay.add(conv, relay.const(7)), 0, 255), "uint8")
    flat = relay.reshape(act, (1, -1))
    dense_weight = relay.const(rng.randint(-127, 127, (10, 1024)).astype("int8"))
    dense = relay.qnn.op.dense(
        flat, dense_weight, relay.const(5), relay.const(0), relay.const(0.1), relay.const(0.02),
        units=10,
    )
    out = relay.qnn.op.requantize(
        dense, relay.const(0.002), relay.const(0), relay.const(0.2), relay.const(2), out_dtype="int8"
    )
    return tvm.IRModule.from_expr(relay.Function([data], out))


def float_model() -> tvm.IRModule:
    """A float conv + bias + relu + dense with no scalar constant."""
    rng = np.random.RandomState(0)
    data = relay.var("data", shape=(1, 8, 8, 8), dtype="float32")
    conv = relay.nn.conv2d(data, relay.const(rng.rand(16, 8, 3, 3).astype("float32")),
                           kernel_size=(3, 3), channels=16, padding=(1, 1))
    conv = relay.nn.relu(relay.nn.bias_add(conv, relay.const(rng.rand(16).astype("float32"))))
    out = relay.nn.dense(relay.reshape(conv, (1, -1)),
                         relay.const(rng.rand(10, 1024).astype("float32")))
    return tvm.IRModule.from_expr(relay.Function([data], out))


def extract(mod: tvm.IRModule, target: str, variant: str) -> Dict[str, tir.PrimFunc]:
    tasks = ms.relay_integration.extract_tasks(mod, target, {}, pass_config=pass_config(variant))
    return {task.task_name: task.dispatched[0]["main"] for task in tasks}


def blocks(func: tir.PrimFunc) -> List[tir.Block]:
    found: List[tir.Block] = []
    tir.stmt_functor.post_order_visit(
        func.body, lambda n: found.append(n) if isinstance(n, tir.Block) else None
    )
    return [b for b in found if b.name_hint != "root"]


def is_annotated(block: tir.Block) -> bool:
    key, value = ANNOTATION
    return block.annotations.get(key) == value


def annotated_names(func: tir.PrimFunc) -> List[str]:
    return sorted(b.name_hint for b in blocks(func) if is_annotated(b))


def read_free_scalar_names(func: tir.PrimFunc) -> List[str]:
    """The test's own oracle: blocks that read nothing and write one 0-d buffer."""
    return sorted(
        b.name_hint for b in blocks(func)
        if not b.reads and len(b.writes) == 1 and len(b.writes[0].buffer.shape) == 0
        and "schedule_rule" not in b.annotations
    )


def strip_annotation(func: tir.PrimFunc) -> tir.PrimFunc:
    def strip(node):
        if isinstance(node, tir.Block) and is_annotated(node):
            ann = {k: v for k, v in node.annotations.items() if k != "schedule_rule"}
            return tir.Block(node.iter_vars, node.reads, node.writes, node.name_hint, node.body,
                             node.init, node.alloc_buffers, node.match_buffers, ann)
        return None

    return func.with_body(tir.stmt_functor.ir_transform(func.body, None, strip, ["tir.Block"]))


def scalar_epilogue(attrs=None, dtype: str = "int32") -> List[te.Tensor]:
    """dense + a 0-d constant (as Relay creates it) + clip: the TE a Relay epilogue lowers to."""
    data = te.placeholder((4, 16), dtype, name="data")
    weight = te.placeholder((8, 16), dtype, name="weight")
    acc = topi.nn.dense(data, weight, out_dtype=dtype)
    const = te.compute((), lambda: tvm.tir.const(3, dtype), name="compile_engine_const",
                       tag="broadcast", attrs=attrs)
    add = te.compute(acc.shape, lambda i, j: acc[i, j] + const(), name="T_add")
    out = te.compute(acc.shape, lambda i, j: te.max(te.min(add[i, j], 100), 0), name="T_clip")
    return [data, weight, out]


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=TARGETS)
def target(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def qnn_tasks(target):
    mod = qnn_model()
    return {variant: extract(mod, target, variant) for variant in ("ours", "upstream")}


# --- registration and configuration ---------------------------------------------------------------


def test_converter_registered_on_import():
    assert tvm.get_global_func("relay.backend.tir_converter.inline_constants", allow_missing=True)


def test_registration_is_idempotent():
    assert conv.register_inline_constants_converter() is False
    importlib.reload(conv)  # runs the module's registration again
    assert tvm.get_global_func("relay.backend.tir_converter.inline_constants")


def test_registration_leaves_someone_elses_function(monkeypatch):
    name = "quantfuse_test_foreign_converter"
    if tvm.get_global_func(f"relay.backend.tir_converter.{name}", allow_missing=True) is None:
        tvm.register_func(f"relay.backend.tir_converter.{name}", lambda args, consts: "theirs")
    monkeypatch.setattr(conv, "CONVERTER_NAME", name)
    assert conv.register_inline_constants_converter() is False
    assert tvm.get_global_func(f"relay.backend.tir_converter.{name}")([], []) == "theirs"


@pytest.mark.parametrize(
    "variant, converter",
    [("ours", "inline_constants"), ("upstream", "default"), ("legacy", "default")],
)
def test_pass_config(variant, converter):
    config = pass_config(variant)
    # see relay_ext.lowering.config.BUILD_OPTIONS for the last two
    assert config == {
        "relay.backend.use_meta_schedule": True,
        "relay.backend.tir_converter": converter,
        "tir.disable_cse_tir": True,
        "tir.add_lower_pass": [(0, zero_based_loops), (1, clamp_in_float),
                               (2, prefetch_next_weights), (3, inline_vector_lets),
                               (3, round_and_convert)],
    }
    with tvm.transform.PassContext(config=config) as ctx:  # TVM knows every option
        assert str(ctx.config["relay.backend.tir_converter"]) == converter
        passes = [entry[1] for entry in ctx.config["tir.add_lower_pass"]]
        for found, wanted in zip(passes, [zero_based_loops, clamp_in_float, prefetch_next_weights,
                                          inline_vector_lets, round_and_convert], strict=True):
            assert found.same_as(wanted)
    assert pass_config(variant) is not config  # callers may add options to their copy
    assert relay_ext.pass_config is pass_config


def test_pass_config_unknown_variant():
    with pytest.raises(ValueError, match="ours, upstream, legacy"):
        pass_config("fast")


# --- real quantized tasks -------------------------------------------------------------------------


def test_annotates_exactly_scalar_constants_of_quantized_tasks(qnn_tasks):
    ours, upstream = qnn_tasks["ours"], qnn_tasks["upstream"]
    assert sorted(ours) == sorted(upstream)
    for name, func in ours.items():
        default = upstream[name]
        assert annotated_names(default) == []
        # exactly the read-free 0-d blocks, which are Relay's scalar constants here ...
        assert annotated_names(func) == read_free_scalar_names(default), name
        assert all(n.startswith("compile_engine_const") for n in annotated_names(func))
        # ... and nothing else differs from TVM's default converter
        assert tvm.ir.structural_equal(strip_annotation(func), default), name
    # the requantize output zero point of the conv and of the dense is a scalar constant
    quantized = [name for name in ours if "conv2d" in name or "dense" in name]
    assert len(quantized) == 2 and all(annotated_names(ours[name]) for name in quantized)


def test_zero_dim_block_that_reads_is_not_annotated():
    """A cast of a constant to 0-d (as nn.pad's fill value becomes) reads a buffer: not a constant."""
    data = te.placeholder((4,), "int8", name="data")
    const = te.compute((), lambda: tvm.tir.const(-125, "int32"), name="c")
    fill = te.compute((), lambda: const().astype("int8"), name="fill")
    out = te.compute((6,), lambda i: te.if_then_else(
        te.all(i >= 1, i < 5), data[te.max(i - 1, 0)], fill()), name="pad")
    func = conv.inline_constants_converter([data, out], [])
    assert annotated_names(func) == ["c"]


def test_existing_schedule_rule_is_left_alone():
    data = te.placeholder((4,), "int32", name="data")
    const = te.compute((), lambda: tvm.tir.const(3, "int32"), name="c",
                       attrs={"schedule_rule": "theirs"})
    out = te.compute((4,), lambda i: data[i] + const(), name="out")
    func = conv.inline_constants_converter([data, out], [])
    (block,) = [b for b in blocks(func) if b.name_hint == "c"]
    assert str(block.annotations["schedule_rule"]) == "theirs"


def test_idempotent_on_annotated_input(qnn_tasks):
    for func in qnn_tasks["ours"].values():
        assert conv.annotate_scalar_constants(func).same_as(func)
    # what a patched TVM produces is returned unchanged
    patched = conv.default_converter()(scalar_epilogue(attrs=dict([ANNOTATION])), [])
    assert conv.annotate_scalar_constants(patched).same_as(patched)
    again = conv.inline_constants_converter(scalar_epilogue(attrs=dict([ANNOTATION])), [])
    assert tvm.ir.structural_equal(again, patched)


def test_float_model_has_nothing_to_annotate(target):
    mod = float_model()
    ours, upstream = extract(mod, target, "ours"), extract(mod, target, "upstream")
    assert sorted(ours) == sorted(upstream) and ours
    for name, func in ours.items():
        assert annotated_names(func) == []
        assert tvm.ir.structural_equal(func, upstream[name])


# --- None passthrough -----------------------------------------------------------------------------


def dynamic_shape_args() -> List[te.Tensor]:
    n = te.var("n")
    data = te.placeholder((n,), "int32", name="data")
    return [data, te.compute((n,), lambda i: data[i] + 1, name="out")]


def extern_op_args() -> List[te.Tensor]:
    data = te.placeholder((4,), "float32", name="data")
    out = te.extern((4,), [data], lambda ins, outs: tvm.tir.call_packed("f", ins[0], outs[0]),
                    name="ext", dtype="float32")
    return [data, out]


@pytest.mark.parametrize("make_args", [dynamic_shape_args, extern_op_args])
def test_none_when_default_declines(make_args):
    args = make_args()
    assert conv.default_converter()(args, []) is None
    registered = tvm.get_global_func("relay.backend.tir_converter.inline_constants")
    assert registered(args, []) is None


def test_not_none_when_default_converts():
    registered = tvm.get_global_func("relay.backend.tir_converter.inline_constants")
    assert isinstance(registered(scalar_epilogue(), []), tir.PrimFunc)


# --- the TVM patch --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_patch_equivalent_to_converter(dtype):
    """A constant created with the patch's attrs and converted by TE equals our converter's output."""
    with_attrs = te.create_prim_func(
        scalar_epilogue(attrs=dict([ANNOTATION]), dtype=dtype), index_dtype_override="int64"
    ).with_attr("tir.noalias", True)
    ours = conv.inline_constants_converter(scalar_epilogue(dtype=dtype), [])
    assert annotated_names(ours) == ["compile_engine_const"]
    assert tvm.ir.structural_equal(with_attrs, ours)
    # and what TVM's default converter makes of the patched constant (a patched build) equals it too
    patched_build = conv.default_converter()(scalar_epilogue(attrs=dict([ANNOTATION]), dtype=dtype), [])
    assert tvm.ir.structural_equal(patched_build, ours)
    assert tvm.ir.structural_hash(patched_build) == tvm.ir.structural_hash(ours)


def test_patch_adds_exactly_that_attribute():
    added = [l for l in PATCH.read_text().splitlines() if l.startswith("+") and not l.startswith("+++")]
    code = [l for l in added if not l.strip("+ ").startswith("//")]
    assert any('{{"schedule_rule", String("compute_inline")}}' in l for l in code)
    assert "src/relay/backend/te_compiler_cache.cc" in PATCH.read_text()


# --- MetaSchedule inlines the annotated blocks ----------------------------------------------------


def custom_rule_only_spaces(func: tir.PrimFunc, target: str) -> List[tir.Schedule]:
    """Design spaces generated with MetaSchedule's ApplyCustomRule as the only rule."""
    space = ms.space_generator.PostOrderApply(
        sch_rules=[ms.schedule_rule.ApplyCustomRule()], postprocs=[], mutator_probs={}
    )
    context = ms.TuneContext(mod=tvm.IRModule({"main": func}), target=tvm.target.Target(target),
                             space_generator=space, task_name="custom-rule-only")
    return list(context.generate_design_space())


def test_annotated_constants_inlined_by_apply_custom_rule(qnn_tasks, target):
    """ApplyCustomRule alone removes exactly the annotated blocks (through meta_rules' rule)."""
    assert any(annotated_names(func) for func in qnn_tasks["ours"].values())
    for name, func in qnn_tasks["ours"].items():
        (space,) = custom_rule_only_spaces(func, target)
        remaining = {b.name_hint for b in blocks(space.mod["main"])}
        assert remaining == {b.name_hint for b in blocks(func)} - set(annotated_names(func)), name
        # TVM's default TIR keeps them: nothing else removed them
        (untouched,) = custom_rule_only_spaces(qnn_tasks["upstream"][name], target)
        assert tvm.ir.structural_equal(untouched.mod["main"], qnn_tasks["upstream"][name])


def test_no_annotated_block_left_in_design_spaces(qnn_tasks, target):
    for name, func in qnn_tasks["ours"].items():
        for space in fusion.design_spaces(tvm.IRModule({"main": func}), target, "legacy"):
            assert annotated_names(space.mod["main"]) == [], name


def test_constant_blocks_no_longer_keep_epilogue_in_global_memory():
    """cuda: legacy rules leave the conv/dense result in global memory; with our converter, none."""
    target = "nvidia/nvidia-a100"
    mod = qnn_model()
    ours, default = extract(mod, target, "ours"), extract(mod, target, "legacy")
    quantized = [n for n in ours if "conv2d" in n or "dense" in n]
    assert quantized
    for name in quantized:
        before = fusion.design_space_intermediates(tvm.IRModule({"main": default[name]}), target, "legacy")
        after = fusion.design_space_intermediates(tvm.IRModule({"main": ours[name]}), target, "legacy")
        assert max(before) >= 1 and max(after) == 0, (name, before, after)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_patch_applies_to_the_bundled_tvm_source(tmp_path):
    """The TVM wheel ships v0.19.0's sources; the patch applies to its te_compiler_cache.cc."""
    bundled = Path(tvm.__file__).parent / "src" / "relay" / "backend" / "te_compiler_cache.cc"
    if not bundled.exists():
        pytest.skip("this TVM build ships no sources")
    dest = tmp_path / "src" / "relay" / "backend"
    dest.mkdir(parents=True)
    shutil.copy(bundled, dest)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    result = subprocess.run(["git", "apply", "--check", str(PATCH)], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
