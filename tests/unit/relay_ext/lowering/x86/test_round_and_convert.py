"""round_and_convert (relay_ext/lowering/x86/round_and_convert.py): int32(floor(x)) on 16 float
lanes in one AVX-512 conversion, the same int32 for every input, and nothing else touched."""

import numpy as np
import pytest
import tvm
from tvm import te

from relay_ext.lowering.config import BUILD_OPTIONS, build_candidate, pass_config
from relay_ext.lowering.targets import host_cpu_flags
from relay_ext.lowering.x86.round_and_convert import round_and_convert, target_has_avx512f

AVX512 = "llvm -mcpu=skylake-avx512"
AVX2 = "llvm -mcpu=core-avx2"
N = 64
HOST_RUNS_AVX512 = "avx512f" in (host_cpu_flags() or ())


def rounded(rounding=tvm.tir.floor, lanes=16, dtype="float32"):
    """out[i] = int32(rounding(x[i])), the loop vectorized ``lanes`` wide."""
    x = te.placeholder((N,), dtype, "x")
    out = te.compute((N,), lambda i: rounding(x[i]).astype("int32"), name="out")
    sch = tvm.tir.Schedule(te.create_prim_func([x, out]))
    (loop,) = sch.get_loops(sch.get_block("out"))
    sch.vectorize(sch.split(loop, [None, lanes])[1])
    return sch.mod


def build(mod, target, with_pass=True):
    config = dict(BUILD_OPTIONS)
    if not with_pass:
        config["tir.add_lower_pass"] = [p for p in config["tir.add_lower_pass"]
                                        if p[1] is not round_and_convert]
    with tvm.target.Target(target), tvm.transform.PassContext(config=config):
        return tvm.build(mod, target=target)


# beyond int32 and not numbers (the conversion's "integer indefinite", 0x80000000, both ways),
# halves, signed zeros, the last floats below 2**31, tiny values of both signs, and random ones
EDGES = [np.nan, np.inf, -np.inf, 2.0 ** 31, -2.0 ** 31, 3e9, -3e9, 2147483520.0, -2147483520.0,
         0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.0, -0.0, 1e-30, -1e-30, 66.5, -66.5, 255.49998,
         0.99999994, -0.99999994]


def inputs():
    rng = np.random.default_rng(0)
    return np.concatenate([np.array(EDGES), rng.normal(0, 300, N - len(EDGES))]).astype("float32")


@pytest.mark.parametrize("rounding", [tvm.tir.floor, tvm.tir.ceil])
def test_one_conversion_with_the_rounding_replaces_round_then_truncate(rounding):
    asm = build(rounded(rounding), AVX512).get_source("asm")
    mode = "rd-sae" if rounding is tvm.tir.floor else "ru-sae"
    assert f"vcvtps2dq\t{{{mode}}}" in asm, asm
    assert "vrndscaleps" not in asm and "vcvttps2dq" not in asm
    before = build(rounded(rounding), AVX512, with_pass=False).get_source("asm")
    assert "vrndscaleps" in before and "vcvttps2dq" in before  # what it replaces


@pytest.mark.skipif(not HOST_RUNS_AVX512, reason="runs AVX-512 code: this CPU (or its OS) has no "
                                                 "avx512f")
@pytest.mark.parametrize("rounding,reference", [(tvm.tir.floor, np.floor), (tvm.tir.ceil, np.ceil)])
def test_the_same_int32_for_every_input(rounding, reference):
    x = inputs()
    outputs = []
    for with_pass in (True, False):
        out = tvm.nd.empty((N,), "int32")
        build(rounded(rounding), AVX512, with_pass)(tvm.nd.array(x), out)
        outputs.append(out.numpy())
    np.testing.assert_array_equal(outputs[0], outputs[1])
    finite = np.isfinite(x) & (np.abs(x) < 2.0 ** 31)
    np.testing.assert_array_equal(outputs[0][finite], reference(x[finite]).astype("int32"))
    assert (outputs[0][~finite] == np.iinfo(np.int32).min).all()


@pytest.mark.parametrize("mod,target", [
    (rounded(), AVX2),                                   # no AVX-512
    (rounded(lanes=8), AVX512),                          # 8 lanes
    (rounded(rounding=tvm.tir.round), AVX512),           # another rounding
    (rounded(rounding=lambda v: v), AVX512),             # truncation only
    (rounded(dtype="float64", lanes=8), AVX512),         # another float type
])
def test_anything_else_is_left_alone(mod, target):
    lowered = tvm.lower(mod)
    with tvm.target.Target(target):
        assert tvm.ir.structural_equal(round_and_convert(lowered), lowered)


def test_the_target_decides_and_every_build_runs_it():
    assert target_has_avx512f(tvm.target.Target(AVX512))
    assert not target_has_avx512f(tvm.target.Target(AVX2))
    assert not target_has_avx512f(tvm.target.Target("cuda"))
    assert not target_has_avx512f(None)
    assert (3, round_and_convert) in pass_config("ours")["tir.add_lower_pass"]
    # MetaSchedule's candidates are built in the target's scope too, as a Relay build is
    lib = build_candidate(rounded(), tvm.target.Target(AVX512), None)
    assert "vrndscaleps" not in lib.get_source("asm")
