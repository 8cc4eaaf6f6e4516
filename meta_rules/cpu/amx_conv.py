"""AMXConv: int8 3x3, 1x1 and stem convolutions on AMX tiles (``tdpbusd``), a schedule rule.

TOPI's int8 conv on x86 (``conv2d_NCHWc_int8``) with 64 input channels per block (data
``NCHW64c``, weights ``OIHW16i16o4i``: what ``relay_ext.lowering.x86.amx_layout`` chooses where the
target has AMX) computes::

    for n, oc_chunk, oh, ow, oc_block, kh, kw, ic_outer, ic_f_inner, ic_s_inner in T.grid(
            1, OC // 16, OH, OW, 16, K, K, IC // 64, 16, 4):       # K: 3 or 1
        with T.block("conv2d_NCHWc_int8"):
            ...
            conv[n, oc_chunk, oh, ow, oc_block] += T.Cast("int32", data_pad[n, ic_outer,
                oh + kh, ow + kw, ic_f_inner * 4 + ic_s_inner]) * T.Cast("int32", kernel[
                oc_chunk, ic_outer, kh, kw, ic_f_inner, oc_block, ic_s_inner])

Every (oh, 16 output channels) slice of that is a matrix product AMX does in one instruction:
``R`` consecutive output pixels (tile rows) x 64 input channels (one tile row of data: 64 bytes,
the pixels ``ic_bn`` bytes apart in ``NCHW64c``) times the 16x16x4 weight block (one 16x64-byte
tile, already in the order ``tdpbusd`` wants). The rule splits the conv into blocks of ``MH``
output rows x ``R`` pixels x 32 output channels, tensorizes each block's whole reduction (K x K
taps x IC/64) with one intrinsic that keeps its ``2 * MH`` accumulator tiles in tile registers
(set to zero in the tiles, stored once), and runs the blocks in parallel. The rule tiles and
marks each block; its postproc :class:`TensorizeAMXConv` decomposes the reduction and tensorizes
(the reason for the split is in :func:`schedule_amx_conv`)::

    for fused in T.parallel(OH // MH * OC // 32):          # n, oh block, oc pair (*)
        for ow_o in range(OW // R):
            conv_init ...        # decompose_reduction; tensorized with a no-op: the tiles start at 0
            with T.block("conv2d_NCHWc_int8_o"):           # blockize + tensorize
                T.call_llvm_intrin(... "llvm.x86.sttilecfg" ...), and if that differs:
                T.call_llvm_intrin(... "llvm.x86.ldtilecfg" ...)
                ... tilezero (accumulators), then per tap and 64 channels:
                    tileloadd64 (MH data tiles, 2 weight tiles), tdpbusd x (2 * MH)
                ... tilestored64 (accumulators)
            epilogue (the conv's one consumer, reverse_compute_at here)

(*) Row blocks outside the channel pairs where the conv's input outweighs its weights, so that
each thread takes a band of rows (:func:`rows_outermost`); the channel pairs outside otherwise.

For a conv whose weights for one output-channel pair exceed 32 KiB (3x3 of 128 input channels
or more, 1x1 of more than 1024) the rule returns a second design, the reduction in chunks
(:func:`reduction_chunk`) with the rows inside the chunk loop, so that a chunk's weights serve
every row from L1::

    for fused in T.parallel(OC // 32):                     # n, oc pair
        conv_init ... (all rows)
        for ico_o, oh_o, ow_o in T.grid(IC // 64 // chunk, OH // MH, OW // R):
            with T.block("conv2d_NCHWc_int8_o_update"):    # the same intrinsic, k = chunk
                ...
        epilogue (all rows of the pair)

A 1x1 conv whose input is in TOPI's 16-channel blocks (``NCHW16c``, weights ``OIHW4i16o4i``:
what the layout pass leaves every 1x1 conv) is taken too: its input is copied into 64-channel
blocks inside the kernel (band by band where the rows go in parallel, whole and first where the
channel pairs do: :mod:`meta_rules.cpu.amx_repack`), then computed as above from the copy
(intrinsics ``quantfuse_amx_conv1x1b16_...``); no layout transform runs before the conv.

The stem (the first conv: its 3 input channels padded to one 4-channel block, ``NCHW4c``) has no
64 channels for a tile row; its taps fill the row instead. For one kernel row ``kh``, the K taps
of output pixel ``ow`` read ``data[.., oh * S + kh, ow * S + kw, 0:4]`` for kw in 0..K-1: K x 4
contiguous bytes, and the next pixel's start ``S * 4`` bytes further. So a data tile is R rows of
K x 4 bytes, ``S * 4`` bytes apart (rows overlap; ``tileloadd`` takes any stride), and the weight
tile of ``kh`` is the K rows ``kernel[oc, 0, kh, 0:K, 0, 0:16, 0:4]``, already contiguous in TOPI's
layout: one ``tdpbusd`` per kernel row instead of one per tap. The same rule, schedule and
intrinsic do it (``AMXConvShape.ic_block`` 4: ``quantfuse_amx_conv7x7s2c4_m2_r16_k1``) for any
conv whose input is one block of 4 x n channels with K x 4n <= 64 bytes and K > 1.

Why one intrinsic per block's whole reduction rather than one 16x16x64 tile product: with the
latter, MetaSchedule's tensorization keeps no register state between two calls, so every
``tdpbusd`` would load and store its accumulator tile; benchmarks/amx_conv_probe.py measured that
form slower on three of ResNet-18's four 3x3 conv shapes (docs/cpu.md).

The intrinsics are :mod:`meta_rules.cpu.amx_intrinsics`, the postproc :mod:`meta_rules.cpu.amx_tensorize`,
the tile sizes and target features :mod:`meta_rules.cpu.amx_tiles`.

The rule only touches a block that has exactly that shape (3x3 or 1x1 with 64-channel data
blocks, a 1x1 with 16-channel ones, or the stem's one narrow block;
uint8 x int8 -> int32, 16-channel output blocks, an even number of them; stride 1, or 2: the
data tile's rows are then 128 bytes apart, and the block stays open to the other rules too), and
only for a target whose LLVM features include ``amx-tile`` and ``amx-int8``; every other block is
left as it came, for the rules after it. Code from it runs only in a process that holds the
kernel's permission for AMX tile data (``relay_ext.lowering.x86.amx``): the tile configuration
is loaded by the intrinsic itself (``ldtilecfg`` is per thread; TVM's pool threads never see it
otherwise), only where the thread's current one (``sttilecfg``) differs: ``ldtilecfg`` costs as
much as a dozen ``tdpbusd`` (docs/cpu.md).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import List, Optional, Tuple

import tvm
from tvm import tir
from tvm.meta_schedule.schedule_rule import AutoInline, PyScheduleRule, ScheduleRule
from tvm.meta_schedule.utils import derived_object
from tvm.target import Target
from tvm.tir.schedule import BlockRV, Schedule

from meta_rules.base.custom_rules import SCHEDULE_RULE_KEY
from meta_rules.base.placement import Placement
from meta_rules.base.tvm_errors import tvm_error_message
from meta_rules.cpu.amx_intrinsics import (REPACKED_BLOCK, STRIDES, AMXConvShape,
                                           register_intrinsic, supported)
from meta_rules.cpu.amx_repack import repack_input
from meta_rules.cpu.amx_tiles import OC_TILES, TILE_BYTES, TILE_ROWS, target_has_amx

logger = logging.getLogger(__name__)

MIN_ROWS = 4  # fewer pixels per tile (a width with no divisor from 4 to 16) waste the tiles
AMX_ANNOTATION = "quantfuse.amx_conv_intrinsic"  # on a blockized conv block: the intrinsic
# The weights one output-channel pair may read over its reduction and still find in L1 (of the
# 48 KiB L1 data cache of the AMX cores: the data and accumulator tiles need the rest).
L1_WEIGHT_BYTES = 32 * 1024


def _rows_for(width: int) -> int:
    return max(r for r in range(1, TILE_ROWS + 1) if width % r == 0)


def _static(extent) -> Optional[int]:
    return int(extent) if isinstance(extent, tir.IntImm) else None


def amx_conv_shape(sch: Schedule, block: BlockRV) -> Optional[AMXConvShape]:
    """The shape of ``block`` when it is a conv the rule can tensorize (see the module doc);
    None otherwise."""
    stmt = sch.get(block)
    iters = stmt.iter_vars
    if len(iters) != 10 or len(stmt.writes) != 1:
        return None
    kinds = "".join("S" if it.iter_type == tir.IterVar.DataPar else
                    "R" if it.iter_type == tir.IterVar.CommReduce else "?" for it in iters)
    extents = [_static(it.dom.extent) for it in iters]
    if kinds != "SSSSSRRRRR" or None in extents:
        return None
    n, oc_chunks, height, width, oc_block, kh, kw, ic_blocks, ic_f, ic_s = extents
    if (n, oc_block, ic_s) != (1, 16, 4) or oc_chunks % OC_TILES:
        return None
    ic_block = ic_f * ic_s  # bytes of a data block: 64, or the stem's narrow one (folded taps)
    repack = (ic_block == REPACKED_BLOCK and kh == 1 and ic_blocks % (TILE_BYTES // ic_block) == 0
              and ic_blocks > 1)  # a 1x1 conv of 16-channel blocks, read through a repacked copy
    if ic_block > TILE_BYTES or (ic_block < TILE_BYTES and ic_blocks != 1 and not repack):
        return None
    if kh != kw:
        return None
    if not isinstance(stmt.body, tir.BufferStore) or stmt.init is None:
        return None
    out = stmt.writes[0].buffer
    data, kernel = _data_and_kernel(stmt)
    if data is None or out.dtype != "int32" or data.dtype != "uint8" or kernel.dtype != "int8":
        return None
    if [_static(d) for d in kernel.shape] != [oc_chunks, ic_blocks, kh, kw, ic_f, 16, 4]:
        return None
    if _static(data.shape[-1]) != ic_block or len(data.shape) != 5:
        return None
    stride = _read_stride(stmt, data)
    if stride is None or _rows_for(width) < MIN_ROWS:
        return None
    shape = AMXConvShape(oc_chunks, ic_blocks, height, width, _rows_for(width),
                         2 if height % 2 == 0 else 1, stride, kh, ic_block)
    if repack:
        return dataclasses.replace(shape, ic_blocks=ic_blocks * ic_block // TILE_BYTES,
                                   ic_block=TILE_BYTES, source_block=ic_block)
    return shape if supported(kh, stride, ic_block) else None


def _data_and_kernel(stmt: tir.Block) -> Tuple[Optional[tir.Buffer], Optional[tir.Buffer]]:
    buffers = [region.buffer for region in stmt.reads if region.buffer != stmt.writes[0].buffer]
    if len(buffers) != 2:
        return None, None
    data = [b for b in buffers if len(b.shape) == 5]
    kernel = [b for b in buffers if len(b.shape) == 7]
    return (data[0], kernel[0]) if data and kernel else (None, None)


def _read_stride(stmt: tir.Block, data: tir.Buffer) -> Optional[int]:
    """The stride S (one of STRIDES) when the data is read at [n, ic_outer, oh * S + kh,
    ow * S + kw, ic_f * 4 + ic_s] (dilation 1), as the intrinsic's tile loads assume; else None."""
    v = [it.var for it in stmt.iter_vars]
    found: List[tir.BufferLoad] = []

    def visit(node):
        if isinstance(node, tir.BufferLoad) and node.buffer == data:
            found.append(node)

    tir.stmt_functor.post_order_visit(stmt.body, visit)
    if len(found) != 1:
        return None
    analyzer = tvm.arith.Analyzer()
    for stride in STRIDES:
        expected = [v[0], v[7], v[2] * stride + v[5], v[3] * stride + v[6], v[8] * 4 + v[9]]
        if all(analyzer.can_prove_equal(a, b) for a, b in zip(found[0].indices, expected)):
            return stride
    return None


