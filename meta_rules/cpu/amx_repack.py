"""The input of an AMX 1x1 conv, copied from TOPI's 16-channel blocks into the 64-channel blocks
a tile row reads, inside the conv's kernel (:mod:`meta_rules.cpu.amx_conv` calls it for a
conv whose :attr:`~meta_rules.cpu.amx_intrinsics.AMXConvShape.repacked` is set).

Before, a 1x1 conv of ``NCHW16c`` input (weights ``OIHW4i16o4i``, four of whose 16-channel blocks
make one weight tile)::

    for n, oc_chunk, oh, ow, oc_block, kh, kw, ic_outer, ic_f, ic_s in T.grid(...):
        with T.block("conv2d_NCHWc_int8"):
            conv[...] += T.Cast("int32", data[n, ic_outer, oh, ow, ic_f * 4 + ic_s]) * ...

after, the block reads ``data_global`` (``NCHW64c``), written by a copy block placed by
:func:`repack_input` (band by band, or whole and first)::

    with T.block("data_global"):
        data_global[n, c // 4, h, w, c % 4 * 16 + i] = data[n, c, h, w, i]
"""

from __future__ import annotations

from typing import Optional

from tvm import tir
from tvm.tir.schedule import BlockRV, LoopRV, Schedule

from meta_rules.base.custom_rules import SCHEDULE_RULE_KEY
from meta_rules.cpu.amx_intrinsics import AMXConvShape
from meta_rules.cpu.amx_tiles import TILE_BYTES


def repack_input(sch: Schedule, block: BlockRV, data: tir.Buffer, shape: AMXConvShape,
                 outer: Optional[LoopRV]) -> None:
    """A 1x1 conv of ``NCHW16c`` input (:attr:`AMXConvShape.repacked`). Where its parallel loop
    ``outer`` goes over bands of ``MH`` output rows only (``amx_conv.banded``), each band copies
    the input rows it reads into 64-channel blocks (an ``NCHW64c`` buffer, 16-byte vectors), then
    every channel pair and pixel block of the band runs the intrinsic on that copy, its epilogue
    after it::

        for fused in T.parallel(OH // MH):                         # n, row block
            data_64c[...] = data[...]                             # the band, re-blocked
            for occ_o, ow_o in T.grid(OC // 32, OW // R):
                with T.block("conv2d_NCHWc_int8_o"): ...          # as for 64-channel input
                epilogue

    Where the channel pairs go in parallel (``outer`` None: the weights outweigh the input, and
    every thread reads every row), the whole input is copied first, inside the same kernel::

        for fused in T.parallel(IC // 64 * H):                     # 64-channel block, row
            data_64c[0, c, h, :, :] = ...                          # four 16-channel blocks
        for fused in T.parallel(OC // 32 * OH // MH): ...          # as for 64-channel input

    Either way the copy is the conv's: no layout transform runs between the conv and the one
    before it."""
    per_tile = TILE_BYTES // shape.source_block
    copy = sch.cache_read(block, [region.buffer for region in sch.get(block).reads].index(data),
                          "global")
    sch.transform_layout(copy, ("write", 0), lambda b, c, h, w, i: (
        b, c // per_tile, h, w, c % per_tile * shape.source_block + i))
    if outer is None:  # the whole input: one 64-channel block after the other, row by row
        n, c_, h, w_, i_ = sch.get_loops(copy)
        c_o, c_i = sch.split(c_, [None, per_tile])
        # four 16-channel blocks read at a time, one written (a pixel's 64 channels at a time,
        # 64 blocks read at once for 1024 channels: ResNet-50 1.03x slower whole)
        sch.reorder(c_o, h, w_, c_i, i_)
        sch.parallel(sch.fuse(n, c_o, h))
    else:  # the band, in the order it is written: a pixel's 64 channels together (channel
        # blocks outermost, as above, measured 1.05x slower whole on MobileNetV2)
        sch.compute_at(copy, outer)
        loops = sch.get_loops(copy)
        below = loops[[sch.get(loop) for loop in loops].index(sch.get(outer)) + 1:]
        # the band's channel blocks, rows (gone where the band is one row), columns, 16 bytes
        c_, *rows, w_, i_ = below
        c_o, c_i = sch.split(c_, [None, per_tile])
        sch.reorder(*rows, w_, c_o, c_i, i_)
    sch.vectorize(i_)
    sch.unroll(c_i)
    sch.annotate(copy, SCHEDULE_RULE_KEY, "None")
