"""prefetch_next_weights (relay_ext/lowering/x86/prefetch_next_weights.py): a VNNI kernel's
innermost reduction loop prefetches, into L2, the weight lines of the block two blocks further
along its parallel loop; kernels whose weights do not follow the parallel loop, kernels that use
each weight vector once (a dense layer's stream) and kernels without vpdpbusd are left as they
are, except the int16 Winograd conv's GEMMs (vpmaddwd), which prefetch as well. Building VNNI code runs in a child process (as in test_vnni_conv_schedule.py); running it
needs a host whose OS enables AVX-512 VNNI."""

from typing import List

import pytest
import tvm
from tvm import tir

from relay_ext.lowering.config import BUILD_OPTIONS
from relay_ext.lowering.x86.prefetch_next_weights import (BLOCKS_AHEAD, block_step,
                                                         prefetch_next_weights)
from relay_ext.lowering.x86.int16_pair_conv import PMADDWD
from relay_ext.lowering.x86.int16_winograd import GEMM_STAGE
from helpers import VNNI, host_has_vnni, run_child

HOST_HAS_VNNI = host_has_vnni()


def _kernel(rows_in_parallel: bool, weights_follow_the_loop: bool = True, columns: int = 2,
            intrinsic: str = "llvm.x86.avx512.vpdpbusd.512", out: str = "out") -> tir.PrimFunc:
    """8 blocks of 16 output channels, 3 rows, a reduction of 4 steps; each step reads 2 weight
    vectors (one with the rows in the parallel loop), each for ``columns`` output columns, as
    a conv's unrolled register tile does. The parallel loop walks the blocks, or blocks x rows
    fused. The results go to a buffer named ``out``."""
    blocks, rows = 8, 3
    vectors = 1 if rows_in_parallel else 2
    block = "p // 3" if rows_in_parallel else "b"
    start = f"{block} * 512 + k * 128" if weights_follow_the_loop else "k * 128"
    dots = []
    for vector in range(vectors):
        for column in range(columns):
            acc = vector * columns + column
            dots.append(
                f"acc_1[{acc}] = T.call_llvm_pure_intrin('int32x16', '{intrinsic}', T.uint32(3), "
                f"acc_1[{acc}], T.reinterpret('int8x64', T.Broadcast(T.reinterpret('int32', "
                f"x[k * 16 + {column * 4}:k * 16 + {column * 4 + 4}]), 16)), "
                f"w[{start} + {vector * 64}:{start} + {vector * 64 + 64}])")
    accumulators = vectors * columns
    zero = "; ".join(f"acc_1[{a}] = T.Broadcast(0, 16)" for a in range(accumulators))
    total = " + ".join(f"acc_1[{a}]" for a in range(accumulators))
    body = "\n".join(" " * 16 + dot for dot in dots)
    loops = ("for p in T.parallel(24):\n" + " " * 8 + "if True:" if rows_in_parallel
             else "for b in T.parallel(8):\n" + " " * 8 + "for r in range(3):")
    row = "p" if rows_in_parallel else "b * 3 + r"
    source = f"""
@T.prim_func
def kernel(x: T.Buffer((64,), "uint8"), w: T.Buffer((8192,), "int8"),
           {out}: T.Buffer(({blocks * rows * 16},), "int32")):
    {loops}
            acc = T.allocate([{accumulators}], "int32x16", "global")
            acc_1 = T.Buffer(({accumulators},), "int32x16", data=acc)
            {zero}
            for k in range(4):
{body}
            {out}[T.Ramp(({row}) * 16, 1, 16)] = {total}
"""
    return tvm.script.from_source(source)


def _prefetches(func: tir.PrimFunc) -> List[tir.Call]:
    found = []
    tir.stmt_functor.post_order_visit(func.body, lambda n: found.append(n) if isinstance(
        n, tir.Call) and n.op.same_as(tvm.ir.Op.get("tir.prefetch")) else None)
    return found


def _address_at(call: tir.Call, values) -> int:
    """The element index ``call`` prefetches, its loop variables set by name."""
    (load,) = call.args[0].args
    index = load.indices[0]
    free = {}
    tir.stmt_functor.post_order_visit(index, lambda n: free.setdefault(n.name, n)
                                      if isinstance(n, tir.Var) else None)
    bound = {var: tir.const(values[name], var.dtype) for name, var in free.items()}
    return int(tvm.arith.Analyzer().simplify(tir.stmt_functor.substitute(index, bound)))


def _apply(func: tir.PrimFunc) -> tir.PrimFunc:
    return prefetch_next_weights(tvm.IRModule({"main": func}))["main"]


def test_each_weight_line_of_the_step_is_prefetched_two_blocks_ahead_into_l2():
    after = _apply(_kernel(rows_in_parallel=False))
    calls = _prefetches(after)
    assert len(calls) == 2  # the step's two weight vectors, one line each
    for call in calls:
        assert [int(a) for a in call.args[1:]] == [0, 2, 1]  # a read, into L2, data
    # at the head of the innermost loop, before its dot products
    loops = []
    tir.stmt_functor.post_order_visit(after.body, lambda n: loops.append(n)
                                      if isinstance(n, tir.For) else None)
    k_loop = next(loop for loop in loops if loop.loop_var.name == "k")
    assert [stmt.value.op.name for stmt in k_loop.body.seq[:2]] == ["tir.prefetch"] * 2
    addresses = sorted(_address_at(c, {"b": 1, "k": 3}) for c in calls)
    assert addresses == [(1 + BLOCKS_AHEAD) * 512 + 3 * 128, (1 + BLOCKS_AHEAD) * 512 + 3 * 128 + 64]
    # the last blocks prefetch the last block, not past the weights
    assert max(_address_at(c, {"b": 7, "k": 3}) for c in calls) == 7 * 512 + 3 * 128 + 64


