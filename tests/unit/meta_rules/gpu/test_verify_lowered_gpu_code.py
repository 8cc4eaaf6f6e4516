"""VerifyLoweredGPUCode: lowered-code checks, reasons and counts, and agreement with TVM's verifier."""

import gc
import logging
from typing import List

import pytest
import tvm
from tvm import meta_schedule as ms
from tvm import te, tir

import meta_rules
from meta_rules import VerifyLoweredGPUCode
from meta_rules.gpu import verify_lowered_gpu_code as vlg
from meta_rules.testing.candidate_sampling import draw_candidate, postprocs_before_gpu_verifier
from meta_rules.testing.te_workloads import quantized_conv2d_nhwc, quantized_dense, requantize_epilogue

CUDA = "nvidia/geforce-rtx-3080"  # sm_86: tensor-core design spaces, all limits set
VULKAN_NO_INT64 = "vulkan -supports_int64=0 -max_shared_memory_per_block=16384"


def _verifier(target, mod, task="task", max_vector_bytes=16):
    verifier = VerifyLoweredGPUCode(max_vector_bytes)
    verifier._initialize_with_tune_context(  # pylint: disable=protected-access
        ms.TuneContext(mod=mod, target=tvm.target.Target(target), task_name=task))
    return verifier


def _tvm_verifier(target, mod):
    verifier = ms.postproc.VerifyGPUCode()
    verifier._initialize_with_tune_context(  # pylint: disable=protected-access
        ms.TuneContext(mod=mod, target=tvm.target.Target(target), task_name="tvm"))
    return verifier


def _bind(sch, block, threads, vector=None, thread_axis="threadIdx.x"):
    loops = sch.get_loops(sch.get_block(block))
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    factors = [None, threads] + ([vector] if vector else [])
    parts = sch.split(fused, factors)
    sch.bind(parts[0], "blockIdx.x")
    sch.bind(parts[1], thread_axis)
    if vector:
        sch.vectorize(parts[2])
    return sch


# --- the seed's epilogue -------------------------------------------------------------------------

def _epilogue_module():
    acc = te.placeholder((16, 64), "int32", name="acc")
    multiplier = te.placeholder((64,), "int32", name="multiplier")
    shift = te.placeholder((64,), "int32", name="shift")
    out = requantize_epilogue(acc, multiplier, shift)  # ends in T_cast, uint8
    return tvm.IRModule({"main": te.create_prim_func([acc, multiplier, shift, out])})


def _epilogue(vector: int) -> tir.Schedule:
    """``T.cast(T.max(T.min(q_multiply_shift_per_axis(...), 255), 0), "uint8")``, one block, on CUDA."""
    sch = tir.Schedule(_epilogue_module())
    for name in ("compile_engine_const", "T_add", "T_requantize", "T_clip"):
        sch.compute_inline(sch.get_block(name))
    return _bind(sch, "T_cast", 32, vector)


def test_seed_epilogue_by_4_is_rejected_for_int64_vectors_and_by_2_accepted():
    verifier = _verifier(CUDA, _epilogue_module())
    x4 = _epilogue(4)
    assert "q_multiply_shift_per_axis" in x4.mod.script()
    reasons = verifier.verify(x4.mod)
    assert [r.check for r in reasons] == ["vector width"]
    assert reasons[0].detail == "cast int64x4 = 32 B > 16 B"
    assert reasons[0].where == "store to T_cast"
    assert not verifier.apply(x4)
    assert verifier.verify(_epilogue(2).mod) == []
    assert verifier.apply(_epilogue(2))
    # a wider limit lets the int64x4 candidate through: the limit is what decides
    assert _verifier(CUDA, _epilogue_module(), max_vector_bytes=32).verify(x4.mod) == []


