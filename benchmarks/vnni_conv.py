"""TVM's untuned int8 convs on AVX-512 VNNI against AVX-512, before and after our VNNI schedule.

    python -m benchmarks.vnni_conv [--models resnet18] [--convs all] [--repeats 7] [--number 10]
        [--threads 2]

Needs a host whose OS enables AVX-512 VNNI (/proc/cpuinfo ``avx512_vnni``). Three builds of each
item, TVM's default (untuned) schedules, TOPHUB off:

* ``AVX-512``: ``-mcpu=skylake-avx512`` (vpmaddubsw + vpmaddwd + vpaddd per dot product);
* ``VNNI before``: ``-mcpu=cascadelake`` with TOPI's own k x k int8 conv schedule (one
  accumulator per output vector, relay_ext.lowering.x86.vnni_conv_schedule's docstring);
* ``VNNI after``: ``-mcpu=cascadelake`` with relay_ext.lowering.x86.vnni_conv_schedule (what
  quantfuse builds now).

Items: single ResNet convs (uint8 NCHW qnn.conv2d + requantize, as the PyTorch import gives them)
and whole models (``--models``). Each item's builds are timed in interleaved rounds
(relay_ext.measure.timing.interleaved_rounds: each round times every build once, the mean of
``number`` runs, on a TVM thread pool of ``threads``), so a change of load hits all three alike; reported are medians
and the ratios VNNI/AVX-512. Also per item: the distinct registers vpdpbusd accumulates into in
the build's assembly, and whether before and after give the same output (they must: integer
arithmetic). Results go to ``benchmarks/results/vnni_conv.json`` and the section ``vnni_conv``
of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import numpy as np
import tvm
from tvm import relay
from tvm.topi.x86 import conv2d_avx_common

from benchmarks.markdown_report import (current_commit, load_results, markdown_table, save_result,
                                        utc_now, write_section)
import relay_ext
from relay_ext.lowering import targets
from relay_ext.lowering.config import BUILD_OPTIONS
from relay_ext.lowering.x86 import vnni_conv_schedule, x86_codegen
from relay_ext.lowering.relay_build import copy_module
from relay_ext.measure.timing import TVMThread, interleaved_rounds, load_average

RESULTS = Path(__file__).resolve().parent / "results" / "vnni_conv.json"
AVX512, BEFORE, AFTER = "AVX-512", "VNNI before", "VNNI after"
MCPU = {AVX512: "skylake-avx512", BEFORE: "cascadelake", AFTER: "cascadelake"}
# ResNet-18's 3x3 convs (height/width, in channels, out channels, kernel, stride), its 7x7 stem,
# and two of ResNet-50's 1x1 convs (their TOPI schedule is not changed: a control)
CONVS: Dict[str, Tuple[int, int, int, int, int]] = {
    "3x3 56x56 64->64": (56, 64, 64, 3, 1),
    "3x3 56x56 64->128 /2": (56, 64, 128, 3, 2),
    "3x3 28x28 128->128": (28, 128, 128, 3, 1),
    "3x3 28x28 128->256 /2": (28, 128, 256, 3, 2),
    "3x3 14x14 256->256": (14, 256, 256, 3, 1),
    "3x3 14x14 256->512 /2": (14, 256, 512, 3, 2),
    "3x3 7x7 512->512": (7, 512, 512, 3, 1),
    "7x7 224x224 3->64 /2": (224, 3, 64, 7, 2),
    "1x1 56x56 64->256": (56, 64, 256, 1, 1),
    "1x1 14x14 1024->256": (14, 1024, 256, 1, 1),
}


def qnn_conv(height: int, in_channels: int, out_channels: int, kernel: int,
             stride: int) -> tvm.IRModule:
    """uint8 NCHW qnn.conv2d (int8 weights, seed 0) + requantize to uint8."""
    data = relay.var("data", shape=(1, in_channels, height, height), dtype="uint8")
    weight = np.random.default_rng(0).integers(-128, 128, (out_channels, in_channels, kernel,
                                                            kernel)).astype("int8")
    conv = relay.qnn.op.conv2d(data, relay.const(weight), relay.const(7), relay.const(0),
                               relay.const(0.05), relay.const(0.02), kernel_size=(kernel, kernel),
                               channels=out_channels, padding=(kernel // 2, kernel // 2),
                               strides=(stride, stride), out_dtype="int32")
    out = relay.qnn.op.requantize(conv, relay.const(0.0004), relay.const(0), relay.const(2.0),
                                  relay.const(128), out_dtype="uint8")
    return tvm.IRModule.from_expr(relay.Function([data], out))


@contextlib.contextmanager
def schedule_for(config: str) -> Iterator[None]:
    """TOPI's own k x k int8 conv schedule in force for ``VNNI before``, ours otherwise."""
    installed = conv2d_avx_common._schedule_conv_NCHWc_int8  # pylint: disable=protected-access
    if config == BEFORE:
        conv2d_avx_common._schedule_conv_NCHWc_int8 = vnni_conv_schedule.topi_schedule()
    try:
        yield
    finally:
        conv2d_avx_common._schedule_conv_NCHWc_int8 = installed


def build(mod: tvm.IRModule, params, config: str, threads: int):
    """TVM's untuned build of ``mod`` for ``config`` (opt level 3, quantfuse's build options)."""
    with schedule_for(config), tvm.transform.PassContext(opt_level=3, config=BUILD_OPTIONS):
        return relay.build(copy_module(mod), target=f"llvm -mcpu={MCPU[config]} -num-cores {threads}",
                           params=params)


