"""The AMX conv tensor intrinsics: one block's whole 3x3 or 1x1 reduction, accumulators in tiles.

:class:`~meta_rules.cpu.amx_conv.AMXConv` tensorizes a block of ``MH`` output rows x ``R`` pixels x 32
output channels of TOPI's int8 ``conv2d_NCHWc_int8`` (data ``NCHW64c``, weights
``OIHW16i16o4i``, the module doc of :mod:`meta_rules.cpu.amx_conv`) with one intrinsic per block
shape, named (the name is stored in tuning records: it never changes)::

    quantfuse_amx_conv<K>x<K>[s<stride>]_m<MH>_r<R>_k<64-channel blocks>[z]     (K: 3 or 1)

(``quantfuse_amx_conv<K>x<K>[s<stride>]c<bytes>_...`` for a narrow data block, the stem's: a
data tile row then holds the K taps of a pixel row, K x ``bytes``, a weight tile K x ``bytes`` / 4
rows, and the loop runs over kernel rows only. ``quantfuse_amx_conv1x1[s<stride>]b16_...`` for a
1x1 conv whose input is in 16-channel blocks (``NCHW16c``, weights ``OIHW4i16o4i``): the rule
copies each band of its input into 64-channel blocks inside the kernel, and the intrinsic reads
that copy; its weight tiles are read from TOPI's layout as they are, since for a 1x1 kernel four
16-channel weight blocks lie one after the other, 16 rows of 64 bytes as in ``OIHW16i16o4i``.)

Its description is that block's computation; its implementation (``R`` rows per tile, ``2 * MH``
accumulator tiles 0-3, ``MH`` data tiles 4-5, two weight tiles 6-7)::

    sttilecfg(current); if current != the configuration: ldtilecfg(config)
    tileloadd64 each accumulator tile from C          (z: tilezero each accumulator tile)
    for kh, kw, kb in T.grid(K, K, blocks):
        tileloadd64 MH data tiles (rows ``stride * 64`` bytes apart), 2 weight tiles
        tdpbusd x (2 * MH)
    tilestored64 each accumulator tile to C

The ``z`` variant is for a block whose whole reduction is one call (every design but the
chunked one): its accumulators start at zero in the tiles, so the conv's int32 buffer is only
written, never read before. Its init (``decompose_reduction``'s zeroing of that buffer, one
store per 16 outputs, as many as the epilogue's reads) is tensorized with
``quantfuse_amx_zero_m<MH>_r<R>``, whose description is that zeroing and whose implementation is
empty. A chunked call adds to what the chunk before it stored: it loads its accumulators.

Both are built with TVM's TIR IR builder (:mod:`tvm.script.ir_builder.tir`, what TVMScript's
parser calls), so the tile numbers are the literal constants LLVM requires and the loops of
extent 1 that blockize binds outside the block (one row block, one 64-channel block) are left
out per shape. The configuration is loaded only where the thread's current one differs:
``ldtilecfg`` costs several times what ``sttilecfg`` and a compare cost (docs/cpu.md). There is
no ``tilerelease``: it would undo the configuration the next block reuses; code
that uses AMX after this in the same thread configures its tiles itself, as it must anyway.

Intrinsics are registered with TVM on first use (:func:`register_intrinsic`) and, for a tuning
record made in another process, by the name it stores (:func:`register_intrinsic_by_name`,
:func:`register_intrinsics_of`, :func:`register_intrinsics_named_in`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from pathlib import Path
from typing import List, Optional, Union

from tvm import tir
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tir as T

from meta_rules.cpu.amx_tiles import OC_TILES, TILE_BYTES, config_words, tile_config

STRIDES = (1, 2)  # a tile row steps over stride * 64 bytes of data: any stride loads as one tile
KERNELS = (3, 1)  # square kernel sizes; 3 keeps the first names (quantfuse_amx_conv3x3...)
# the names AMXConvShape.intrinsic makes: kernel, stride (absent: 1), data block bytes (absent:
# 64), the input's block where the kernel repacks it (absent: 64), row block, rows per tile,
# channel blocks
_INTRINSIC_NAME = re.compile(
    r"quantfuse_amx_conv(\d+)x\1(?:s(\d+))?(?:c(\d+))?(?:b(\d+))?_m(\d+)_r(\d+)_k(\d+)(z?)")
REPACKED_BLOCK = 16  # the input block a 1x1 conv may read and repack (TOPI's default NCHW16c)
ACCUMULATOR_TILE, DATA_TILE, WEIGHT_TILE = 0, 4, 6  # first tile of each kind


@dataclasses.dataclass(frozen=True)
class AMXConvShape:
    """What the rule and the intrinsic need to know of an eligible conv block."""

    oc_chunks: int  # output channels / 16
    ic_blocks: int  # input channels / 64
    height: int  # output rows
    width: int  # output columns
    rows: int  # R: output pixels per tile (a divisor of width, at most 16)
    row_block: int  # MH: output rows per block (2 where height is even, else 1)
    stride: int = 1  # the same in both directions
    kernel: int = 3  # K: the kernel is K x K (one of KERNELS, or any with folded taps)
    ic_block: int = TILE_BYTES  # input channels (bytes) per data block
    source_block: int = TILE_BYTES  # per block of the input in memory: 16 where it is repacked
    zeroed: bool = False  # the block's whole reduction in one call: accumulators start at zero

    @property
    def folded(self) -> bool:
        """A narrow data block (the stem's 4 channels): a tile row holds a pixel's K taps along
        the row, K x ``ic_block`` bytes, rather than 64 channels of one tap."""
        return self.ic_block < TILE_BYTES

    @property
    def repacked(self) -> bool:
        """A 1x1 conv whose input is in narrower blocks (:data:`REPACKED_BLOCK`), copied into
        64-channel blocks inside the kernel (band by band, or whole) for the data tiles."""
        return self.source_block < self.ic_block

    @property
    def source_blocks(self) -> int:
        """The input's channel blocks as they are in memory (and in the weights' layout)."""
        return self.ic_blocks * self.ic_block // self.source_block if self.repacked \
            else self.ic_blocks

    @property
    def intrinsic(self) -> str:
        stride = f"s{self.stride}" if self.stride != 1 else ""  # stride 1 keeps the first names
        block = f"c{self.ic_block}" if self.folded else ""
        source = f"b{self.source_block}" if self.repacked else ""
        zeroed = "z" if self.zeroed else ""
        return (f"quantfuse_amx_conv{self.kernel}x{self.kernel}{stride}{block}{source}"
                f"_m{self.row_block}_r{self.rows}_k{self.ic_blocks}{zeroed}")

    @property
    def init_intrinsic(self) -> str:
        """The name of the no-op intrinsic that takes the place of a zeroed block's init."""
        return f"quantfuse_amx_zero_m{self.row_block}_r{self.rows}"