def test_a_check_before_lower_intrin_passes_the_by_4_candidate():
    """The bug this fixes: before LowerIntrin the intrinsic is still an int32x4 call."""
    target = tvm.target.Target(CUDA)
    limits = vlg.gpu_limits(target)
    func = _epilogue(4).mod["main"]
    constraints = {"max_shared_memory_per_block": limits.max_shared_memory_per_block,
                   "max_threads_per_block": limits.max_threads_per_block,
                   "max_vthread": 8, "max_vector_bytes": 16}
    passes = vlg.lowering_passes()
    assert passes[-1].info.name == "tir.LowerIntrin"

    early = vlg.lower_for_verification(func, "main", target, passes[:-1])
    assert "q_multiply_shift_per_axis" in early.script() and "int64" not in early.script()
    assert tvm.tir.analysis.verify_gpu_code(early, constraints)  # TVM's own analysis passes it
    assert vlg.lowered_rejections(early, limits) == []  # and so would ours, this early

    lowered = vlg.lower_for_verification(func, "main", target)
    assert not tvm.tir.analysis.verify_gpu_code(lowered, constraints)
    assert [r.key for r in vlg.lowered_rejections(lowered, limits)] == [
        "vector width (cast int64x4 = 32 B > 16 B)"]


# --- 64-bit integers -------------------------------------------------------------------------------

def _requantize_int32(wide: bool, threads: int = 64, axis: str = "threadIdx.x") -> tir.Schedule:
    """int32 -> int32, one thread per element; ``wide`` uses q_multiply_shift_per_axis (int64 inside)."""
    a = te.placeholder((1024,), "int32", name="a")
    m = te.placeholder((1024,), "int32", name="m")
    if wide:
        def body(i):
            return tvm.tir.q_multiply_shift_per_axis(
                a[i], m[i], tvm.tir.const(0, "int32"), tvm.tir.const(3, "int32"),
                tvm.tir.const(31, "int32"), tvm.tir.const(False, "bool"),
                tvm.tir.const(True, "bool"))
    else:
        def body(i):
            return tvm.te.max(tvm.te.min((a[i] * m[i]) >> 3, 255), 0)
    out = te.compute((1024,), body, name="out")
    sch = tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, m, out])}))
    return _bind(sch, "out", threads, thread_axis=axis)


@pytest.mark.parametrize("target", ["webgpu", VULKAN_NO_INT64,
                                    "vulkan -max_shared_memory_per_block=16384"])
def test_64_bit_integers_rejected_where_the_target_has_none(target):
    wide = _requantize_int32(True)
    reasons = _verifier(target, wide.mod).verify(wide.mod)
    kind = tvm.target.Target(target).kind.name
    assert [r.key for r in reasons] == [f"64-bit integer (cast int64 on {kind})"]
    assert reasons[0].where == "store to out" and not reasons[0].tvm_checks
    assert _verifier(target, wide.mod).verify(_requantize_int32(False).mod) == []


@pytest.mark.parametrize("target", [CUDA, "vulkan -supports_int64=1 -max_shared_memory_per_block=16384"])
def test_64_bit_integers_accepted_where_the_target_has_them(target):
    wide = _requantize_int32(True)
    assert "int64" in vlg.lower_for_verification(wide.mod["main"], "main",
                                                 tvm.target.Target(target)).script()
    assert _verifier(target, wide.mod).verify(wide.mod) == []


def test_webgpu_code_generator_fails_on_what_we_reject():
    """TVM's own target.build.webgpu fails on the int64 candidate and builds the int32 one."""
    original = tvm.get_global_func("target.build.webgpu")
    reached: List[tvm.IRModule] = []

    def recording(mod, target):
        reached.append(mod)
        return original(mod, target)

    target = tvm.target.Target("webgpu", host="llvm")
    tvm.register_func("target.build.webgpu", recording, override=True)
    try:
        with pytest.raises(Exception, match="max_value|i64|int64"):
            tvm.build(_requantize_int32(True).mod, target=target)
        assert len(reached) == 1  # the failure is inside the code generator, not before it
        assert "int64" in reached[0].script()
        lib = tvm.build(_requantize_int32(False).mod, target=target)
    finally:
        tvm.register_func("target.build.webgpu", original, override=True)
    shader = lib.imported_modules[0].get_source()
    assert "fn main_kernel" in shader and "i64" not in shader
    wide = _requantize_int32(True)
    assert not _verifier("webgpu", wide.mod).apply(wide)


# --- targets and their limits -------------------------------------------------------------------

@pytest.mark.parametrize("target, missing", [
    ("vulkan", "max_shared_memory_per_block"),
    ("cuda", "max_threads_per_block"),
    ("cuda -max_threads_per_block=1024", "max_shared_memory_per_block"),
])
def test_missing_target_attribute_is_a_value_error_naming_it(target, missing):
    mod = _epilogue_module()
    space = ms.space_generator.PostOrderApply(sch_rules=[], postprocs=[VerifyLoweredGPUCode()],
                                              mutator_probs={})
    with pytest.raises(ValueError, match=f"no attribute '{missing}'"):
        ms.TuneContext(mod=mod, target=tvm.target.Target(target), space_generator=space)


