"""Does AMX pay for TVM's int8 3x3 convolutions? A hand-written AMX kernel against TVM's own.

    python -m benchmarks.amx_conv_probe [--work-dir DIR] [--threads 2] [--rounds 15]

The per-layer table of ``benchmarks/where_time_goes.py`` puts the gap to PyTorch int8 in
ResNet-18's 3x3 convolutions at 56x56 and 28x28, where oneDNN runs AMX tile instructions and TVM
runs AVX-512 VNNI. Before anyone writes an AMX tensor intrinsic for MetaSchedule (and the Relay
layout it needs), this probe measures what AMX can give on exactly those layers: a 3x3, stride 1,
pad 1 convolution, uint8 data x int8 weights, int32 accumulation, then a requantize to int8,
written by hand in TIR with AMX tile intrinsics (``llvm.x86.tdpbusd`` and friends), timed in the
same run and at the same threads as

- TVM's code for that layer: int8 ResNet-18's own task (NCHW16c, padding, conv, requantize and
  whatever Relay fused into it), timed alone as the per-task choice times it, with TOPI's
  default schedule for the host target (VNNI, with quantfuse's VNNI conv schedule) and, with
  ``--work-dir`` (a ResNet-18 work dir tuned for that target), with the task's best record. The
  target is the host's without AMX (``-mcpu=cascadelake`` on an AMX host): TVM's own VNNI code.

The AMX kernel (``amx_conv3x3``): data in NHWC with the input channels whole (64 or a multiple: a
tile row is 64 input channels, the full depth of a tile), padded by the kernel into a buffer of its
own; output pixels taken along the padded width so that the 16 rows of a tile are 16 consecutive
pixels, each tap of the 3x3 window a shifted tile load (2 of the ``height + 2`` columns per row are
computed and dropped); weights packed as one 16x64-byte tile per (tap, 64 input channels, 16 output
channels), 4 input channels interleaved per output channel as ``tdpbusd`` wants. Blocks of 32
pixels x 32 output channels: 4 accumulator tiles, 2 data tiles, 2 weight tiles, 8 tile registers in
all. Each parallel iteration loads the tile configuration itself (``ldtilecfg`` is per thread
state). The process asks the kernel for AMX tile data first (``relay_ext.lowering.x86.amx``).

This is a probe, not a code path: the AMX code quantfuse compiles is :mod:`meta_rules.cpu.amx_conv`
(built after this probe; docs/cpu.md). It refuses to run where the OS does not enable
``amx_tile``/``amx_int8`` or the kernel does not grant tile data.
The result table goes to docs/BENCHMARKS.md (section ``amx_conv_probe``).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import tvm

from tvm import meta_schedule as ms

from benchmarks.markdown_report import markdown_table, write_section
from benchmarks.layer_timing import conv_signature
from meta_rules.cpu.amx_tiles import TILE_BYTES, TILE_ROWS, TILES, tile_config  # 16 rows x 64 B
import relay_ext
from relay_ext.lowering.targets import host_cpu_flags, normalize_target, without_amx
from relay_ext.lowering.x86.amx import request_amx_tile_data
from relay_ext.lowering.x86.amx_permission import AMX_INT8_FLAGS
from relay_ext.schedules.records import compilable_records
from relay_ext.schedules.task_choice import has_record, time_task
from relay_ext.lowering.tasks import lowered_tasks
from relay_ext.measure.timing import TVMThread, interleaved_rounds, with_tvm_threads
from relay_ext.workdir.files import open_tuned_database, recorded_run

logger = logging.getLogger(__name__)

SECTION = "amx_conv_probe"
AMX_TARGET = "llvm -mcpu=sapphirerapids"
BLOCK_PIXELS = 2 * TILE_ROWS
BLOCK_CHANNELS = 32  # output channels per block: 2 accumulator tiles of 16

# The layers of int8 ResNet-18 224 where TVM trails PyTorch: channels, height = width.
LAYERS: List[Tuple[int, int]] = [(64, 56), (128, 28), (256, 14), (512, 7)]


def _intrin(name: str, *args) -> tvm.tir.PrimExpr:
    """A call of an LLVM x86 AMX intrinsic (TVM's first argument counts the signature's
    overloaded arguments: none for these; tile numbers must be constants)."""
    return tvm.tir.call_llvm_intrin("int32", name, tvm.tir.const(0, "uint32"), *args)


def _address(buffer: tvm.tir.Buffer, index) -> tvm.tir.PrimExpr:
    return tvm.tir.call_intrin("handle", "tir.address_of", tvm.tir.BufferLoad(buffer, [index]))


def _tile(number: int) -> tvm.tir.PrimExpr:
    return tvm.tir.const(number, "uint8")


def amx_conv3x3(channels: int, height: int, scale: float, zero_point: int,
                accumulators: str = "tiles") -> tvm.tir.PrimFunc:
    """The AMX kernel for a 3x3/1/1 conv with ``channels`` in and out channels on a ``height`` x
    ``height`` image (see the module doc for the layouts), requantized to int8 by
    ``round(acc * scale) + zero_point`` clipped to [-128, 127].

    ``accumulators``: ``"tiles"`` keeps the 4 accumulator tiles of a block in tile registers over
    the whole reduction (9 taps x channels/64); ``"memory"`` loads each accumulator tile from the
    block's scratch before its ``tdpbusd`` and stores it back after, as a TIR tensor intrinsic of
    one 16x16x64 tile product would (MetaSchedule's tensorization keeps no register state between
    two calls of an intrinsic).

    Arguments: ``image`` uint8 [height * height * channels] (NHWC), ``weight`` int8 [9 *
    channels/64 * channels/16 * 1024] (one 16x64-byte tile per tap, 64 input and 16 output
    channels: :func:`pack_inputs`) and ``out`` int8 [blocks * 32 * channels] (pixel ``h * (height
    + 2) + w``; columns w >= height are dropped: :func:`unpack_output`). The kernel pads the
    image first, into rows of ``height + 2`` pixels followed by zeros (:func:`padded_pixels`).
    Written with TIR's IR builder so that the tile register numbers are the constants LLVM
    requires."""
    if accumulators not in ("tiles", "memory"):
        raise ValueError(f"accumulators: 'tiles' or 'memory', got {accumulators!r}")
    if channels % TILE_BYTES:
        raise ValueError(f"the AMX probe needs channels in multiples of {TILE_BYTES}, "
                         f"got {channels}")
    width = height + 2  # the padded row: pixels are counted along it
    blocks = -(-height * width // BLOCK_PIXELS)
    pixels_in = blocks * BLOCK_PIXELS + 2 * width + 2
    k_blocks = channels // TILE_BYTES
    oc_tiles = channels // TILE_ROWS
    image = tvm.tir.decl_buffer((height * height * channels,), "uint8", name="image")
    weight = tvm.tir.decl_buffer((9 * k_blocks * oc_tiles * 1024,), "int8", name="weight")
    out = tvm.tir.decl_buffer((blocks * BLOCK_PIXELS * channels,), "int8", name="out")

    ib = tvm.tir.ir_builder.create()
    data = ib.allocate("uint8", (pixels_in * channels,), name="data", scope="global").asobject()
    with ib.for_range(0, pixels_in, kind="parallel", name="pixel") as pixel:
        row, column = pixel // width, pixel % width
        inside = tvm.tir.all(row >= 1, row <= height, column >= 1, column <= height)
        # clamped so that no address is out of the image, even where it is not read
        source = tvm.tir.min(tvm.tir.max((row - 1) * height + column - 1, 0), height * height - 1)
        with ib.for_range(0, channels, kind="vectorize", name="c") as c:
            ib.emit(tvm.tir.BufferStore(data, tvm.tir.if_then_else(
                inside, tvm.tir.BufferLoad(image, [source * channels + c]),
                tvm.tir.const(0, "uint8")), [pixel * channels + c]))
    with ib.for_range(0, blocks, kind="parallel", name="block") as block:
        config = ib.allocate("uint8", (64,), name="config", scope="local").asobject()
        acc = ib.allocate("int32", (BLOCK_PIXELS * BLOCK_CHANNELS,), name="acc",
                          scope="local").asobject()
        values = tile_config({tile: TILE_ROWS for tile in range(TILES)})  # all 16 rows of 64 B
        for i, value in enumerate(values):
            ib.emit(tvm.tir.BufferStore(config, tvm.tir.const(value, "uint8"), [i]))
        ib.emit(_intrin("llvm.x86.ldtilecfg", _address(config, 0)))
        with ib.for_range(0, channels // BLOCK_CHANNELS, name="pair") as pair:
            def accumulator(tile: int, instruction: str) -> None:  # tile m * 2 + n <-> acc
                m, n = divmod(tile, 2)
                ib.emit(_intrin(instruction, _tile(tile),
                                _address(acc, m * TILE_ROWS * BLOCK_CHANNELS + n * TILE_ROWS),
                                tvm.tir.const(BLOCK_CHANNELS * 4, "int64")))

            for c in range(4):
                ib.emit(_intrin("llvm.x86.tilezero", _tile(c)))
                if accumulators == "memory":
                    accumulator(c, "llvm.x86.tilestored64")
            with ib.for_range(0, 9, name="tap") as tap:
                with ib.for_range(0, k_blocks, name="kb") as kb:
                    first = block * BLOCK_PIXELS + tap // 3 * width + tap % 3
                    for m in range(2):
                        ib.emit(_intrin("llvm.x86.tileloadd64", _tile(4 + m),
                                        _address(data, (first + m * TILE_ROWS) * channels
                                                 + kb * TILE_BYTES),
                                        tvm.tir.const(channels, "int64")))
                    for n in range(2):
                        ib.emit(_intrin("llvm.x86.tileloadd64", _tile(6 + n),
                                        _address(weight, ((tap * k_blocks + kb) * oc_tiles
                                                          + pair * 2 + n) * 1024),
                                        tvm.tir.const(TILE_BYTES, "int64")))
                    for m in range(2):
                        for n in range(2):
                            if accumulators == "memory":
                                accumulator(m * 2 + n, "llvm.x86.tileloadd64")
                            ib.emit(_intrin("llvm.x86.tdpbusd", _tile(m * 2 + n), _tile(4 + m),
                                            _tile(6 + n)))
                            if accumulators == "memory":
                                accumulator(m * 2 + n, "llvm.x86.tilestored64")
            if accumulators == "tiles":
                for c in range(4):
                    accumulator(c, "llvm.x86.tilestored64")
            with ib.for_range(0, BLOCK_PIXELS, name="p") as p:
                with ib.for_range(0, BLOCK_CHANNELS, kind="vectorize", name="o") as o:
                    value = tvm.tir.Cast("float32", tvm.tir.BufferLoad(
                        acc, [p * BLOCK_CHANNELS + o])) * tvm.tir.const(scale, "float32")
                    value = tvm.tir.round(value) + tvm.tir.const(zero_point, "float32")
                    value = tvm.tir.max(tvm.tir.min(value, tvm.tir.const(127, "float32")),
                                        tvm.tir.const(-128, "float32"))
                    ib.emit(tvm.tir.BufferStore(
                        out, tvm.tir.Cast("int8", value),
                        [(block * BLOCK_PIXELS + p) * channels + pair * BLOCK_CHANNELS + o]))
        ib.emit(_intrin("llvm.x86.tilerelease"))
    func = tvm.tir.PrimFunc([image, weight, out], ib.get())
    return func.with_attr({"global_symbol": "amx_conv3x3", "tir.noalias": True})


def pack_inputs(data: np.ndarray, weight: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """NCHW uint8 data [1, C, H, H] and OIHW int8 weights [C, C, 3, 3] in the AMX kernel's
    layouts (see :func:`amx_conv3x3`): NHWC data, weight tiles."""
    channels = data.shape[1]
    k_blocks, oc_tiles = channels // TILE_BYTES, channels // TILE_ROWS
    # weight[o, i, kh, kw] -> [tap, i // 64, o // 16, (i % 64) // 4, o % 16, i % 4]
    w = weight.reshape(oc_tiles, 16, k_blocks, 16, 4, 3, 3)  # ot, o16, kb, i16, i4, kh, kw
    packed = w.transpose(5, 6, 2, 0, 3, 1, 4).reshape(-1)
    return np.ascontiguousarray(data[0].transpose(1, 2, 0).reshape(-1)), \
        np.ascontiguousarray(packed)


def padded_pixels(image: np.ndarray, channels: int, height: int) -> np.ndarray:
    """What the kernel's first loop makes of the NHWC ``image``: [pixels_in, channels], the
    image padded by one pixel, rows of ``height + 2`` pixels, then zero pixels up to the last
    one a tile load reads."""
    width = height + 2
    pixels_in = -(-height * width // BLOCK_PIXELS) * BLOCK_PIXELS + 2 * width + 2
    padded = np.zeros((height + 2, width, channels), np.uint8)
    padded[1:-1, 1:-1] = image.reshape(height, height, channels)
    flat = np.zeros((pixels_in, channels), np.uint8)
    flat[:padded.shape[0] * width] = padded.reshape(-1, channels)
    return flat


def unpack_output(out: np.ndarray, channels: int, height: int) -> np.ndarray:
    """The AMX kernel's output as NCHW int8 [1, C, H, H]."""
    width = height + 2
    image = out.reshape(-1, channels)[:height * width].reshape(height, width, channels)
    return image[:, :height].transpose(2, 0, 1)[None]