def supported(kernel: int, stride: int, ic_block: int, source_block: int = TILE_BYTES) -> bool:
    """Whether the intrinsics cover a K x K conv of this stride and data block: 64-byte blocks
    with a kernel of :data:`KERNELS` (a 1x1 kernel also from an input in 16-byte blocks,
    repacked), or a narrower block (a multiple of 4 bytes) whose K taps fit one tile row
    (K x block <= 64 bytes, K > 1: the stem)."""
    if stride not in STRIDES:
        return False
    if source_block != TILE_BYTES:
        return source_block == REPACKED_BLOCK and ic_block == TILE_BYTES and kernel == 1
    if ic_block == TILE_BYTES:
        return kernel in KERNELS
    return ic_block % 4 == 0 and kernel > 1 and kernel * ic_block <= TILE_BYTES


def _tile_rows(shape: AMXConvShape) -> dict:
    """tile -> rows for ``shape``'s block: accumulators and data R rows, weights 16 (with
    folded taps: one per 4 bytes of a data row)."""
    rows = {}
    for m in range(shape.row_block):
        for n in range(OC_TILES):
            rows[ACCUMULATOR_TILE + m * OC_TILES + n] = shape.rows
        rows[DATA_TILE + m] = shape.rows
    for n in range(OC_TILES):
        rows[WEIGHT_TILE + n] = _data_row_bytes(shape) // 4
    return rows


def _data_row_bytes(shape: AMXConvShape) -> int:
    """Bytes per data tile row: 64 channels of one tap, or (folded) K taps of the block."""
    return shape.kernel * shape.ic_block if shape.folded else TILE_BYTES


