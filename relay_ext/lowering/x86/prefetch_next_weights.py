"""A TIR pass that prefetches the weights a VNNI kernel's thread reads next into the L2 cache
(and an int16 Winograd conv's GEMMs', below).

A VNNI conv kernel runs its outer loop in parallel over blocks of output channels (or over blocks
x rows), and every iteration reads its block's weights in the reduction loop, each weight vector
for several output columns. Inside a model the weights of a late layer come from memory: at batch
1 the 1x1 convs of ResNet-50's last stage read 1-2 MB of weights for 0.1-0.2 ms of work, and the
first pass over each block waits on memory while the rest of the block reads the cache. This pass
makes each reduction step also prefetch the same cache lines of the block two blocks ahead, so
that the weights stream in while the block before them is computed::

    for chunk in T.parallel(64):                       # 32 output channels a chunk
        for oh in range(7):
            for ic in range(32):
                acc[0] = vpdpbusd(acc[0], x(oh, ic, 0), w[chunk * 16384 + ic * 256 : ... + 64])
                ...                                     # the step's 8 weight vectors

becomes::

    for chunk in T.parallel(64):
        for oh in range(7):
            for ic in range(32):
                T.prefetch(T.address_of(w[T.min(chunk + 2, 63) * 16384 + ic * 256]), 0, 2, 1)
                ...                                     # one prefetch a weight vector (line)
                acc[0] = vpdpbusd(acc[0], x(oh, ic, 0), w[chunk * 16384 + ic * 256 : ... + 64])
                ...

"Two blocks ahead" counts blocks of weights, not iterations: where the parallel loop also walks
rows (``chunk_oh_fused``: 14 iterations share a block's weights), the step is found by
evaluating the weight index at successive iterations, and the prefetch targets the iteration 2 x
14 further. The prefetch goes to L2 (``prefetcht1``): into L1 (``prefetcht0``) the convs ran
slower (docs/cpu.md). The iteration is clamped to the loop's last, so no
address leaves the buffer. Left alone: kernels whose weights do not depend on the parallel loop
(all of a small conv's weights read in every iteration, already in cache), kernels that use each
weight vector once (a dense layer at batch 1 streams its weights, which the hardware prefetcher
follows; a prefetch per product made ResNet-50's classifier 1.2x slower), and every kernel without
``vpdpbusd`` (AMX, float, and the direct int16 convs of targets without VNNI, whose AVX2 builds
ran ResNet-50 1.02x slower with it). The one ``vpmaddwd`` kernel served is the int16 Winograd
conv's (:mod:`.int16_winograd`, a kernel that writes its GEMM stage): where its transformed weights
pass L2 its parallel loop walks the GEMMs (transform position x output vector), each reading its
own weights, which come from memory inside a model (ResNet-18's 512-channel convs: 8 MB); with
the prefetch whole ResNet-18 and ResNet-50 builds for AVX2 ran 0.88x and 0.95-0.96x the time
(docs/cpu.md). A block's rows all issue the prefetches (only the first row's
fetch anything; the rest find the lines in L2): issuing each line once a block ran no faster.
Runs as a phase-2 lowering pass (``tir.add_lower_pass``: the tensorized VNNI calls exist from
then on) in every build quantfuse makes; the outputs are the same (a prefetch changes no value).
"""

from __future__ import annotations

from typing import List, Optional, Set

import tvm
from tvm import tir

from relay_ext.lowering.x86.int16_pair_conv import PMADDWD
from relay_ext.lowering.x86.int16_winograd import GEMM_STAGE
from relay_ext.lowering.x86.vnni_intrinsics import VPDPBUSD

BLOCKS_AHEAD = 2
# a weight vector used by fewer dot products than this in the loop body is streamed once, as a
# dense layer's: the hardware prefetcher follows it, and a prefetch per product only adds loads
MIN_USES_PER_LINE = 2
# llvm.prefetch(address, rw = read, locality 2 = prefetcht1 (L2), cache = data)
READ, LOCALITY_L2, DATA_CACHE = 0, 2, 1


def _weight_loads(stmt: tir.Stmt, parallel: tir.Var, dot_ids: Set[int]) -> List[tir.BufferLoad]:
    """The vector loads that are the weight operand (the last argument) of the dot product calls
    (LLVM intrinsics ``dot_ids``) in ``stmt`` and whose index depends on ``parallel``."""
    found: List[tir.BufferLoad] = []

    def visit(node):
        if not (isinstance(node, tir.Call) and isinstance(node.op, tvm.ir.Op)
                and node.op.name == "tir.call_llvm_pure_intrin"
                and isinstance(node.args[0], tir.IntImm) and int(node.args[0]) in dot_ids):
            return
        weight = node.args[-1]
        if isinstance(weight, tir.BufferLoad) and len(weight.indices) == 1 and \
                _uses(weight.indices[0], parallel):
            found.append(weight)

    tir.stmt_functor.post_order_visit(stmt, visit)
    return found


def _uses(expr: tir.PrimExpr, var: tir.Var) -> bool:
    hits: List[bool] = []
    tir.stmt_functor.post_order_visit(expr, lambda n: hits.append(True) if n.same_as(var) else None)
    return bool(hits)


def _base(index: tir.PrimExpr) -> tir.PrimExpr:
    return index.base if isinstance(index, tir.Ramp) else index


_ARITH = {tir.Add: lambda a, b: a + b, tir.Sub: lambda a, b: a - b, tir.Mul: lambda a, b: a * b,
          tir.FloorDiv: lambda a, b: a // b, tir.FloorMod: lambda a, b: a % b,
          tir.Min: min, tir.Max: max}


