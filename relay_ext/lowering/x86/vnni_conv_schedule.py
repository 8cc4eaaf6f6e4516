"""TVM's default int8 conv2d schedule for AVX-512 VNNI targets, with independent accumulators.

Every conv2d that is not tuned (all of them in an untuned build; in a tuned build, each task the
database has no record for) is compiled with TOPI's x86 schedule ``conv2d_NCHWc_int8`` and the
AutoTVM fallback configuration. For a k x k kernel (k > 1) that schedule computes the conv at the
innermost output-width loop of the fused consumer (``inline_fused=True`` in
``topi/x86/conv2d_avx_common.py``): one output vector of 16 channels at a time, its whole
reduction (``ic/4 * k * k`` dot products) into one accumulator. With AVX-512 alone each dot
product is ``vpmaddubsw`` + ``vpmaddwd`` + ``vpaddd`` and only the ``vpaddd`` chain is serial
(latency 1; LLVM reassociates it). With VNNI it is one ``vpdpbusd`` that reads and writes the
accumulator, so the reduction becomes a chain of instructions with a latency of several cycles
each, issued one after the other: TVM's untuned VNNI build is slower than its AVX-512 build
(docs/vnni.md has the measurements).

:func:`schedule_conv_NCHWc_int8_vnni` keeps TOPI's loop order and tensor intrinsic and computes
the conv for a block of ``reg_n`` output columns at a time (``compute_at`` the consumer's
output-width *chunk*, not its innermost column), so the unrolled block holds ``reg_n`` independent
accumulators. ``reg_n`` is the largest divisor of the output width that keeps the block within
:data:`MAX_ACCUMULATORS` vectors (their buffer then stays on the stack: TVM moves a local buffer
of 1 KiB or more to the heap, where LLVM no longer keeps it in registers).

:func:`install` puts a dispatcher in TOPI's place (``conv2d_avx_common._schedule_conv_NCHWc_int8``,
which ``schedule_conv2d_NCHWc_int8`` looks up on each call): for a target with AVX-512 VNNI it
schedules as above, for every other target it calls TOPI's own function, unchanged. Only the
schedule changes, not the computation: the layouts Relay chooses, the TIR that MetaSchedule
tunes (and so the workloads of existing tuning databases) and the results stay the same.
VNNI 1x1 convs keep their own TOPI schedule, which already blocks rows and columns; the int16
convs of targets without VNNI (:mod:`.int16_pair_conv`) take this schedule for every kernel size.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from tvm import autotvm, te
from tvm.target import Target
from tvm.target.codegen import target_has_features

logger = logging.getLogger(__name__)

# Accumulators (16 x int32 vectors) a block keeps live: enough to cover vpdpbusd's latency
# (5 cycles, up to two per cycle), fewer than the 32 zmm registers, and under TVM's 1 KiB stack
# limit for the block's buffer (15 x 64 bytes).
MAX_ACCUMULATORS = 15
INT32_LANES = 16  # one zmm register of int32
INT8_GROUP = 4  # bytes a vpdpbusd lane sums
# TVM's runtime::kMaxStackAlloca: a CPU buffer this large or larger is allocated on the heap
# (TVMBackendAllocWorkspace, a runtime call), where LLVM no longer keeps it in registers
STACK_BYTES = 1024

_topi_schedule: Optional[Callable[..., Any]] = None


def target_uses_vnni(target: Optional[Target] = None) -> bool:
    """True when TOPI's int8 conv for ``target`` (default: the current target) tensorizes with the
    512-bit VNNI dot product, the schedules this module replaces."""
    target = target if target is not None else Target.current(allow_none=True)
    if target is None or target.kind.name != "llvm":
        return False
    return bool(target_has_features(["avx512vnni", "avx512bw", "avx512f"], target))


def block_width(out_width: int, oc_bn: int, limit: int = MAX_ACCUMULATORS,
                vectors_per_column: Optional[int] = None) -> int:
    """Output columns per block: the largest divisor of ``out_width`` whose block of ``columns x
    vectors_per_column`` accumulators (default ``oc_bn / 16``, a channel block's int32 vectors) is
    at most ``limit``, and whose buffer (``columns x oc_bn`` int32) stays below
    :data:`STACK_BYTES`, on the stack."""
    if vectors_per_column is None:
        vectors_per_column = oc_bn // INT32_LANES
    vectors_per_column = max(1, vectors_per_column)
    best = 1
    for columns in range(1, out_width + 1):
        if out_width % columns:
            continue
        if columns * vectors_per_column > limit or columns * oc_bn * 4 >= STACK_BYTES:
            break
        best = columns
    return best


def rows_outside(out_height: int, out_width: int, out_channels: int, taps: int) -> bool:
    """Whether a conv's parallel loop should walk its output rows outside its output channel
    blocks: where its output pixels outnumber its output channels x kernel taps (per input
    channel, its input outweighs its weights; ResNet-50's 1x1 convs at 56x56 and 28x28). Each
    thread then computes every channel of a band of rows, reading only that band of the input,
    instead of each channel block reading the whole input. Both the no-search VNNI designs
    (:mod:`relay_ext.schedules.register_tiles`) and the int16 convs of :mod:`.int16_pair_conv`
    decide by it."""
    return out_height * out_width > out_channels * taps


def schedule_conv_NCHWc_int8_vnni(s: te.Schedule, cfg: Any, data_vec: te.Tensor,
                                  kernel_vec: te.Tensor, conv_out: te.Tensor,
                                  last: te.Tensor, lanes: int = INT32_LANES,
                                  intrin: Optional[Any] = None,
                                  columns: Optional[int] = None,
                                  vectors_outside: bool = False,
                                  rows_outside: bool = False) -> te.Schedule:
    """TOPI's ``schedule_conv_NCHWc_cpu_common_int8`` (TOPI's schedule of k x k kernels) with the
    conv computed per block of :func:`block_width` output columns: that many independent VNNI
    accumulators. ``lanes``, ``intrin`` and ``columns`` (default: 16, TOPI's VNNI dot product, the
    block width) give the same schedule another tensor intrinsic (the int16 convs of
    :mod:`.int16_pair_conv`, 1x1 ones included). ``vectors_outside``: a channel block of several
    vectors is computed one vector at a time, each with its own pass over the reduction, so a
    block of ``columns`` holds ``columns`` accumulators, not ``columns`` times the vectors.
    ``rows_outside`` (see :func:`rows_outside`): the parallel loop walks output rows outside
    output channel blocks (TOPI's order is the other way round)."""
    # pylint: disable=import-outside-toplevel,too-many-locals,too-many-statements,too-many-arguments
    from tvm.topi.utils import get_const_tuple
    from tvm.topi.x86.tensor_intrin import dot_16x1x16_uint8_int8_int32

    unroll_kw = cfg["unroll_kw"]
    unroll_kw = bool(unroll_kw if isinstance(unroll_kw, (int, bool)) else unroll_kw.val)
    _, _, _, out_width, oc_bn = get_const_tuple(conv_out.shape)
    reg_n = columns if columns is not None else block_width(out_width, oc_bn)

    # padding, and the layout transforms that only TOPI's own tests leave in the graph: as TOPI
    if isinstance(s[data_vec].op, te.tensor.ComputeOp) and "pad" in data_vec.op.tag:
        batch, ic_chunk, ih, _, _ = s[data_vec].op.axis
        s[data_vec].parallel(s[data_vec].fuse(batch, ic_chunk, ih))
        data_vec = data_vec.op.input_tensors[0]
    if autotvm.GLOBAL_SCOPE.in_tuning:
        for tensor in (data_vec, kernel_vec):
            if isinstance(tensor.op, te.tensor.ComputeOp):
                s[tensor].pragma(s[tensor].op.axis[0], "debug_skip_region")
    elif isinstance(kernel_vec.op, te.tensor.ComputeOp) and kernel_vec.name == "kernel_vec":
        batch, ic_chunk, ih, _, _ = s[data_vec].op.axis
        s[data_vec].parallel(s[data_vec].fuse(batch, ic_chunk, ih))
        oc_chunk, ic_chunk, k_h, k_w, ic_block, oc_block, _ = s[kernel_vec].op.axis
        s[kernel_vec].reorder(oc_chunk, k_h, ic_chunk, k_w, ic_block, oc_block)
        s[kernel_vec].vectorize(oc_block)
        s[kernel_vec].parallel(s[kernel_vec].fuse(oc_chunk, k_h))

    conv, out = conv_out, last
    accumulate = s.cache_write(conv, "global")

    # the conv's output block: rows in parallel, columns in blocks of reg_n
    batch, oc_chunk, oh, ow, oc_block = s[conv].op.axis
    ow_chunk, ow_block = s[conv].split(ow, factor=reg_n)
    outer = [oh, oc_chunk] if rows_outside else [oc_chunk, oh]
    s[conv].reorder(*outer, ow_chunk, ow_block, oc_block)
    parallel_axis = s[conv].fuse(batch, *outer)
    s[conv].vectorize(oc_block)
    if conv == out:
        s[conv].parallel(parallel_axis)
    s[accumulate].compute_at(s[conv], ow_chunk)

    # the reduction: TOPI's loop order; ow_block and the 16-lane channel blocks are unrolled
    # innermost, so each dot product of the block goes to an accumulator of its own
    _, oc_chunk, oh, ow, oc_block = s[accumulate].op.axis
    kh, kw, ic_outer, ic_f_inner, ic_s_inner = s[accumulate].op.reduce_axis
    ow_chunk, ow_block = s[accumulate].split(ow, factor=reg_n)
    oc_f_inner, oc_s_inner = s[accumulate].split(oc_block, factor=lanes)
    taps = [ic_f_inner, kw] if unroll_kw else [kw, ic_f_inner]
    if vectors_outside:  # one vector of the channel block per pass over the reduction
        order = [oc_f_inner, ic_outer, kh, *taps, ow_block]
    else:  # every vector of the block in the unrolled tile
        order = [ic_outer, kh, *taps, ow_block, oc_f_inner]
    s[accumulate].reorder(oc_chunk, oh, ow_chunk, *order, oc_s_inner, ic_s_inner)
    if unroll_kw:
        s[accumulate].unroll(kw)
    s[accumulate].tensorize(oc_s_inner, intrin if intrin is not None else dot_16x1x16_uint8_int8_int32())
    s[accumulate].unroll(ow_block)
    if not vectors_outside:
        s[accumulate].unroll(oc_f_inner)

    if conv != out:  # the fused consumer (requantize, add, relu ...): the conv per column block
        if len(s[out].op.axis) == 5:
            batch, oc_chunk, oh, ow, oc_block = s[out].op.axis
        elif len(s[out].op.axis) == 4:
            batch, oc, oh, ow = s[out].op.axis
            oc_chunk, oc_block = s[out].split(oc, factor=oc_bn)
        else:
            raise ValueError(f"Unsupported output ndim: {len(s[out].op.axis)}")
        ow_chunk, ow_block = s[out].split(ow, factor=reg_n)
        outer = [oh, oc_chunk] if rows_outside else [oc_chunk, oh]
        s[out].reorder(*outer, ow_chunk, ow_block, oc_block)
        parallel_axis = s[out].fuse(batch, *outer)
        s[conv].compute_at(s[out], ow_chunk)
        s[out].vectorize(oc_block)
        s[out].parallel(parallel_axis)
    return s


def _dispatch(s, cfg, data_vec, kernel_vec, conv_out, last):
    """In TOPI's place: our schedule for AVX-512 VNNI targets, TOPI's own for the others."""
    if target_uses_vnni():
        return schedule_conv_NCHWc_int8_vnni(s, cfg, data_vec, kernel_vec, conv_out, last)
    return _topi_schedule(s, cfg, data_vec, kernel_vec, conv_out, last)


def topi_schedule() -> Callable[..., Any]:
    """TOPI's own k x k int8 conv schedule (the one :func:`install` replaces)."""
    from tvm.topi.x86 import conv2d_avx_common  # pylint: disable=import-outside-toplevel

    return _topi_schedule or conv2d_avx_common._schedule_conv_NCHWc_int8  # pylint: disable=protected-access


def install() -> bool:
    """Put the dispatcher in TOPI's place (idempotent); True once it is there."""
    global _topi_schedule  # pylint: disable=global-statement
    from tvm.topi.x86 import conv2d_avx_common  # pylint: disable=import-outside-toplevel

    if _topi_schedule is None:
        _topi_schedule = conv2d_avx_common._schedule_conv_NCHWc_int8  # pylint: disable=protected-access
        conv2d_avx_common._schedule_conv_NCHWc_int8 = _dispatch  # pylint: disable=protected-access
        logger.debug("int8 conv2d on AVX-512 VNNI targets: %d accumulators per block at most",
                     MAX_ACCUMULATORS)
    return True


def vpdpbusd_accumulators(lib: Any) -> int:
    """Distinct registers that ``vpdpbusd`` writes in a built module's assembly (AT&T syntax: the
    last operand), i.e. its independent accumulator chains: 1 means every VNNI dot product waits
    for the previous one (5 cycles each), 0 that the code has none."""
    return len({line.split(",")[-1].strip()
                for line in lib.get_lib().get_source("asm").splitlines() if "vpdpbusd" in line})
