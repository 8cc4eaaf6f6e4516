"""The fused and the unfused schedules compute the same numbers, built for the CPU.

GPU design spaces cannot be built on this machine, so the GPU rule lists are used without what
binds threads: TVM's plain CUDA list for each variant with MultiLevelTiling replaced by one that
binds nothing (its write cache in ``local`` scope, as on the GPU) and CrossThreadReduction,
ParallelizeVectorizeUnroll and AutoBind left out. Ours and upstream then make the same random
decisions (the new rules sample nothing), so the two spaces differ only by the fusion; both are
built for llvm and run on the same random int8 inputs.
"""

import numpy as np
import pytest
import tvm
from tvm import meta_schedule as ms

import meta_rules
from meta_rules.measure import fusion
from meta_rules.testing.fusion_workloads import avg_pool_cast, residual_conv_epilogue

PLAIN_CUDA = ("cuda -arch=sm_70 -max_threads_per_block=1024 -max_shared_memory_per_block=49152 "
              "-thread_warp_size=32")
CPU = tvm.target.Target("llvm -num-cores 2")
THREAD_RULES = (ms.schedule_rule.CrossThreadReduction, ms.schedule_rule.ParallelizeVectorizeUnroll,
                ms.schedule_rule.AutoBind)


def _unbound_tiling() -> ms.ScheduleRule:
    return ms.schedule_rule.MultiLevelTiling(
        structure="SSRSRS", tile_binds=None, max_innermost_factor=8, vector_load_lens=None,
        reuse_read=None,
        reuse_write=ms.schedule_rule.ReuseType(req="must", levels=[2], scope="local"))


def cpu_buildable_rules(variant: str):
    rules = []
    for rule in meta_rules.schedule_rules(PLAIN_CUDA, variant):
        if isinstance(rule, ms.schedule_rule.MultiLevelTiling):
            rules.append(_unbound_tiling())
        elif not isinstance(rule, THREAD_RULES):
            rules.append(rule)
    return rules


def _space(mod, variant, rand_state):
    generator = ms.space_generator.PostOrderApply(
        sch_rules=cpu_buildable_rules(variant), postprocs=[], mutator_probs={})
    context = ms.TuneContext(mod=mod, target=CPU, space_generator=generator,
                             rand_state=rand_state, task_name="numbers")
    (space,) = context.generate_design_space()
    return space


def _decisions(sch):
    trace = sch.trace
    return [(inst.kind.name, str(trace.decisions[inst])) for inst in trace.insts
            if inst in trace.decisions]


def _run(sch, inputs, out_shape):
    lib = tvm.build(sch.mod, target=CPU)
    dev = tvm.cpu()
    out = tvm.nd.empty(out_shape, "uint8", dev)
    lib(*(tvm.nd.array(a, dev) for a in inputs), out)
    return out.numpy()


def _fused_and_unfused(mod, rand_state):
    fused, unfused = _space(mod, "ours", rand_state), _space(mod, "upstream", rand_state)
    assert _decisions(fused) == _decisions(unfused)  # same tiles: only the fusion differs
    assert fusion.global_intermediates(fused.mod) == []
    assert len(fusion.global_intermediates(unfused.mod)) == 1
    return fused, unfused


def _residual_inputs(rng, channels=32, size=8):
    return [
        rng.integers(-128, 128, (1, channels, size, size), dtype=np.int8),
        rng.integers(-128, 128, (channels, channels, 3, 3), dtype=np.int8),
        rng.integers(-2000, 2000, channels, dtype=np.int32),
        rng.integers(1 << 29, 1 << 30, channels, dtype=np.int32),
        rng.integers(-12, -8, channels, dtype=np.int32),
        rng.integers(0, 256, (1, channels, size, size), dtype=np.uint8),
    ]


@pytest.mark.parametrize("rand_state", [1, 2])
def test_residual_epilogue_fused_equals_unfused(rand_state):
    fused, unfused = _fused_and_unfused(residual_conv_epilogue("NCHW"), rand_state)
    inputs = _residual_inputs(np.random.default_rng(rand_state))
    shape = inputs[-1].shape
    expected = _run(unfused, inputs, shape)
    assert len(np.unique(expected)) > 20  # neither saturated nor constant
    np.testing.assert_array_equal(_run(fused, inputs, shape), expected)
    # control: the residual reaches the fused output
    inputs[-1] = (inputs[-1].astype(np.int32) + 40).clip(0, 255).astype(np.uint8)
    changed = _run(fused, inputs, shape)
    assert (changed != expected).mean() > 0.5
    np.testing.assert_array_equal(changed, _run(unfused, inputs, shape))


def test_pool_fused_equals_unfused():
    fused, unfused = _fused_and_unfused(avg_pool_cast("NCHW"), rand_state=1)
    rng = np.random.default_rng(0)
    data = rng.integers(-3000, 3000, (1, 64, 7, 7), dtype=np.int32)
    expected = _run(unfused, [data], (1, 64, 1, 1))
    assert len(np.unique(expected)) > 20
    np.testing.assert_array_equal(_run(fused, [data], (1, 64, 1, 1)), expected)
    data[0, 5] += 49 * 7  # control: one channel's mean moves by 7
    changed = _run(fused, [data], (1, 64, 1, 1))
    assert np.flatnonzero(changed != expected).tolist() == [5]
