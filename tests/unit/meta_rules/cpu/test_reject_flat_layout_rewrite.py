"""RejectFlatLayoutRewrite and compilable_records: a candidate that stores a dense weight in one
dimension never wins a tune with ``ours``, and a database that holds one as a task's best still
compiles (with the next record) instead of failing in TOPI's dense."""

import pytest
import tvm
from tvm import meta_schedule as ms
from tvm import te, tir
from tvm.script import tir as T

from meta_rules import RejectFlatLayoutRewrite
from meta_rules.cpu.reject_flat_layout_rewrite import flattened_layout_rewrites, module_flat_rewrites
from meta_rules.testing.candidate_sampling import first_rejection, initialised_postprocs
from relay_ext.frontend import models
from relay_ext.lowering.config import pass_config
from relay_ext.report.accuracy import step_error
from relay_ext.build import compile
from relay_ext.measure.run import run_module
from relay_ext.tuning import extract_tasks
from relay_ext.schedules.records import compilable_records
# Plain llvm (no fast int8), which every host runs: the MLP's layers stay dense ops there (on
# targets without VNNI they are int16 convs, relay_ext/lowering/x86/int16_pair_conv.py).
TARGET = tvm.target.Target("llvm -num-cores 2")


# --- the analysis -------------------------------------------------------------------------------