def test_webgpu_gets_the_specification_defaults():
    limits = vlg.gpu_limits(tvm.target.Target("webgpu"))
    assert (limits.max_threads_per_block, limits.max_shared_memory_per_block) == (256, 16384)
    assert limits.max_thread_extent == (256, 256, 64) and not limits.supports_int64
    assert vlg.gpu_limits(tvm.target.Target("webgpu -max_num_threads=128")).max_threads_per_block == 128
    # TVM's own verifier cannot be set up for webgpu at all
    with pytest.raises(Exception, match="max_shared_memory_per_block"):
        _tvm_verifier("webgpu", _epilogue_module())

    small = _requantize_int32(False)
    assert _verifier("webgpu", small.mod).verify(small.mod) == []
    big = _requantize_int32(False, threads=512)
    assert [r.key for r in _verifier("webgpu", big.mod).verify(big.mod)] == [
        "thread extent (threadIdx.x > 256)", "threads per block (> 256)"]
    deep = _requantize_int32(False, threads=128, axis="threadIdx.z")
    assert [r.key for r in _verifier("webgpu", deep.mod).verify(deep.mod)] == [
        "thread extent (threadIdx.z > 64)"]
    shared = _shared_memory_candidate(4096)  # 16 KiB + 4 B of shared memory per block
    assert [r.key for r in _verifier("webgpu", shared.mod).verify(shared.mod)] == [
        "shared memory (> 16384 B per block)"]
    assert _verifier(CUDA, shared.mod).verify(shared.mod) == []


# --- candidates for the mix ------------------------------------------------------------------------

def _shared_memory_candidate(row: int) -> tir.Schedule:
    """Each block stages one row of ``row + 1`` int32 values in shared memory."""
    a = te.placeholder((8, row + 1), "int32", name="a")
    b = te.compute((8, row + 1), lambda i, j: a[i, j] * 2, name="b")
    sch = tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    cache = sch.cache_read(sch.get_block("b"), 0, "shared")
    i, j = sch.get_loops(sch.get_block("b"))
    sch.bind(i, "blockIdx.x")
    _, tx = sch.split(j, [None, 64])
    sch.compute_at(cache, i)
    sch.bind(tx, "threadIdx.x")
    return sch


def _elementwise_module() -> tvm.IRModule:
    a = te.placeholder((64, 64), "int32", name="a")
    b = te.compute((64, 64), lambda i, j: a[i, j] + 1, name="b")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})


def _elementwise(threads: int) -> tir.Schedule:
    return _bind(tir.Schedule(_elementwise_module()), "b", threads)


def _pipeline_that_cannot_lower() -> tir.Schedule:
    sch = tir.Schedule(_elementwise_module())
    i, j = sch.get_loops(sch.get_block("b"))
    serial, threads = sch.split(j, [None, 16])
    sch.bind(i, "blockIdx.x")
    sch.bind(threads, "threadIdx.x")
    sch.annotate(serial, "software_pipeline_stage", [0, 1, 2])  # a body of one statement
    sch.annotate(serial, "software_pipeline_order", [0, 1, 2])
    return sch


def _annotated_threads(low: int) -> tir.Schedule:
    sch = _elementwise(64)
    block = sch.get_block("b")
    sch.annotate(block, "meta_schedule.thread_extent_low_inclusive", low)
    sch.annotate(block, "meta_schedule.thread_extent_high_inclusive", 1024)
    return sch