def test_where_rows_share_a_block_the_prefetch_skips_whole_blocks():
    before = _kernel(rows_in_parallel=True)
    (call,) = _prefetches(_apply(before))
    # 3 iterations read one block: two blocks ahead is 6 iterations ahead
    assert _address_at(call, {"p": 4, "k": 0}) == (4 // 3 + BLOCKS_AHEAD) * 512
    assert _address_at(call, {"p": 23, "k": 1}) == 7 * 512 + 128


@pytest.mark.parametrize("intrinsic", PMADDWD.values())
def test_the_winograd_gemms_int16_dot_products_prefetch_their_weights_too(intrinsic):
    """vpmaddwd kernels are left alone (the int16 direct convs ran no faster with it), except
    the GEMMs of the int16 Winograd conv, whose transformed weights stream from memory."""
    direct = _kernel(rows_in_parallel=False, intrinsic=intrinsic)
    assert tvm.ir.structural_equal(_apply(direct), direct)
    gemm = _kernel(rows_in_parallel=False, intrinsic=intrinsic, out=GEMM_STAGE + "_global")
    calls = _prefetches(_apply(gemm))
    assert len(calls) == 2
    assert sorted(_address_at(c, {"b": 0, "k": 1}) for c in calls) == \
        [BLOCKS_AHEAD * 512 + 128, BLOCKS_AHEAD * 512 + 128 + 64]


def test_block_step_counts_the_iterations_of_one_block():
    p, k = tir.Var("p", "int32"), tir.Var("k", "int32")
    assert block_step(p * 512 + k * 128, p, 8) == 1
    assert block_step(tir.floordiv(p, 14) * 512 + k, p, 448) == 14
    assert block_step(k * 128, p, 8) is None  # the weights do not follow the loop
    assert block_step(tir.floordiv(p, 8) * 512, p, 8) is None  # one block for the whole loop


@pytest.mark.parametrize("func", [
    _kernel(rows_in_parallel=False, weights_follow_the_loop=False),  # every block reads all
    _kernel(rows_in_parallel=False, columns=1),  # each weight used once: streamed, as a dense's
    _kernel(rows_in_parallel=False, intrinsic="llvm.x86.avx512.pmaddw.d.512"),  # not VNNI
])
def test_other_kernels_are_left_as_they_are(func):
    assert tvm.ir.structural_equal(_apply(func), func)


def test_every_build_prefetches_a_vnni_convs_weights_and_the_outputs_stay_the_same():
    """A 1x1 conv whose 512 output channels are split among the parallel loop's iterations,
    built with and without the pass: prefetcht1 in its assembly only with it; on a VNNI host
    both run on the same random inputs and agree exactly."""
    out = run_child(f"""
        import numpy as np, tvm
        from tvm import relay
        from relay_ext.lowering import relay_build  # installs the VNNI intrinsics and schedule
        from relay_ext.lowering.config import BUILD_OPTIONS
        from relay_ext.lowering.x86.prefetch_next_weights import prefetch_next_weights
        from relay_ext.measure.run import run_module
        rng = np.random.default_rng(0)
        data = relay.var("data", shape=(1, 256, 7, 7), dtype="uint8")
        weight = rng.integers(-128, 128, (512, 256, 1, 1)).astype("int8")
        conv = relay.qnn.op.conv2d(data, relay.const(weight), relay.const(7), relay.const(0),
                                   relay.const(0.05), relay.const(0.02), kernel_size=(1, 1),
                                   channels=512, out_dtype="int32")
        out = relay.qnn.op.requantize(conv, relay.const(0.001), relay.const(0),
                                      relay.const(2.0), relay.const(128), out_dtype="uint8")
        mod = tvm.IRModule.from_expr(relay.Function([data], out))
        without = dict(BUILD_OPTIONS)
        without["tir.add_lower_pass"] = [p for p in BUILD_OPTIONS["tir.add_lower_pass"]
                                         if p[1] is not prefetch_next_weights]
        libs = []
        for config in (BUILD_OPTIONS, without):
            with tvm.transform.PassContext(opt_level=3, config=config):
                libs.append(relay.build(mod, target="{VNNI}"))
        counts = [lib.get_lib().get_source("asm").count("prefetcht1") for lib in libs]
        equal = "skipped"
        if {HOST_HAS_VNNI}:
            x = {{"data": rng.integers(0, 256, (1, 256, 7, 7)).astype("uint8")}}
            a, b = (run_module(lib, x)[0] for lib in libs)
            equal = bool(np.array_equal(a, b)) and len(np.unique(a)) > 16
        print(counts[0], counts[1], equal)
    """)
    with_pass, without_pass, equal = out.split()
    assert int(with_pass) > 0 and int(without_pass) == 0, out
    assert equal == ("True" if HOST_HAS_VNNI else "skipped"), out
    assert any(entry[1] is prefetch_next_weights for entry in BUILD_OPTIONS["tir.add_lower_pass"])
    if not HOST_HAS_VNNI:
        pytest.skip("built and checked the assembly only: this CPU has no AVX-512 VNNI to run it")
