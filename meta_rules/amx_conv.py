"""AMXConv: int8 3x3 convolutions on AMX tiles (``tdpbusd``), a schedule rule for MetaSchedule.

TOPI's int8 conv on x86 (``conv2d_NCHWc_int8``) with 64 input channels per block (data
``NCHW64c``, weights ``OIHW16i16o4i``: what ``relay_ext.lowering.amx_layout`` chooses where the
target has AMX) computes::

    for n, oc_chunk, oh, ow, oc_block, kh, kw, ic_outer, ic_f_inner, ic_s_inner in T.grid(
            1, OC // 16, OH, OW, 16, 3, 3, IC // 64, 16, 4):
        with T.block("conv2d_NCHWc_int8"):
            ...
            conv[n, oc_chunk, oh, ow, oc_block] += T.Cast("int32", data_pad[n, ic_outer,
                oh + kh, ow + kw, ic_f_inner * 4 + ic_s_inner]) * T.Cast("int32", kernel[
                oc_chunk, ic_outer, kh, kw, ic_f_inner, oc_block, ic_s_inner])

Every (oh, 16 output channels) slice of that is a matrix product AMX does in one instruction:
``R`` consecutive output pixels (tile rows) x 64 input channels (one tile row of data: 64 bytes,
the pixels ``ic_bn`` bytes apart in ``NCHW64c``) times the 16x16x4 weight block (one 16x64-byte
tile, already in the order ``tdpbusd`` wants). The rule splits the conv into blocks of ``MH``
output rows x ``R`` pixels x 32 output channels, tensorizes each block's whole reduction (3 x 3
taps x IC/64) with one intrinsic that keeps its ``2 * MH`` accumulator tiles in tile registers
(loaded from the output once, stored once), and runs the blocks in parallel. The rule tiles and
marks each block; its postproc :class:`TensorizeAMXConv` decomposes the reduction and tensorizes
(the reason for the split is in :func:`schedule_amx_conv`)::

    for fused in T.parallel(OC // 32 * OH // MH):          # n, oc pair, oh block
        for ow_o in range(OW // R):
            conv_init ...                                  # decompose_reduction
            with T.block("conv2d_NCHWc_int8_o"):           # blockize + tensorize
                T.call_llvm_intrin(... "llvm.x86.sttilecfg" ...), and if that differs:
                T.call_llvm_intrin(... "llvm.x86.ldtilecfg" ...)
                ... tileloadd64 (accumulators), then per tap and 64 channels:
                    tileloadd64 (MH data tiles, 2 weight tiles), tdpbusd x (2 * MH)
                ... tilestored64 (accumulators)
            epilogue (the conv's one consumer, reverse_compute_at here)

For a conv of 128 input channels or more the rule returns a second design, the reduction in
chunks (:func:`reduction_chunk`) with the rows inside the chunk loop, so that a chunk's weights
serve every row from L1::

    for fused in T.parallel(OC // 32):                     # n, oc pair
        conv_init ... (all rows)
        for ico_o, oh_o, ow_o in T.grid(IC // 64 // chunk, OH // MH, OW // R):
            with T.block("conv2d_NCHWc_int8_o_update"):    # the same intrinsic, k = chunk
                ...
        epilogue (all rows of the pair)

Why one intrinsic per block's whole reduction rather than one 16x16x64 tile product: with the
latter, MetaSchedule's tensorization keeps no register state between two calls, so every
``tdpbusd`` would load and store its accumulator tile; benchmarks/amx_conv_probe.py measured that
form slower on three of ResNet-18's four 3x3 conv shapes (docs/cpu.md).

The rule only touches a block that has exactly that shape (3x3, uint8 x int8 -> int32, 64-channel
data blocks, 16-channel output blocks, an even number of them; stride 1, or 2: the data tile's
rows are then 128 bytes apart, and the block stays open to the other rules too), and only for a
target whose LLVM features include ``amx-tile`` and ``amx-int8``; every other block is left as it
came, for the rules after it. Code from it runs only in a process that holds the kernel's permission
for AMX tile data (``relay_ext.lowering.amx``): the tile configuration is loaded by the
intrinsic itself (``ldtilecfg`` is per thread; TVM's pool threads never see it otherwise), only
where the thread's current one (``sttilecfg``) differs: ``ldtilecfg`` costs as much as 13
``tdpbusd``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import tvm
from tvm import tir
from tvm.meta_schedule.postproc import Postproc, PyPostproc
from tvm.meta_schedule.schedule_rule import PyScheduleRule, ScheduleRule
from tvm.meta_schedule.utils import derived_object
from tvm.tir.schedule import BlockRV, Schedule

from .tvm_errors import tvm_error_message

logger = logging.getLogger(__name__)

AMX_FEATURES = ("amx-tile", "amx-int8")
TILE_ROWS = 16  # the most rows a tile has
MIN_ROWS = 4  # fewer pixels per tile (a width with no divisor from 4 to 16) waste the tiles
TILE_BYTES = 64  # bytes per tile row
OC_TILES = 2  # accumulator tiles side by side in output channels (16 each)
AMX_ANNOTATION = "quantfuse.amx_conv_intrinsic"  # on a blockized conv block: the intrinsic


# AMXConvShape.intrinsic's names: stride (absent: 1), row block, rows per tile, 64-channel blocks
_INTRINSIC_NAME = re.compile(r"quantfuse_amx_conv3x3(?:s(\d+))?_m(\d+)_r(\d+)_k(\d+)")
STRIDES = (1, 2)  # a tile row steps over stride * 64 bytes of data: any stride loads as one tile


@dataclasses.dataclass(frozen=True)
class AMXConvShape:
    """What the rule needs to know of an eligible conv block."""

    oc_chunks: int  # output channels / 16
    ic_blocks: int  # input channels / 64
    height: int  # output rows
    width: int  # output columns
    rows: int  # R: output pixels per tile (a divisor of width, at most 16)
    row_block: int  # MH: output rows per block (2 where height is even, else 1)
    stride: int = 1  # the same in both directions

    @property
    def intrinsic(self) -> str:
        stride = f"s{self.stride}" if self.stride != 1 else ""  # stride 1 keeps the first names
        return f"quantfuse_amx_conv3x3{stride}_m{self.row_block}_r{self.rows}_k{self.ic_blocks}"


def target_has_amx(target: tvm.target.Target) -> bool:
    """Whether LLVM may emit AMX int8 tile instructions for ``target`` (its -mcpu and -mattr)."""
    if target.kind.name != "llvm":
        return False
    from tvm.target.codegen import target_has_features  # pylint: disable=import-outside-toplevel

    return all(target_has_features(feature, target) for feature in AMX_FEATURES)


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
    if (n, oc_block, kh, kw, ic_f, ic_s) != (1, 16, 3, 3, 16, 4) or oc_chunks % OC_TILES:
        return None
    if not isinstance(stmt.body, tir.BufferStore) or stmt.init is None:
        return None
    out = stmt.writes[0].buffer
    data, kernel = _data_and_kernel(stmt)
    if data is None or out.dtype != "int32" or data.dtype != "uint8" or kernel.dtype != "int8":
        return None
    if [_static(d) for d in kernel.shape] != [oc_chunks, ic_blocks, 3, 3, 16, 16, 4]:
        return None
    if _static(data.shape[-1]) != TILE_BYTES or len(data.shape) != 5:
        return None
    stride = _read_stride(stmt, data)
    if stride is None or _rows_for(width) < MIN_ROWS:
        return None
    return AMXConvShape(oc_chunks, ic_blocks, height, width, _rows_for(width),
                        2 if height % 2 == 0 else 1, stride)


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
# The tensor intrinsic: one block's whole reduction, accumulators in tile registers.

def _intrinsic_source(shape: AMXConvShape) -> Tuple[str, str]:
    """TVMScript of the description and the implementation for ``shape``'s block. Generated as
    text: the tile numbers must be literal constants, and loops of extent 1 (one row block, one
    64-channel block) are bound outside the block by blockize, so they differ per shape."""
    mh, r, kb, s = shape.row_block, shape.rows, shape.ic_blocks, shape.stride
    loops = ([("oh", mh)] if mh > 1 else []) + [("occ", OC_TILES), ("ow", r), ("ocb", 16),
                                                 ("kh", 3), ("kw", 3), ("ico", kb), ("icf", 16),
                                                 ("ics", 4)]
    bound = [name for name in ("occ", "oh", "ow", "ocb", "kh", "kw", "ico", "icf", "ics")
             if name in dict(loops) and (name != "ico" or kb > 1)]
    kinds = "".join("S" if name in ("occ", "oh", "ow", "ocb") else "R" for name in bound)
    oh = "voh" if mh > 1 else "0"
    ico = "vico" if kb > 1 else "0"
    a_rows, a_cols = s * (mh - 1) + 3, s * (r - 1) + 3  # the data a block reads
    a_shape = f"(1, {kb}, {a_rows}, {a_cols}, 64)"
    b_shape = f"(2, {kb}, 3, 3, 16, 16, 4)"
    c_shape = f"(1, 2, {mh}, {r}, 16)"
    reads = (f"C[0, 0:2, 0:{mh}, 0:{r}, 0:16], A[0, 0:{kb}, 0:{a_rows}, 0:{a_cols}, 0:64], "
             f"B[0:2, 0:{kb}, 0:3, 0:3, 0:16, 0:16, 0:4]")
    writes = f"C[0, 0:2, 0:{mh}, 0:{r}, 0:16]"
    buffers = (
        f"    A = T.match_buffer(a, {a_shape}, \"uint8\", offset_factor=1, "
        f"strides=[sa0, sa1, sa2, sa3, 1])\n"
        f"    B = T.match_buffer(b, {b_shape}, \"int8\", offset_factor=1, "
        f"strides=[sb0, sb1, sb2, sb3, 64, 4, 1])\n"
        f"    C = T.match_buffer(c, {c_shape}, \"int32\", offset_factor=1, "
        f"strides=[sc0, sc1, sc2, 16, 1])\n")
    header = ("@T.prim_func\n"
              "def func(a: T.handle, b: T.handle, c: T.handle) -> None:\n"
              "    sa0, sa1, sa2, sa3 = T.int32(), T.int32(), T.int32(), T.int32()\n"
              "    sb0, sb1, sb2, sb3 = T.int32(), T.int32(), T.int32(), T.int32()\n"
              "    sc0, sc1, sc2 = T.int32(), T.int32(), T.int32()\n" + buffers +
              "    with T.block(\"root\"):\n"
              f"        T.reads({reads})\n"
              f"        T.writes({writes})\n")
    names = ", ".join(name for name, _ in loops)
    extents = ", ".join(str(extent) for _, extent in loops)
    desc = header + (
        f"        for {names} in T.grid({extents}):\n"
        "            with T.block(\"update\"):\n"
        f"                {', '.join('v' + b for b in bound)} = T.axis.remap(\"{kinds}\", "
        f"[{', '.join(bound)}])\n"
        f"                C[0, vocc, {oh}, vow, vocb] = C[0, vocc, {oh}, vow, vocb] + "
        f"T.Cast(\"int32\", A[0, {ico}, {oh} * {s} + vkh, vow * {s} + vkw, vicf * 4 + vics]) * "
        f"T.Cast(\"int32\", B[vocc, {ico}, vkh, vkw, vicf, vocb, vics])\n")

    def call(name: str, *args: str) -> str:  # T.uint32(0): no overloaded argument types
        return f"T.evaluate(T.call_llvm_intrin(\"int32\", \"llvm.x86.{name}\", " \
               f"{', '.join(('T.uint32(0)',) + args)}))"

    config = [0] * 64
    config[0] = 1  # palette 1
    tiles: Dict[int, int] = {}  # tile -> rows
    for m in range(mh):
        for n in range(OC_TILES):
            tiles[m * OC_TILES + n] = r  # accumulators
        tiles[4 + m] = r  # data
    for n in range(OC_TILES):
        tiles[6 + n] = TILE_ROWS  # weights
    for tile, rows in tiles.items():
        config[16 + 2 * tile] = TILE_BYTES
        config[48 + tile] = rows
    # ldtilecfg costs ~80 ns (13 tdpbusd) on the hosts measured, sttilecfg and a compare ~10:
    # load the configuration only where this thread's current one differs (it is the same from
    # the second block a thread runs on; a thread that never configured its tiles, or released
    # them, reads as all zeros). The configuration's 16 words, little-endian (int32: TVM
    # narrows 64-bit constants to the index type while it tensorizes):
    words = [int.from_bytes(bytes(config[i:i + 4]), "little") for i in range(0, 64, 4)]
    body = ["current = T.decl_buffer((16,), \"int32\", scope=\"local\")",
            call("sttilecfg", "T.address_of(current[0])"),
            "if " + " or ".join(f"current[{i}] != {word}"
                                for i, word in enumerate(words)) + ":",
            "    config = T.decl_buffer((64,), \"uint8\", scope=\"local\")"]
    body += [f"    config[{i}] = T.uint8({value})" for i, value in enumerate(config)]
    body.append("    " + call("ldtilecfg", "T.address_of(config[0])"))
    c_stride = "T.int64(64)"  # a C tile row: 16 int32 (C's strides end in 16, 1)
    accumulators = [(m, n) for m in range(mh) for n in range(OC_TILES)]
    for m, n in accumulators:
        body.append(call("tileloadd64", f"T.uint8({m * OC_TILES + n})",
                         f"T.address_of(C[0, {n}, {m}, 0, 0])", c_stride))
    step = []
    for m in range(mh):
        step.append(call("tileloadd64", f"T.uint8({4 + m})",
                         f"T.address_of(A[0, kb, kh + {s * m}, kw, 0])",
                         f"T.Cast(\"int64\", sa3 * {s})"))
    for n in range(OC_TILES):
        step.append(call("tileloadd64", f"T.uint8({6 + n})",
                         f"T.address_of(B[{n}, kb, kh, kw, 0, 0, 0])", "T.int64(64)"))
    for m, n in accumulators:
        step.append(call("tdpbusd", f"T.uint8({m * OC_TILES + n})", f"T.uint8({4 + m})",
                         f"T.uint8({6 + n})"))
    impl = header + "".join(f"        {line}\n" for line in body) + (
        f"        for kh, kw, kb in T.grid(3, 3, {kb}):\n" +
        "".join(f"            {line}\n" for line in step) +
        "".join("        " + call("tilestored64", f"T.uint8({m * OC_TILES + n})",
                                  f"T.address_of(C[0, {n}, {m}, 0, 0])", c_stride) + "\n"
                for m, n in accumulators))
    # No tilerelease: it would undo the configuration the next block reuses. The tiles stay
    # configured in the thread (the kernel saves their 8 KiB at a context switch); code that
    # uses AMX after this in the same thread configures its tiles itself, as it must anyway.
    return desc, impl


_REGISTERED: Dict[str, bool] = {}


def register_intrinsic(shape: AMXConvShape) -> str:
    """Register (once per process) the tensor intrinsic of ``shape``'s block; its name."""
    name = shape.intrinsic
    if name not in _REGISTERED:
        desc, impl = _intrinsic_source(shape)
        tir.TensorIntrin.register(name, tvm.script.from_source(desc),
                                  tvm.script.from_source(impl), override=True)
        _REGISTERED[name] = True
    return name