def test_reasons_and_per_task_counts_for_a_mix(caplog):
    verifier = _verifier(CUDA, _epilogue_module(), task="mix")
    mix = [
        (_epilogue(2), None),
        (_epilogue(4), "vector width (cast int64x4 = 32 B > 16 B)"),
        (_epilogue(4), "vector width (cast int64x4 = 32 B > 16 B)"),
        (_epilogue(8), "vector width (load int32x8 = 32 B > 16 B)"),
        (_elementwise(2048), "threads per block (> 1024)"),
        (_shared_memory_candidate(16384), "shared memory (> 49152 B per block)"),
        (_pipeline_that_cannot_lower(), "lowering failed"),
        (_annotated_threads(128), "thread extent (block needs 128..1024 threads)"),
        (_annotated_threads(64), None),
    ]
    for sch, expected in mix:
        reasons = verifier.verify(sch.mod)
        assert verifier.apply(sch) == (expected is None)
        if expected is not None:
            assert reasons and reasons[0].key.startswith(expected), [str(r) for r in reasons]
    by_8 = [r.key for r in verifier.verify(_epilogue(8).mod)]
    assert by_8 == ["vector width (load int32x8 = 32 B > 16 B)",
                    "vector width (cast int64x8 = 64 B > 16 B)"]
    assert "software pipeline" in str(verifier.verify(_pipeline_that_cannot_lower().mod)[0])
    assert "65540 B" in str(verifier.verify(_shared_memory_candidate(16384).mod)[0])

    stats = verifier.stats()
    assert (stats.task, stats.candidates, stats.rejected, stats.accepted) == ("mix", 9, 7, 2)
    assert sum(stats.counts.values()) == stats.rejected
    assert stats.counts["vector width (cast int64x4 = 32 B > 16 B)"] == 2
    assert stats.by_check() == {"vector width": 3, "threads per block": 1, "shared memory": 1,
                                "lowering failed": 1, "thread extent": 1}
    assert stats.reason_counts["vector width (cast int64x8 = 64 B > 16 B)"] == 1  # not first
    assert stats.examples["threads per block (> 1024)"] == "threads per block (> 1024) in kernel 1: 2048"
    summary = verifier.summary()
    assert summary.startswith("mix: rejected 7 of 9: 2 vector width (cast int64x4 = 32 B > 16 B), ")
    assert "1 shared memory (> 49152 B per block)" in summary

    # a clone (what TVM makes for each task's context) counts into the same store
    clone = verifier.clone()
    assert not clone.apply(_epilogue(4))
    assert verifier.stats().candidates == 10 and set(verifier.task_stats()) == {"mix"}

    with caplog.at_level(logging.INFO, logger=vlg.__name__):
        assert verifier.log_summaries() == {"mix": verifier.summary()}
        assert verifier.log_summaries() == {}  # once per task
    logged = [r.getMessage() for r in caplog.records if r.name == vlg.__name__]
    assert logged == [f"VerifyLoweredGPUCode {verifier.summary()}"]


def test_unlogged_task_is_logged_when_its_verifier_is_released(caplog):
    verifier = _verifier(CUDA, _epilogue_module(), task="released")
    verifier.apply(_epilogue(4))
    with caplog.at_level(logging.INFO, logger=vlg.__name__):
        del verifier
        gc.collect()
    # (verifiers of earlier tests released by the same collection log their own tasks)
    logged = [r.getMessage() for r in caplog.records
              if r.name == vlg.__name__ and "released" in r.getMessage()]
    assert logged == ["VerifyLoweredGPUCode released: rejected 1 of 1: "
                      "1 vector width (cast int64x4 = 32 B > 16 B)"]


# --- rule sets and a real search --------------------------------------------------------------------

def test_ours_replaces_tvm_verifier_and_other_variants_keep_it():
    ours = meta_rules.postprocs(CUDA, "ours")
    for variant in ("upstream", "legacy"):
        theirs = meta_rules.postprocs(CUDA, variant)
        assert len(ours) == len(theirs)
        for mine, tvms in zip(ours, theirs):
            if isinstance(tvms, ms.postproc.VerifyGPUCode):
                assert isinstance(mine, VerifyLoweredGPUCode)
            else:
                assert type(mine) is type(tvms)  # pylint: disable=unidiomatic-typecheck
    assert not any(isinstance(p, VerifyLoweredGPUCode) for p in meta_rules.postprocs("llvm -num-cores 2"))