def _evaluate(expr: tir.PrimExpr, var: tir.Var, value: int) -> Optional[int]:
    """``expr`` at ``var = value`` and every other variable 0; None for an expression other than
    integer arithmetic."""
    if isinstance(expr, tir.IntImm):
        return int(expr.value)
    if isinstance(expr, tir.Var):
        return value if expr.same_as(var) else 0
    if isinstance(expr, tir.Cast):
        return _evaluate(expr.value, var, value)
    operation = _ARITH.get(type(expr))
    if operation is None:
        return None
    left, right = _evaluate(expr.a, var, value), _evaluate(expr.b, var, value)
    if left is None or right is None or (isinstance(expr, (tir.FloorDiv, tir.FloorMod))
                                         and right == 0):
        return None
    return operation(left, right)


def block_step(index: tir.PrimExpr, parallel: tir.Var, extent: int) -> Optional[int]:
    """How many iterations of the parallel loop read one block of weights: the first iteration
    at which ``index`` (every other variable at 0) differs from iteration 0's; None where it
    never does (or is not integer arithmetic)."""
    first = _evaluate(index, parallel, 0)
    if first is None:
        return None
    for iteration in range(1, extent):
        value = _evaluate(index, parallel, iteration)
        if value is None:
            return None
        if value != first:
            return iteration
    return None


def _with_prefetches(loop: tir.For, parallel: tir.For, dot_ids: Set[int]) -> Optional[tir.For]:
    """``loop`` (an innermost loop of dot calls) with a prefetch of each of its weight lines for
    the block :data:`BLOCKS_AHEAD` ahead, or None where it reads no block that depends on the
    parallel loop."""
    loads = _weight_loads(loop.body, parallel.loop_var, dot_ids)
    if not loads or not isinstance(parallel.extent, tir.IntImm):
        return None
    extent = int(parallel.extent)
    step = block_step(_base(loads[0].indices[0]), parallel.loop_var, extent)
    if step is None:
        return None
    var = parallel.loop_var
    ahead = tir.Min(var + tir.const(step * BLOCKS_AHEAD, var.dtype),
                    tir.const(extent - 1, var.dtype))  # no address past the last block
    lines: List[tir.BufferLoad] = []
    for load in loads:
        if not any(tvm.ir.structural_equal(load, other) for other in lines):
            lines.append(load)  # one prefetch a weight vector (one line)
    if len(loads) < MIN_USES_PER_LINE * len(lines):
        return None  # each weight read once (a dense layer): the hardware's stream prefetch
    prefetches: List[tir.Stmt] = []
    for load in lines:
        base = _base(load.indices[0])
        target = tir.BufferLoad(load.buffer, [tir.stmt_functor.substitute(base, {var: ahead})])
        address = tir.call_intrin("handle", "tir.address_of", target)
        prefetches.append(tir.Evaluate(tir.call_intrin("int32", "tir.prefetch", address, READ,
                                                       LOCALITY_L2, DATA_CACHE)))
    return tir.For(loop.loop_var, loop.min, loop.extent, loop.kind,
                   tir.SeqStmt([*prefetches, loop.body]), loop.thread_binding, loop.annotations)


def _has_for(stmt: tir.Stmt) -> bool:
    found: List[bool] = []
    tir.stmt_functor.post_order_visit(stmt, lambda n: found.append(True)
                                      if isinstance(n, tir.For) else None)
    return bool(found)


def _innermost_dot_loops(parallel: tir.For, dot_ids: Set[int]) -> tir.Stmt:
    def rewrite(node):
        if node.kind not in (tir.ForKind.SERIAL, tir.ForKind.UNROLLED) or _has_for(node.body):
            return None  # only the innermost loops hold the dot calls
        return _with_prefetches(node, parallel, dot_ids)

    return tir.stmt_functor.ir_transform(parallel.body, None, rewrite, ["tir.For"])


def _runs_winograd_gemms(func: tir.PrimFunc) -> bool:
    """Whether ``func`` writes the GEMM stage of the int16 Winograd conv."""
    found: List[bool] = []
    tir.stmt_functor.post_order_visit(func.body, lambda n: found.append(True) if isinstance(
        n, tir.BufferStore) and n.buffer.name.startswith(GEMM_STAGE) else None)
    return bool(found)


@tir.transform.prim_func_pass(opt_level=0, name="quantfuse.PrefetchNextWeights")
def prefetch_next_weights(func: tir.PrimFunc, _mod, _ctx) -> tir.PrimFunc:
    """Prefetch, in each innermost reduction loop of ``vpdpbusd`` calls (or, in the Winograd
    conv's GEMMs, ``vpmaddwd`` calls), the weight lines of the block :data:`BLOCKS_AHEAD` blocks
    further along the enclosing parallel loop."""
    names = [VPDPBUSD] + (list(PMADDWD.values()) if _runs_winograd_gemms(func) else [])
    dot_ids = {tvm.target.codegen.llvm_lookup_intrinsic_id(name) for name in names} - {0}
    if not dot_ids:  # an LLVM without the instructions
        return func

    def rewrite(node):
        if node.kind != tir.ForKind.PARALLEL:
            return None
        body = _innermost_dot_loops(node, dot_ids)
        if body.same_as(node.body):
            return None
        return tir.For(node.loop_var, node.min, node.extent, node.kind, body,
                       node.thread_binding, node.annotations)

    body = tir.stmt_functor.ir_transform(func.body, None, rewrite, ["tir.For"])
    return func if body.same_as(func.body) else func.with_body(body)