def register_intrinsic_by_name(name: str) -> bool:
    """Register the intrinsic a tuning record names (``quantfuse_amx_conv3x3_m2_r14_k1``), so
    that the record's trace replays in a fresh process; False when ``name`` is not one of ours."""
    match = _INTRINSIC_NAME.fullmatch(name)
    if match is None:
        return False
    stride, mh, r, kb = (int(group) if group else 1 for group in match.groups())
    if stride not in STRIDES:
        return False
    register_intrinsic(AMXConvShape(OC_TILES, kb, mh, r, r, mh, stride))
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


# ---------------------------------------------------------------------------------------------
# The schedule.

def reduction_chunk(shape: AMXConvShape) -> Optional[int]:
    """64-channel blocks per intrinsic call for the rule's second design of a deep conv, None
    where it has none: a chunk whose weights for one output-channel pair (2 x 9 x chunk KiB)
    stay in L1 while every output row is computed (see :func:`schedule_amx_conv`)."""
    chunks = [d for d in (1, 2) if d < shape.ic_blocks and shape.ic_blocks % d == 0]
    return max(chunks) if chunks else None


def schedule_amx_conv(sch: Schedule, block: BlockRV, shape: AMXConvShape,
                      chunk: Optional[int] = None) -> None:
    """Tile and parallelize ``block`` and mark its blocks for :class:`TensorizeAMXConv` (see the
    module doc). The conv's single consumer, if any, is computed at each block and a 5-D
    producer (the pad) parallelized over rows; both, and the conv itself, are then annotated
    ``schedule_rule = "None"``, which keeps the rules after this one (``RandomComputeLocation``,
    the tiling rules) away from what is settled here.

    With ``chunk`` (64-channel blocks, a divisor of the conv's), each intrinsic call covers that
    many input-channel blocks and the loop over them goes outside the rows: in parallel over
    output-channel pairs, then per chunk every row block, so that the chunk's weights are read
    from L1 by all rows rather than from L2 by each (a 7x7 conv of 512 channels re-reads its 2.3
    MB of weights 7 times otherwise). The accumulators go through memory once per chunk (the
    intrinsic loads and stores them anyway), and the epilogue runs per output-channel pair."""
    n, occ, oh, ow, ocb, kh, kw, ico, icf, ics = sch.get_loops(block)[-10:]
    occ_o, occ_i = sch.split(occ, [None, OC_TILES])
    if shape.row_block > 1:
        oh_o, oh_i = sch.split(oh, [None, shape.row_block])
        inner = [oh_i, occ_i]
    else:
        oh_o, inner = oh, [occ_i]
    ow_o, ow_i = sch.split(ow, [None, shape.rows])
    if chunk is None:
        sch.reorder(n, occ_o, oh_o, ow_o, *inner, ow_i, ocb, kh, kw, ico, icf, ics)
        outer = sch.fuse(n, occ_o, oh_o)
        epilogue_at = ow_o
    else:
        ico_o, ico_i = sch.split(ico, [None, chunk])
        sch.reorder(n, occ_o, ico_o, oh_o, ow_o, *inner, ow_i, ocb, kh, kw, ico_i, icf, ics)
        outer = sch.fuse(n, occ_o)
        epilogue_at = outer
        shape = dataclasses.replace(shape, ic_blocks=chunk)  # what one intrinsic call covers
    sch.parallel(outer)
    consumers = sch.get_consumers(block)
    if len(consumers) == 1:  # the epilogue, AutoInline having made it one block
        sch.reverse_compute_at(consumers[0], epilogue_at)
        sch.vectorize(sch.get_loops(consumers[0])[-1])
        sch.annotate(consumers[0], "schedule_rule", "None")
    for producer in sch.get_producers(block):  # the pad: at the root, parallel over rows
        loops = sch.get_loops(producer)
        if len(loops) == 5:
            sch.parallel(sch.fuse(*loops[:3]))
            sch.vectorize(loops[-1])
            sch.annotate(producer, "schedule_rule", "None")
    # The block is marked, not tensorized yet: TensorizeAMXConv (a postproc placed after
    # RewriteParallelVectorizeUnroll and RewriteReductionBlock) decomposes its reduction and
    # tensorizes it. Done here, the decomposed update block (reduction iterators, no init) would
    # make RewriteParallelVectorizeUnroll's ``parallel`` fail; left with its init, TVM's
    # RewriteTensorize trips over the block inside the init (it has no place in the sref tree).
    # (a chunk of one 64-channel block leaves a unit loop inside whose iterator, preserved, the
    # intrinsic of one block would not match)
    tensorized = sch.blockize(inner[0], preserve_unit_iters=chunk is None)
    sch.annotate(tensorized, AMX_ANNOTATION, register_intrinsic(shape))
    sch.annotate(block, "schedule_rule", "None")  # the rules after this one leave it alone