def reference(data: np.ndarray, weight: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """The layer in numpy (int64 accumulation), for checking both builds."""
    _, channels, height, _ = data.shape
    padded = np.pad(data[0].astype(np.int64), ((0, 0), (1, 1), (1, 1)))
    acc = np.zeros((channels, height, height), np.int64)
    for kh in range(3):
        for kw in range(3):
            window = padded[:, kh:kh + height, kw:kw + height]
            acc += np.einsum("ihw,oi->ohw", window, weight[:, :, kh, kw].astype(np.int64))
    return np.clip(np.round(acc * scale) + zero_point, -128, 127).astype(np.int8)[None]


def amx_layer(channels: int, height: int, seed: int = 0, accumulators: str = "tiles"):
    """The AMX kernel of one layer built and run once on random data: (the built module, its
    arguments, how many outputs differ from numpy's by more than 1, how many outputs)."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (1, channels, height, height), dtype=np.uint8)
    weight = rng.integers(-128, 128, (channels, channels, 3, 3), dtype=np.int8)
    scale, zero_point = 4.0 / (channels * 9 * 64), 3  # outputs spread over most of int8
    expected = reference(data, weight, scale, zero_point)
    lib = tvm.build(amx_conv3x3(channels, height, scale, zero_point, accumulators),
                    target=AMX_TARGET, name="amx_conv3x3")
    image, packed = pack_inputs(data, weight)
    device = tvm.cpu()
    width = height + 2
    out = tvm.nd.empty((-(-height * width // BLOCK_PIXELS) * BLOCK_PIXELS * channels,), "int8",
                       device)
    args = [tvm.nd.array(image, device), tvm.nd.array(packed, device), out]
    lib["amx_conv3x3"](*args)
    wrong = int(np.count_nonzero(
        np.abs(unpack_output(out.numpy(), channels, height).astype(int) - expected) > 1))
    return lib, args, wrong, int(expected.size)


def model_task(tasks, channels: int, height: int):
    """ResNet-18's task of the 3x3/1 conv with ``channels`` in and out on ``height`` x ``height``
    (the one the model calls most where several share the shape), or None."""
    found = [task for task in tasks if conv_signature(task) == (channels, channels, 3, 1, height,
                                                                height)]
    return max(found, key=lambda task: int(task.weight)) if found else None


def probe(layers: List[Tuple[int, int]], work_dir: Optional[Path], threads: int,
          rounds: int, number: int) -> List[Dict]:
    # TVM's VNNI code for the layer: the host target without AMX (with it, Relay would give the
    # layer quantfuse's AMX layout and rule, which the cpu_vs_peers run measures)
    target = without_amx(normalize_target("host"), quiet=True)
    database = ms.database.MemoryDatabase()
    variant = "ours"
    if work_dir is not None:
        run = recorded_run(work_dir) or {}
        variant = run.get("variant", variant)
        database = compilable_records(open_tuned_database(work_dir)).database
    loaded = relay_ext.load_model("resnet18", image_size=224)
    tasks = lowered_tasks(loaded.mod, loaded.params, target, variant)
    rows = []
    for channels, height in layers:
        task = model_task(tasks, channels, height)
        if task is None:
            raise SystemExit(f"int8 ResNet-18 224 has no 3x3 conv {channels}->{channels} at "
                             f"{height}x{height}")
        timed = with_tvm_threads(threads, lambda task=task: time_task(task, database, target,
                                                                      variant, rounds))
        timers, wrong = {}, {}
        with TVMThread(threads) as tvm_thread:
            for accumulators in ("tiles", "memory"):
                lib, args, wrong[accumulators], outputs = amx_layer(channels, height,
                                                                    accumulators=accumulators)
                evaluator = lib.time_evaluator("amx_conv3x3", tvm.cpu(), number=number,
                                               repeat=1)
                timers[accumulators] = tvm_thread.timer(
                    lambda evaluator=evaluator, args=args: float(evaluator(*args).results[0]))
            samples = interleaved_rounds(timers, rounds)
        tuned = work_dir is not None and has_record(database, task.dispatched[0])
        row = {"layer": f"conv 3x3 {channels}->{channels}, {height}x{height}",
               "calls": int(task.weight), "task": task.task_name,
               "tvm_default_ms": timed.default_ms,
               "tvm_tuned_ms": timed.record_ms if tuned else None,
               "amx_ms": 1e3 * statistics.median(samples["tiles"]),
               "amx_memory_ms": 1e3 * statistics.median(samples["memory"]),
               "amx_wrong": max(wrong.values()), "outputs": outputs}
        print(row, flush=True)
        rows.append(row)
    return rows


def table(rows: List[Dict]) -> Tuple[List[str], List[List[str]]]:
    header = ["layer", "calls", "TVM default ms", "TVM tuned ms", "AMX ms (tile accumulators)",
              "AMX ms (accumulators via memory)", "AMX / best TVM", "AMX outputs off by > 1"]
    lines = []
    for row in rows:
        best = min(v for v in (row["tvm_default_ms"], row["tvm_tuned_ms"]) if v is not None)
        lines.append([row["layer"], str(row["calls"]), f"{row['tvm_default_ms']:.3f}",
                      "-" if row["tvm_tuned_ms"] is None else f"{row['tvm_tuned_ms']:.3f}",
                      f"{row['amx_ms']:.3f}", f"{row['amx_memory_ms']:.3f}",
                      f"{row['amx_ms'] / best:.2f}x / {row['amx_memory_ms'] / best:.2f}x",
                      f"{row['amx_wrong']} of {row['outputs']}"])
    return header, lines


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="a tuned int8 ResNet-18 224 work dir (--target host): its records "
                             "are timed too")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=20)
    parser.add_argument("--layers", default=",".join(f"{c}x{h}" for c, h in LAYERS),
                        help="channels x height pairs, e.g. 64x56,128x28")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    flags = host_cpu_flags() or frozenset()
    if not set(AMX_INT8_FLAGS) <= set(flags):
        print("amx_conv_probe: this host's OS does not enable amx_tile and amx_int8; "
              "run the probe on an AMX host", file=sys.stderr)
        return 2
    if not request_amx_tile_data(flags):
        print("amx_conv_probe: the kernel did not grant AMX tile data to this process "
              "(arch_prctl ARCH_REQ_XCOMP_PERM; Linux 5.16 or newer)", file=sys.stderr)
        return 2
    layers = [tuple(int(v) for v in item.lower().split("x")) for item in args.layers.split(",")]
    rows = probe(layers, args.work_dir, args.threads, args.rounds, args.number)
    header, lines = table(rows)
    text = markdown_table(header, lines)
    print(text)
    shown = sorted(flags & {"avx2", "avx512f", "avx512_vnni", "amx_int8", "amx_tile"})
    work_dir = f" --work-dir {args.work_dir}" if args.work_dir else ""
    write_section(
        SECTION, "AMX probe: a hand-written AMX 3x3 conv against TVM's, ResNet-18's layers",
        f"`python -m benchmarks.amx_conv_probe{work_dir} --threads {args.threads}`, "
        f"host flags {', '.join(shown)}, {args.threads} threads. "
        "TVM: the model's own task of that layer (NCHW16c, padding, conv, requantize and what "
        "Relay fused), timed alone as the per-task choice times it: TOPI's default schedule "
        "(`-mcpu=cascadelake` without AMX: VNNI) and, with a work dir tuned for that target, "
        "the task's best record. AMX "
        "probe: benchmarks/amx_conv_probe.py's kernel (tdpbusd tiles, 64 input channels deep; "
        "padding, conv and a float requantize to int8, NHWC in), median of "
        f"{args.rounds} rounds. Random data and weights. Time per call; the model makes `calls`. "
        "A probe of what AMX could give, not the code quantfuse compiles (that is "
        "meta_rules/cpu/amx_conv.py, docs/cpu.md).\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