def _tile_row_bytes(shape: AMXConvShape) -> dict:
    """tile -> bytes per row where not 64: the data tiles of folded taps."""
    return {DATA_TILE + m: _data_row_bytes(shape) for m in range(shape.row_block)
            if shape.folded}


class _Buffers:
    """The intrinsic's three buffers, matched with free strides (C's rows are 16 int32 apart)."""

    def __init__(self, shape: AMXConvShape) -> None:
        mh, r, kb, s, k = shape.row_block, shape.rows, shape.ic_blocks, shape.stride, shape.kernel
        self.a_rows, self.a_cols = s * (mh - 1) + k, s * (r - 1) + k  # the data a block reads
        a, b, c = (T.arg(name, T.handle()) for name in ("a", "b", "c"))
        self.sa = [T.int32() for _ in range(4)]
        sb = [T.int32() for _ in range(4)]
        sc = [T.int32() for _ in range(3)]
        self.ic_block = block = shape.ic_block
        if shape.folded:  # a tile row runs over K pixels and a weight tile over K taps: both dense
            self.sa[3] = block
            sb[3] = block // 4 * 64
        # the weights' blocks: 64 channels, or (repacked) the input's 16, four to a weight tile
        self.source_block = shape.source_block if shape.repacked else block
        self.weight_blocks = shape.source_blocks
        self.per_tile = block // self.source_block  # weight blocks per data tile row: 1 or 4
        if shape.repacked:  # the 16 rows of a tile: four blocks of 4, one after the other
            sb[1] = shape.source_block // 4 * 64
        self.A = T.match_buffer(a, (1, kb, self.a_rows, self.a_cols, block), "uint8",
                                offset_factor=1, strides=[*self.sa, 1])
        self.B = T.match_buffer(b, (2, self.weight_blocks, k, k, self.source_block // 4, 16, 4),
                                "int8", offset_factor=1, strides=[*sb, 64, 4, 1])
        self.C = T.match_buffer(c, (1, 2, mh, r, 16), "int32", offset_factor=1,
                                strides=[*sc, 16, 1])
        self.mh, self.r, self.kb, self.s, self.k = mh, r, kb, s, k
        self.folded = shape.folded

    def root(self) -> None:
        """The root block's reads and writes (call inside it)."""
        mh, r, kb, k, block = self.mh, self.r, self.kb, self.k, self.ic_block
        T.reads(self.C[0, 0:2, 0:mh, 0:r, 0:16],
                self.A[0, 0:kb, 0:self.a_rows, 0:self.a_cols, 0:block],
                self.B[0:2, 0:self.weight_blocks, 0:k, 0:k, 0:self.source_block // 4, 0:16, 0:4])
        T.writes(self.C[0, 0:2, 0:mh, 0:r, 0:16])


def _prim_func(shape: AMXConvShape, body) -> tir.PrimFunc:
    with IRBuilder() as builder:
        with T.prim_func():
            T.func_name("func")
            T.func_ret(None)
            buffers = _Buffers(shape)
            with T.block("root"):
                buffers.root()
                body(buffers)
    return builder.get()


def intrinsic_description(shape: AMXConvShape) -> tir.PrimFunc:
    """What one block computes: ``C += A * B`` over the block's K x K taps and 64-channel blocks."""
    def body(buf: _Buffers) -> None:
        # the reduction over the weights' blocks (the input's, before a repack)
        loops = ([("oh", buf.mh)] if buf.mh > 1 else []) + [
            ("occ", OC_TILES), ("ow", buf.r), ("ocb", 16), ("kh", buf.k), ("kw", buf.k),
            ("ico", buf.weight_blocks), ("icf", buf.source_block // 4), ("ics", 4)]
        extents = dict(loops)
        with T.grid(*(extent for _, extent in loops)) as loop_vars:
            loop = dict(zip((name for name, _ in loops), loop_vars))
            # blockize binds a unit loop (one row block, one channel block, a 1x1 conv's tap, a
            # 4-channel block) outside the block
            bound = [name for name in ("occ", "oh", "ow", "ocb", "kh", "kw", "ico", "icf", "ics")
                     if name in loop and extents[name] > 1]
            kinds = "".join("S" if name in ("occ", "oh", "ow", "ocb") else "R" for name in bound)
            with T.block("update"):
                v = dict(zip(bound, T.axis.remap(kinds, [loop[name] for name in bound])))
                oh, ico, s = v.get("oh", 0), v.get("ico", 0), buf.s
                kh, kw, icf = v.get("kh", 0), v.get("kw", 0), v.get("icf", 0)
                out = [0, v["occ"], oh, v["ow"], v["ocb"]]
                channel = icf * 4 + v["ics"]
                if buf.per_tile > 1:  # the repacked copy: 16-channel block ico is a quarter of one
                    channel = ico % buf.per_tile * buf.source_block + channel
                    ico_a = ico // buf.per_tile
                else:
                    ico_a = ico
                product = (T.Cast("int32", buf.A[0, ico_a, oh * s + kh, v["ow"] * s + kw,
                                                 channel])
                           * T.Cast("int32", buf.B[v["occ"], ico, kh, kw, icf,
                                                   v["ocb"], v["ics"]]))
                T.buffer_store(buf.C, buf.C[tuple(out)] + product, out)

    return _prim_func(shape, body)


def _call(name: str, *args) -> None:
    """Emit a call of the LLVM x86 AMX intrinsic ``name`` (T.uint32(0): no overloaded argument
    types)."""
    T.evaluate(T.call_llvm_intrin("int32", f"llvm.x86.{name}", T.uint32(0), *args))


def intrinsic_implementation(shape: AMXConvShape) -> tir.PrimFunc:
    """The tile instructions for one block (see the module doc)."""
    config = tile_config(_tile_rows(shape), _tile_row_bytes(shape))
    words = config_words(config)  # int32: TVM narrows 64-bit constants while it tensorizes
    accumulators = [(m, n) for m in range(shape.row_block) for n in range(OC_TILES)]
    c_stride = 16 * 4  # a C tile row: 16 int32 (C's strides end in 16, 1)

    def body(buf: _Buffers) -> None:
        with T.decl_buffer((16,), "int32", scope="local") as current:
            _call("sttilecfg", T.address_of(current[0]))
            differs = functools.reduce(tir.Or, [tir.NE(current[i], tir.IntImm("int32", word))
                                                for i, word in enumerate(words)])
            with T.If(differs):
                with T.Then():
                    with T.decl_buffer((64,), "uint8", scope="local") as loaded:
                        for i, value in enumerate(config):
                            T.buffer_store(loaded, T.uint8(value), [i])
                        _call("ldtilecfg", T.address_of(loaded[0]))
            for m, n in accumulators:  # zeroed: C's zeros (the no-op init's) are not read
                if shape.zeroed:
                    _call("tilezero", T.uint8(ACCUMULATOR_TILE + m * OC_TILES + n))
                else:
                    _call("tileloadd64", T.uint8(ACCUMULATOR_TILE + m * OC_TILES + n),
                          T.address_of(buf.C[0, n, m, 0, 0]), T.int64(c_stride))
            # with folded taps a data tile row holds all K taps of a row: no loop over kw
            with T.grid(buf.k, 1 if buf.folded else buf.k, buf.kb) as (kh, kw, kb):
                for m in range(buf.mh):
                    _call("tileloadd64", T.uint8(DATA_TILE + m),
                          T.address_of(buf.A[0, kb, kh + buf.s * m, kw, 0]),
                          T.Cast("int64", buf.sa[3] * buf.s))
                for n in range(OC_TILES):
                    _call("tileloadd64", T.uint8(WEIGHT_TILE + n),
                          T.address_of(buf.B[n, kb * buf.per_tile, kh, kw, 0, 0, 0]),
                          T.int64(TILE_BYTES))
                for m, n in accumulators:
                    _call("tdpbusd", T.uint8(ACCUMULATOR_TILE + m * OC_TILES + n),
                          T.uint8(DATA_TILE + m), T.uint8(WEIGHT_TILE + n))
            for m, n in accumulators:
                _call("tilestored64", T.uint8(ACCUMULATOR_TILE + m * OC_TILES + n),
                      T.address_of(buf.C[0, n, m, 0, 0]), T.int64(c_stride))

    return _prim_func(shape, body)


def _init_prim_func(shape: AMXConvShape, description: bool) -> tir.PrimFunc:
    """A zeroed block's init: its description zeroes the block's C (the loops and block the
    decomposed init has: rows, output-channel pair, pixels, 16 channels); its implementation does
    nothing, for the update's ``tilezero`` starts the accumulators at zero."""
    mh, r = shape.row_block, shape.rows
    with IRBuilder() as builder:
        with T.prim_func():
            T.func_name("func")
            T.func_ret(None)
            c = T.arg("c", T.handle())
            C = T.match_buffer(c, (1, 2, mh, r, 16), "int32", offset_factor=1,
                               strides=[T.int32(), T.int32(), T.int32(), 16, 1])
            with T.block("root"):
                T.reads()
                T.writes(C[0, 0:2, 0:mh, 0:r, 0:16])
                if not description:
                    T.evaluate(0)
                else:
                    loops = ([("oh", mh)] if mh > 1 else []) + [
                        ("occ", OC_TILES), ("ow", r), ("ocb", 16)]
                    with T.grid(*(extent for _, extent in loops)) as loop_vars:
                        loop = dict(zip((name for name, _ in loops), loop_vars))
                        bound = [name for name in ("occ", "oh", "ow", "ocb") if name in loop]
                        with T.block("init"):
                            v = dict(zip(bound, T.axis.remap("S" * len(bound),
                                                             [loop[name] for name in bound])))
                            T.buffer_store(C, T.int32(0),
                                           [0, v["occ"], v.get("oh", 0), v["ow"], v["ocb"]])
    return builder.get()


def register_intrinsic(shape: AMXConvShape) -> str:
    """Register with TVM, unless it has it already, the tensor intrinsic of ``shape``'s block
    (and, zeroed, of its init); its name."""
    name = shape.intrinsic
    if tir.TensorIntrin.get(name, allow_missing=True) is None:
        tir.TensorIntrin.register(name, intrinsic_description(shape),
                                  intrinsic_implementation(shape))
    if shape.zeroed and tir.TensorIntrin.get(shape.init_intrinsic, allow_missing=True) is None:
        tir.TensorIntrin.register(shape.init_intrinsic, _init_prim_func(shape, True),
                                  _init_prim_func(shape, False))
    return name


def shape_of_intrinsic(name: str) -> Optional[AMXConvShape]:
    """The block shape an intrinsic name stands for (``quantfuse_amx_conv3x3_m2_r14_k1``,
    ``quantfuse_amx_conv1x1s2_m1_r7_k4``); None when ``name`` is not one of ours."""
    match = _INTRINSIC_NAME.fullmatch(name)
    if match is None:
        return None
    kernel, stride, block, source, mh, r, kb = (
        int(group) if group else default for group, default in
        zip(match.groups()[:-1], (1, 1, TILE_BYTES, TILE_BYTES, 1, 1, 1)))
    if not supported(kernel, stride, block, source):
        return None
    return AMXConvShape(OC_TILES, kb, mh, r, r, mh, stride, kernel, block, source,
                        zeroed=match.group(8) == "z")


def register_intrinsic_by_name(name: str) -> bool:
    """Register the intrinsic a tuning record names, so that the record's trace replays in a
    fresh process; False when ``name`` is not one of ours."""
    shape = shape_of_intrinsic(name)
    if shape is None:
        return False
    register_intrinsic(shape)
    return True


def register_intrinsics_named_in(work_dir: Union[str, os.PathLike]) -> List[str]:
    """Register the AMX intrinsics that the records of a tuning database (the JSON files in
    ``work_dir``) name: TVM replays every record's trace while it loads the database, and a
    trace that names an intrinsic not registered fails the whole load. The names registered."""
    names = set()
    for path in Path(work_dir).glob("*.json"):
        try:
            names.update(match.group(0) for match in
                         _INTRINSIC_NAME.finditer(path.read_text(errors="replace")))
        except OSError:
            continue
    for name in sorted(names):
        register_intrinsic_by_name(name)
    return sorted(names)


def register_intrinsics_of(trace: tir.schedule.Trace) -> List[str]:
    """Register the AMX intrinsics a trace's ``tensorize`` instructions name (a record tuned in
    another process replays only once they exist); the names registered."""
    names = []
    for inst in trace.insts:
        if inst.kind.name == "Tensorize" and inst.attrs and \
                register_intrinsic_by_name(str(inst.attrs[0])):
            names.append(str(inst.attrs[0]))
    return names