@derived_object
class AMXConv(PyScheduleRule):
    """Tensorize eligible int8 convs with AMX tiles (see the module doc); other blocks pass."""

    def __init__(self) -> None:
        super().__init__()
        self.enabled = False

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
        except Exception as error:  # pylint: disable=broad-except - the block keeps its rules
            # An exception must not reach the search's C++ thread; the block goes on to the
            # other rules untouched.
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


def marked_blocks(sch: Schedule) -> List[Tuple[str, str]]:
    """(block name, intrinsic) of every block :class:`AMXConv` marked."""
    marked: List[Tuple[str, str]] = []
    for _, func in sch.mod.functions.items():
        if not isinstance(func, tir.PrimFunc):
            continue

        def visit(node):
            if isinstance(node, tir.Block) and AMX_ANNOTATION in node.annotations:
                marked.append((node.name_hint, str(node.annotations[AMX_ANNOTATION])))

        tir.stmt_functor.post_order_visit(func.body, visit)
    return marked


def tensorize_marked(sch: Schedule) -> int:
    """Decompose and tensorize every block :class:`AMXConv` marked; how many."""
    tensorized = 0
    for name, intrinsic in marked_blocks(sch):
        block = sch.get_block(name)
        sch.unannotate(block, AMX_ANNOTATION)
        if not any(it.iter_type == tir.IterVar.CommReduce for it in sch.get(block).iter_vars):
            continue  # the init block RewriteReductionBlock split off (with the annotations)
        if sch.get(block).init is not None:  # else RewriteReductionBlock decomposed it, at the
            # chunk loop of the second design (the accumulators are zeroed once, not per chunk)
            sch.decompose_reduction(block, sch.get_loops(block)[-1])
        register_intrinsic_by_name(intrinsic)
        sch.tensorize(block, intrinsic)
        tensorized += 1
    return tensorized


@derived_object
class TensorizeAMXConv(PyPostproc):
    """The postproc half of :class:`AMXConv`: decompose and tensorize the blocks it marked
    (placed after ``RewriteReductionBlock``, before ``RewriteTensorize``); a candidate where that
    fails is rejected."""

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch: Schedule) -> bool:
        try:
            tensorize_marked(sch)
        except Exception as error:  # pylint: disable=broad-except - reject, never raise into C++
            logger.warning("TensorizeAMXConv rejects a candidate: %s", tvm_error_message(error))
            return False
        return True

    def clone(self) -> Postproc:
        return TensorizeAMXConv()

    def __str__(self) -> str:
        return "TensorizeAMXConv"