def measure(name: str, mod: tvm.IRModule, params, inputs: Dict[str, np.ndarray],
            args: argparse.Namespace, tvm_thread: TVMThread) -> Dict:
    """One item: build the three configurations, time them interleaved, compare outputs."""
    timers, outputs, registers = {}, {}, {}
    for config in (AVX512, BEFORE, AFTER):
        lib = build(mod, params, config, args.threads)
        registers[config] = vnni_conv_schedule.vpdpbusd_accumulators(lib)
        outputs[config], timers[config] = tvm_thread.tvm_timer(lib, inputs, args.number)
    load_before = load_average()
    samples = interleaved_rounds(timers, args.repeats)
    median = {c: statistics.median(s) * 1e3 for c, s in samples.items()}
    row = {
        "item": name, "date": utc_now(), "commit": current_commit(), "threads": args.threads,
        "repeats": args.repeats, "number": args.number,
        "load_average": [load_before, load_average()],
        "median_ms": median,
        "min_ms": {c: min(s) * 1e3 for c, s in samples.items()},
        "vpdpbusd_accumulators": registers,
        "before_equals_after": bool(np.array_equal(outputs[BEFORE], outputs[AFTER])),
    }
    print(f"{name}: " + ", ".join(f"{c} {median[c]:.3f} ms ({registers[c]} acc)" for c in median)
          + f"; before/AVX-512 x{median[BEFORE] / median[AVX512]:.2f}, "
          f"after/AVX-512 x{median[AFTER] / median[AVX512]:.2f}, "
          f"equal {row['before_equals_after']}", flush=True)
    return row


def table(row: Dict) -> str:
    """One markdown row (the header is in :func:`render`)."""
    med = row["median_ms"]
    acc = row["vpdpbusd_accumulators"]
    return (f"| {row['item']} | {med[AVX512]:.3f} | {med[BEFORE]:.3f} ({acc[BEFORE]}) | "
            f"{med[AFTER]:.3f} ({acc[AFTER]}) | {med[BEFORE] / med[AVX512]:.2f} | "
            f"{med[AFTER] / med[AVX512]:.2f} | {med[AFTER] / med[BEFORE]:.2f} | "
            f"{'yes' if row['before_equals_after'] else 'NO'} | {row['date']} |")


def render() -> Path:
    """The section ``vnni_conv`` of docs/BENCHMARKS.md, from every kept result."""
    stored = load_results(RESULTS)
    header = markdown_table(
        ["item", "AVX-512 ms", "VNNI before ms (accumulators)", "VNNI after ms (accumulators)",
         "before / AVX-512", "after / AVX-512", "after / before", "same output", "measured"], [])
    order = {name: i for i, name in enumerate(list(CONVS) + ["resnet18", "resnet50",
                                                             "mobilenet_v2"])}
    rows = sorted(stored.values(), key=lambda r: order.get(r["item"], len(order)))
    intro = (
        "TVM's untuned int8 builds (TOPHUB off, fallback configurations), batch 1, medians of "
        "interleaved rounds on a TVM thread pool of the given threads. `AVX-512`: "
        "`-mcpu=skylake-avx512`; `VNNI before`: `-mcpu=cascadelake` with TOPI's own int8 conv "
        "schedule; `VNNI after`: `-mcpu=cascadelake` with relay_ext.lowering.x86.vnni_conv_schedule. "
        "Accumulators: distinct registers vpdpbusd writes in the build's assembly. Single convs are "
        "uint8 NCHW qnn.conv2d + requantize (random int8 weights, seed 0). See docs/vnni.md.\n\n"
        + header)
    body = intro + "\n" + "\n".join(table(r) for r in rows)
    return write_section("vnni_conv", "Untuned int8 convs: AVX-512 VNNI vs AVX-512", body)


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet18",
                        help="comma-separated built-in models of relay_ext.load_model ('' for none)")
    parser.add_argument("--convs", default="all", help="comma-separated names of CONVS, or all")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--number", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    missing = targets.missing_features("llvm -mcpu=cascadelake")
    if targets.host_cpu_flags() is None or missing:
        print(f"this benchmark runs VNNI code: the OS of this machine does not enable "
              f"{', '.join(missing) or 'AVX-512 VNNI (flags unknown)'}", file=sys.stderr)
        return 2
    x86_codegen.install()  # the VNNI intrinsics for LLVM 22, and our schedule
    convs = list(CONVS) if args.convs == "all" else [c for c in args.convs.split(",") if c]
    rng = np.random.default_rng(1)
    with TVMThread(args.threads) as tvm_thread:
        for name in convs:
            height, in_channels = CONVS[name][:2]
            inputs = {"data": rng.integers(0, 256, (1, in_channels, height, height))
                      .astype("uint8")}
            save_result(RESULTS, name, measure(name, qnn_conv(*CONVS[name]), None, inputs, args,
                                               tvm_thread))
        for model_name in [m for m in args.models.split(",") if m]:
            loaded = relay_ext.load_model(model_name, image_size=224)
            save_result(RESULTS, model_name, measure(model_name, loaded.mod, loaded.params,
                                                     loaded.inputs, args, tvm_thread))
    print(f"wrote {render()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