# ---------------------------------------------------------------------------------------------
# The schedule.

def pair_weight_bytes(shape: AMXConvShape) -> int:
    """The bytes of weights one output-channel pair reads over its whole reduction: K*K taps x
    the input channels x 16 output channels x 2."""
    return (shape.kernel * shape.kernel * shape.ic_blocks * shape.ic_block
            * OC_TILES * TILE_ROWS)


def input_bytes(shape: AMXConvShape) -> int:
    """The bytes of the conv's input (uint8, its padding aside): the output's rows and columns
    times the stride, times the input channels."""
    return (shape.height * shape.stride) * (shape.width * shape.stride) * shape.ic_blocks \
        * shape.ic_block


def rows_outermost(shape: AMXConvShape) -> bool:
    """Whether the parallel loop goes over row blocks first (each thread takes a band of rows,
    every output channel) rather than over output-channel pairs first (each thread takes a share
    of the channels, every row): rows where the input outweighs the weights. Inside the model a
    thread then reads the rows the thread of the op before wrote (in its own L2) and reads all
    the weights, where the channel split would have each thread read the whole input, half of it
    from the other core's cache (ResNet-50's 3x3 64->64 at 56x56: 0.134 to 0.084 ms in the
    model); a conv with more weights than input (the 7x7 layers) keeps the channel split, each
    thread reading half of them (docs/cpu.md)."""
    return input_bytes(shape) >= pair_weight_bytes(shape) * (shape.oc_chunks // OC_TILES)


def banded(shape: AMXConvShape) -> bool:
    """Whether a repacked conv (:attr:`AMXConvShape.repacked`) copies its input band by band
    inside the parallel loop over rows (:func:`rows_outermost`) rather than whole, in a parallel
    pass of its own before the conv's loop (:mod:`meta_rules.cpu.amx_repack`)."""
    return shape.repacked and rows_outermost(shape)


def reduction_chunk(shape: AMXConvShape) -> Optional[int]:
    """64-channel blocks per intrinsic call for the rule's second design of a deep conv, None
    where it has none: a chunk whose weights for one output-channel pair (2 x K*K x chunk KiB)
    stay in L1 while every output row is computed (see :func:`schedule_amx_conv`). Only a conv
    whose pair's weights exceed :data:`L1_WEIGHT_BYTES` has one: below that the one-block
    design reads them from L1 already, and the chunks' round trips of the accumulators through
    memory (the whole output of a pair per chunk) only cost (1x1 convs at 56x56 ran 3x slower
    in chunks, docs/cpu.md)."""
    if pair_weight_bytes(shape) <= L1_WEIGHT_BYTES or banded(shape):  # (its loop is per band)
        return None
    chunks = [d for d in (1, 2) if d < shape.ic_blocks and shape.ic_blocks % d == 0]
    return max(chunks) if chunks else None


def schedule_amx_conv(sch: Schedule, block: BlockRV, shape: AMXConvShape,
                      chunk: Optional[int] = None) -> None:
    """Tile and parallelize ``block`` and mark its blocks for :class:`TensorizeAMXConv` (see the
    module doc; the parallel loop's order: :func:`rows_outermost`). The conv's single
    consumer, if any, is computed at each block and a 5-D producer (the pad) parallelized over
    rows; both, and the conv itself, are then annotated
    ``schedule_rule = "None"``, which keeps the rules after this one (``RandomComputeLocation``,
    the tiling rules) away from what is settled here.

    With ``chunk`` (64-channel blocks, a divisor of the conv's), each intrinsic call covers that
    many input-channel blocks and the loop over them goes outside the rows: in parallel over
    output-channel pairs, then per chunk every row block, so that the chunk's weights are read
    from L1 by all rows rather than from L2 by each (a 7x7 conv of 512 channels re-reads its 2.3
    MB of weights 7 times otherwise). The accumulators go through memory once per chunk (each
    call loads and stores them; without chunks a call starts them at zero in the tiles, the
    ``z`` intrinsics), and the epilogue runs per output-channel pair."""
    n, occ, oh, ow, ocb, kh, kw, ico, icf, ics = sch.get_loops(block)[-10:]
    occ_o, occ_i = sch.split(occ, [None, OC_TILES])
    if shape.row_block > 1:
        oh_o, oh_i = sch.split(oh, [None, shape.row_block])
        inner = [oh_i, occ_i]
    else:
        oh_o, inner = oh, [occ_i]
    ow_o, ow_i = sch.split(ow, [None, shape.rows])
    if chunk is None:
        first, second = (oh_o, occ_o) if rows_outermost(shape) else (occ_o, oh_o)
        sch.reorder(n, first, second, ow_o, *inner, ow_i, ocb, kh, kw, ico, icf, ics)
        # a banded copy: in parallel over bands of rows only, each copied once (amx_repack)
        outer = sch.fuse(n, first) if banded(shape) else sch.fuse(n, first, second)
        epilogue_at = ow_o
        # one call covers the block's whole reduction: its accumulators start at zero in the
        # tiles, and its init (the zeroing of C, read by nothing then) becomes a no-op
        shape = dataclasses.replace(shape, zeroed=True)
    else:  # (the reduction loop counts the input's blocks: four to a 64-channel block if repacked)
        ico_o, ico_i = sch.split(ico, [None, chunk * shape.source_blocks // shape.ic_blocks])
        sch.reorder(n, occ_o, ico_o, oh_o, ow_o, *inner, ow_i, ocb, kh, kw, ico_i, icf, ics)
        outer = sch.fuse(n, occ_o)
        epilogue_at = outer
        shape = dataclasses.replace(shape, ic_blocks=chunk)  # what one intrinsic call covers
    sch.parallel(outer)
    consumers = sch.get_consumers(block)
    if len(consumers) == 1:  # the epilogue, AutoInline having made it one block
        sch.reverse_compute_at(consumers[0], epilogue_at)
        sch.vectorize(sch.get_loops(consumers[0])[-1])
        sch.annotate(consumers[0], SCHEDULE_RULE_KEY, "None")
    for producer in sch.get_producers(block):  # the pad: at the root, parallel over rows
        loops = sch.get_loops(producer)
        if len(loops) == 5:
            sch.parallel(sch.fuse(*loops[:3]))
            sch.vectorize(loops[-1])
            sch.annotate(producer, SCHEDULE_RULE_KEY, "None")
    if shape.repacked:
        data, _ = _data_and_kernel(sch.get(block))
        repack_input(sch, block, data, shape, outer if banded(shape) else None)
    # The block is marked, not tensorized yet: TensorizeAMXConv (a postproc placed after
    # RewriteParallelVectorizeUnroll and RewriteReductionBlock) decomposes its reduction and
    # tensorizes it. Done here, the decomposed update block (reduction iterators, no init) would
    # make RewriteParallelVectorizeUnroll's ``parallel`` fail; left with its init, TVM's
    # RewriteTensorize trips over the block inside the init (it has no place in the sref tree).
    # (a chunk of one 64-channel block leaves a unit loop inside whose iterator, preserved, the
    # intrinsic of one block would not match)
    tensorized = sch.blockize(inner[0], preserve_unit_iters=chunk is None)
    sch.annotate(tensorized, AMX_ANNOTATION, register_intrinsic(shape))
    sch.annotate(block, SCHEDULE_RULE_KEY, "None")  # the rules after this one leave it alone


@derived_object
class AMXConv(PyScheduleRule, Placement):
    """Tensorize eligible int8 convs with AMX tiles (see the module doc); other blocks pass.
    Serves llvm targets with AMX int8, placed right after ``AutoInline``."""

    def __init__(self) -> None:
        super().__init__()
        self.enabled = False

    def is_target_available(self, target: Target) -> bool:
        return target_has_amx(target)

    def follows(self, default: object) -> bool:
        return isinstance(default, AutoInline)

    def _initialize_with_tune_context(self, context) -> None:
        self.enabled = context.target is not None and target_has_amx(context.target)

    def apply(self, sch: Schedule, block: BlockRV) -> List[Schedule]:
        if not self.enabled:
            return [sch]
        try:
            shape = amx_conv_shape(sch, block)
            if shape is None:
                return [sch]
            tiled = sch.copy()
            schedule_amx_conv(tiled, block, shape)
            designs = [tiled]
            chunk = reduction_chunk(shape)
            if chunk is not None:
                designs.append(sch.copy())
                schedule_amx_conv(designs[-1], block, shape, chunk)
        except tvm.TVMError as error:  # a schedule primitive refused: the block keeps its rules
            # TVM's error must not reach the search's C++ thread; the block goes on to the other
            # rules untouched. Any other exception is a bug of ours and surfaces as one.
            logger.warning("AMXConv could not tensorize %s: %s", sch.get(block).name_hint,
                           tvm_error_message(error))
            return [sch]
        # Stride 2 on AMX measured slower than the tuned VNNI code of the same layer at 64 input
        # channels and faster at 128 and 256 (ResNet-18, docs/cpu.md): for a strided conv the
        # search gets both designs and keeps what measures faster.
        return designs if shape.stride == 1 else designs + [sch]

    def clone(self) -> ScheduleRule:
        rule = AMXConv()
        rule.enabled = self.enabled
        return rule

    def __str__(self) -> str:
        return "AMXConv"