def test_counts_from_evolutionary_search_threads_are_readable():
    target = tvm.target.Target(CUDA)
    mod = quantized_dense()
    procs = meta_rules.postprocs(target)
    verifier = next(p for p in procs if isinstance(p, VerifyLoweredGPUCode))
    space = ms.space_generator.PostOrderApply(sch_rules=meta_rules.schedule_rules(target),
                                              postprocs=procs,
                                              mutator_probs=meta_rules.mutator_probs(target))
    strategy = ms.search_strategy.EvolutionarySearch(population_size=16, init_measured_ratio=0.0,
                                                     init_min_unmeasured=8, genetic_num_iters=1)
    context = ms.TuneContext(mod=mod, target=target, space_generator=space,
                             search_strategy=strategy, task_name="dense", rand_state=1,
                             num_threads=2).clone()
    context.pre_tuning(max_trials=8, num_trials_per_iter=8,
                       design_spaces=context.generate_design_space(),
                       database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
    candidates = context.generate_measure_candidates()
    assert candidates
    stats = verifier.stats("dense")
    assert stats.candidates >= len(candidates)
    assert stats.accepted >= len(candidates)
    assert sum(stats.counts.values()) == stats.rejected


# --- agreement with TVM's VerifyGPUCode ---------------------------------------------------------------

def _sampled_candidates(mod, target, per_space: int) -> List[tir.Schedule]:
    """Candidates from the "ours" design spaces: each space's trace replayed with fresh decisions,
    then the postprocs that run before the verifier in TVM's CUDA list."""
    before = postprocs_before_gpu_verifier(mod, target)
    spaces = meta_rules.measure.fusion.design_spaces(mod, target, "ours", rand_state=0)
    drawn = (draw_candidate(mod, space, seed, before)
             for space in spaces for seed in range(1, per_space + 1))
    return [sch for sch in drawn if sch is not None]


@pytest.mark.parametrize("name, build, per_space", [
    ("conv", quantized_conv2d_nhwc, 10),
    ("dense", quantized_dense, 14),
])
def test_agrees_with_tvm_verifier_on_sampled_candidates(name, build, per_space):
    target = tvm.target.Target(CUDA)
    mod = build()
    candidates = _sampled_candidates(mod, target, per_space)
    assert len(candidates) >= per_space
    ours, theirs = _verifier(target, mod, name), _tvm_verifier(target, mod)
    decisions = []
    for sch in candidates:
        reasons = ours.verify(sch.mod)
        tvm_accepts = theirs.apply(sch)
        # TVM rejects exactly when one of our reasons is one TVM checks; any other reason is a
        # documented stricter case (none is expected among these CUDA candidates)
        assert tvm_accepts == (not any(r.tvm_checks for r in reasons)), [str(r) for r in reasons]
        assert tvm_accepts == (not reasons), [str(r) for r in reasons]
        decisions.append(tvm_accepts)
    assert any(decisions) and not all(decisions)  # the sample has both outcomes


def test_stricter_than_tvm_on_a_wide_vector_value_cuda_cannot_hold():
    """A vectorised comparison of an iota ramp: no wide load/store/cast, so TVM passes it; the
    int32x16 (64 B) values survive into the device code handed to the CUDA code generator, which
    has no type for them (CodeGenCUDA::PrintType: 32-bit ints up to 8 lanes)."""
    a = te.placeholder((4096,), "int8", name="a")
    out = te.compute((4096,), lambda i: tvm.tir.Select(i % 100 < 50, a[i], tvm.tir.const(0, "int8")),
                     name="out")
    mod = tvm.IRModule({"main": te.create_prim_func([a, out])})
    sch = _bind(tir.Schedule(mod), "out", 64, 16)
    assert _tvm_verifier(CUDA, mod).apply(sch)
    reasons = _verifier(CUDA, mod).verify(sch.mod)
    assert [(r.key, r.tvm_checks) for r in reasons] == [
        ("vector width (ramp int32x16 = 64 B > 16 B)", False)]

    captured = []

    def capture(device_mod, _target):
        captured.append(device_mod)
        raise RuntimeError("captured the device module")

    previous = tvm.get_global_func("target.build.cuda", allow_missing=True)
    tvm.register_func("target.build.cuda", capture, override=True)
    try:
        with pytest.raises(Exception, match="captured the device module"):
            tvm.build(sch.mod, target=tvm.target.Target(CUDA, host="llvm"))
    finally:
        if previous is None:
            tvm._ffi.registry.remove_global_func("target.build.cuda")  # pylint: disable=protected-access
        else:
            tvm.register_func("target.build.cuda", previous, override=True)
    wide_values = []

    def visit(node):
        if isinstance(node, (tir.Mod, tir.FloorMod, tir.LT)) and node.a.dtype == "int32x16":
            wide_values.append(node)

    (func,) = captured[0].functions.values()
    tvm.tir.stmt_functor.post_order_visit(func.body, visit)
    assert wide_values