@T.prim_func
def _preproc_blocks(w: T.Buffer((32, 64), "int8"), b: T.Buffer((16,), "int8"),
                    flat: T.Buffer((2048,), "int8"), tiled: T.Buffer((4, 64, 8), "int8"),
                    copied: T.Buffer((2048,), "int8"), bias: T.Buffer((16,), "int8")):
    for i, j in T.grid(32, 64):
        with T.block("flat"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.block_attr({"meta_schedule.layout_rewrite_preproc": T.bool(True)})
            flat[vi * 64 + vj] = w[vi, vj]
    for i, j in T.grid(32, 64):
        with T.block("tiled"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.block_attr({"meta_schedule.layout_rewrite_preproc": T.bool(True)})
            tiled[vi // 8, vj, vi % 8] = w[vi, vj]
    for i, j in T.grid(32, 64):
        with T.block("not_a_rewrite"):  # flattens, but is no layout rewrite
            vi, vj = T.axis.remap("SS", [i, j])
            copied[vi * 64 + vj] = w[vi, vj]
    for i in range(16):
        with T.block("one_dim_stays_one_dim"):
            vi = T.axis.remap("S", [i])
            T.block_attr({"meta_schedule.layout_rewrite_preproc": T.bool(True)})
            bias[vi] = b[vi]


def test_only_a_rewrite_that_flattens_a_multi_dimensional_parameter_is_found():
    found = flattened_layout_rewrites(_preproc_blocks)
    assert [(f.block, f.parameter, f.original, f.rewritten) for f in found] == [
        ("flat", "w", (32, 64), (2048,))]
    assert str(found[0]) == "block 'flat' stores w (32, 64) as (2048,)"


# --- the postproc -------------------------------------------------------------------------------


def _dense_workload() -> tvm.IRModule:
    """uint8 (1, 64) x int8 (32, 64) -> int32, the weight layout-free, as Relay's dense tasks."""
    a = te.placeholder((1, 64), "uint8", name="a")
    w = te.placeholder((32, 64), "int8", name="w")
    k = te.reduce_axis((0, 64), name="k")
    dense = te.compute((1, 32), lambda i, j: te.sum(a[i, k].astype("int32") * w[j, k].astype("int32"),
                                                    axis=k), name="T_matmul_NT")
    return tvm.IRModule({"main": te.create_prim_func([a, w, dense]).with_attr("layout_free_buffers", [1])})


def flat_weight_candidate(mod: tvm.IRModule, block: str = "T_matmul_NT") -> tir.Schedule:
    """What the CPU search can draw for a dense: the reduction split [K, 1] and rfactor'd (an
    rfactor space of MetaSchedule's), the root annotated for parallel and vectorize. The rfactor
    block is all spatial, so RewriteParallelVectorizeUnroll fuses its loops and RewriteLayout then
    stores the weight in that one fused loop's order. In a Relay task the epilogue is inlined
    first, as MetaSchedule's AutoInline does."""
    sch = tir.Schedule(mod)
    others = [b for b in sch.get_child_blocks(sch.get_block("root")) if sch.get(b).name_hint != block]
    for rv in reversed(others[:-1]):  # all but the output
        try:
            sch.compute_inline(rv)
        except tir.ScheduleError:
            pass  # a block AutoInline would leave too
    *_, reduction = sch.get_loops(sch.get_block(block))
    outer, _ = sch.split(reduction, [None, 1])
    sch.rfactor(outer, factor_axis=2)
    sch.annotate(sch.get_block("root"), "meta_schedule.parallel", 32)
    sch.annotate(sch.get_block("root"), "meta_schedule.vectorize", 64)
    sch.enter_postproc()
    return sch


def test_ours_rejects_the_flat_candidate_that_upstream_lets_through():
    mod = _dense_workload()
    upstream = flat_weight_candidate(mod)
    assert first_rejection(upstream, initialised_postprocs(mod, TARGET, "upstream")) is None
    assert [(f.original, f.rewritten) for f in module_flat_rewrites(upstream.mod)] == [((32, 64), (2048,))]

    ours = flat_weight_candidate(mod)
    rejected_by = first_rejection(ours, initialised_postprocs(mod, TARGET, "ours"))
    assert str(rejected_by) == "RejectFlatLayoutRewrite"


def test_ours_keeps_a_candidate_whose_rewritten_weight_keeps_two_dimensions():
    mod = _dense_workload()
    sch = tir.Schedule(mod)
    sch.enter_postproc()
    assert first_rejection(sch, initialised_postprocs(mod, TARGET, "ours")) is None
    assert not module_flat_rewrites(sch.mod)
    assert RejectFlatLayoutRewrite().clone().apply(sch)


# --- compiling with a database that holds one ---------------------------------------------------


@pytest.fixture(scope="module")
def mlp():
    return models.load("mlp")


@pytest.fixture(scope="module")
def flat_dense(mlp):
    """(workload, its flat candidate) for the MLP's dense task whose weight the candidate flattens:
    the classifier, (10, 256) stored as (2560,); the wider layers' loops are not fused whole."""
    for task in extract_tasks(mlp.mod, mlp.params, TARGET):
        mod = task.dispatched[0]
        if "dense" in task.task_name:
            sch = _postprocessed(mod, flat_weight_candidate(mod))
            if module_flat_rewrites(sch.mod):
                return mod, sch
    raise AssertionError("no dense task of the MLP gets a flat weight layout")


def _record(database, mod, sch, seconds):
    workload = database.commit_workload(mod)
    database.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, [seconds], TARGET, []))


def _postprocessed(mod, sch):
    assert first_rejection(sch, initialised_postprocs(mod, TARGET, "upstream")) is None
    return sch


def test_a_flat_best_record_is_passed_over_and_the_model_still_compiles(mlp, flat_dense):
    mod, flat = flat_dense
    database = ms.database.MemoryDatabase()
    _record(database, mod, flat, 1e-6)  # the fastest: Relay would pick it
    plain = tir.Schedule(mod)
    plain.enter_postproc()
    _record(database, mod, _postprocessed(mod, plain), 5e-6)

    # TVM 0.19 alone: the model does not build (topi.nn.matmul asserts two dimensions first).
    with pytest.raises(AssertionError, match="1-dim matmul is not supported"):
        ms.relay_integration.compile_relay(database, tvm.ir.load_json(tvm.ir.save_json(mlp.mod)),
                                           TARGET, mlp.params, pass_config=pass_config("ours"))

    chosen = compilable_records(database)
    assert len(chosen.skipped) == 1 and chosen.skipped[0].used_ms == pytest.approx(5e-3)
    assert chosen.skipped[0].reason.endswith("which Relay's dense cannot build")
    best = chosen.database.get_all_tuning_records()
    assert len(best) == 1 and best[0].run_secs[0].value == pytest.approx(5e-6)

    compiled = compile(mlp, target=TARGET, records=database, choose_per_task=False)
    output = run_module(compiled, mlp.inputs)[0]
    assert step_error(output, mlp.run_reference(), mlp.output_scale).max_steps <= 3 + 1e-3
    assert len(database.get_all_tuning_records()) == 2  # the database itself is left as it was


def test_a_workload_whose_only_record_is_flat_is_left_to_tvm(mlp, flat_dense):
    mod, flat = flat_dense
    database = ms.database.MemoryDatabase()
    _record(database, mod, flat, 1e-6)
    chosen = compilable_records(database)
    assert [s.used_ms for s in chosen.skipped] == [None]
    assert "TVM's default schedule" in str(chosen.skipped[0])
    assert not chosen.database.get_all_tuning_records()
    compiled = compile(mlp, target=TARGET, records=database, choose_per_task=False)
    output = run_module(compiled, mlp.inputs)[0]
    assert step_error(output, mlp.run_reference(), mlp.output_scale).max_steps <= 3 + 1e-3
