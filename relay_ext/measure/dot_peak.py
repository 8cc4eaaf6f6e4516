"""How many int8 multiply-adds per second this CPU's AVX-512 VNNI dot product can do: the ceiling
of every VNNI kernel, which ``quantfuse profile`` sets each convolution's time against.

A small kernel built with TVM runs, on each of ``threads`` threads (TVM's parallel loop, one
iteration per worker), :data:`CHAINS` independent ``vpdpbusd`` accumulators (zmm registers) that
each add 64 products per instruction, for :data:`STEPS` steps; nothing is loaded inside the loop.
With 14 chains the instruction's latency (4-5 cycles) is hidden at up to two instructions per cycle,
so the time is the CPU's throughput of the instruction, as a conv kernel meets it at best::

    for t in parallel(threads):                 # one accumulator set per thread
        acc[14][16 x int32] = 0                 # a stack buffer LLVM keeps in 14 zmm registers
        for step in range(steps):
            for chain in unroll(14):
                acc[chain] = vpdpbusd(acc[chain], broadcast(a[0:4]), b[0:64])

Its accumulators are checked against the sums numpy predicts, so a kernel that did not run its
products cannot pass for a fast one. The best of :data:`REPEATS` timings counts (a peak: another
process or the VM's neighbours only slow it down).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional, Tuple

import numpy as np
import tvm
from tvm.script import tir as T

from relay_ext.lowering.targets import missing_here
from relay_ext.lowering.x86.vnni_intrinsics import VPDPBUSD
from relay_ext.measure.timing import with_tvm_threads

logger = logging.getLogger(__name__)

CHAINS = 14  # independent accumulators per thread: the no-search designs' 7 x 2 register tile
LANES = 16  # int32 lanes of a zmm register
PRODUCTS = 64  # int8 products one vpdpbusd sums (16 lanes x 4 bytes)
STEPS = 1_000_000  # per thread: 14 M instructions, a few ms
REPEATS = 5
FUNCTION = "quantfuse_vnni_peak"
TARGET = "llvm -mcpu=cascadelake"  # the first -mcpu with AVX-512 VNNI, all the kernel needs
A_BYTE, B_BYTE = 3, -2  # the operands' bytes (u8, s8): each instruction adds 4 x 3 x -2 per lane


class PeakUnavailable(RuntimeError):
    """This host cannot run the kernel (its OS does not enable AVX-512 VNNI)."""


@dataclasses.dataclass
class DotPeak:
    """The measured ceiling: ``macs_per_s`` int8 multiply-adds per second over ``threads``
    threads, with ``chains`` independent ``vpdpbusd`` accumulators per thread."""

    macs_per_s: float
    threads: int
    chains: int = CHAINS

    @property
    def gmacs(self) -> float:
        """Giga multiply-adds per second."""
        return self.macs_per_s / 1e9


def peak_kernel(threads: int, chains: int = CHAINS) -> tvm.tir.PrimFunc:
    """The kernel of the module doc: ``(a: u8[4], b: s8[64], out: i32[threads, chains * 16],
    steps: i32)``; ``out`` receives each thread's accumulators."""
    width = chains * LANES

    @T.prim_func
    def kernel(a: T.Buffer((4,), "uint8"), b: T.Buffer((PRODUCTS,), "int8"),
               out: T.Buffer((threads, width), "int32"), steps: T.int32):
        T.func_attr({"tir.noalias": True})
        for thread in T.parallel(threads):
            acc = T.decl_buffer((width,), "int32", scope="local")
            for chain in T.unroll(chains):
                acc[T.ramp(chain * LANES, 1, LANES)] = T.broadcast(T.int32(0), LANES)
            for _ in range(steps):
                for chain in T.unroll(chains):
                    acc[T.ramp(chain * LANES, 1, LANES)] = T.call_llvm_pure_intrin(
                        "int32x16", VPDPBUSD, T.uint32(3), acc[T.ramp(chain * LANES, 1, LANES)],
                        T.reinterpret(T.broadcast(T.reinterpret(a.vload([0], "uint8x4"),
                                                                dtype="int32"), LANES),
                                      dtype="int8x64"),
                        b.vload([0], "int8x64"))
            for lane in range(width):
                out[thread, lane] = acc[lane]

    return kernel.with_attr("global_symbol", FUNCTION)


def measure_vnni_peak(threads: int, steps: int = STEPS, repeats: int = REPEATS,
                      chains: int = CHAINS) -> DotPeak:
    """The best of ``repeats`` timings of :func:`peak_kernel` on ``threads`` threads of TVM's
    pool, as a :class:`DotPeak`. Raises :class:`PeakUnavailable` where the OS does not enable
    AVX-512 VNNI, ValueError for counts below 1 and RuntimeError when the accumulators are not the
    sums the products make."""
    if min(int(threads), int(steps), int(repeats), int(chains)) < 1:
        raise ValueError(f"threads, steps, repeats and chains must be positive, got "
                         f"{threads}, {steps}, {repeats}, {chains}")
    missing = missing_here(TARGET)
    if missing:  # the AVX-512 ones say it; the rest of cascadelake's long list does not
        named = [feature for feature in missing if feature.startswith("avx512")] or missing
        raise PeakUnavailable(f"this host's OS does not enable {', '.join(named)}: no AVX-512 "
                              "VNNI dot product to measure")
    threads, steps = int(threads), int(steps)
    lib = tvm.build(tvm.IRModule({FUNCTION: peak_kernel(threads, chains)}), target=TARGET)
    a = tvm.nd.array(np.full(4, A_BYTE, "uint8"))
    b = tvm.nd.array(np.full(PRODUCTS, B_BYTE, "int8"))
    out = tvm.nd.array(np.zeros((threads, chains * LANES), "int32"))

    def timed():
        evaluator = lib.time_evaluator(FUNCTION, tvm.cpu(), number=1, repeat=int(repeats))
        return evaluator(a, b, out, steps).results

    seconds = min(with_tvm_threads(threads, timed))
    expected = np.int64(steps) * 4 * A_BYTE * B_BYTE
    if not np.array_equal(out.numpy(), np.full(out.shape, expected, "int64")):
        raise RuntimeError(f"the VNNI peak kernel's accumulators are not {expected}: "
                           f"{np.unique(out.numpy())[:4]}")
    peak = DotPeak(threads * chains * steps * PRODUCTS / seconds, threads, chains)
    logger.debug("VNNI peak: %.1f GMAC/s on %d threads (%.3f ms)", peak.gmacs, threads,
                 1e3 * seconds)
    return peak


def vnni_peak_or_reason(threads: int) -> Tuple[Optional[DotPeak], Optional[str]]:
    """:func:`measure_vnni_peak`, or None and why there is none, in one line."""
    try:
        return measure_vnni_peak(threads), None
    except PeakUnavailable as error:
        return None, str(error)
