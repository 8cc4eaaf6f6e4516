"""A boolean LLVM option of quantfuse's targets, as quantfuse sets it and as LLVM's default: the
whole model's time, output and stack traffic, one run.

    python -m benchmarks.llvm_option_ab [--option x86-machine-combiner]
        [--models resnet50,resnet18,mobilenet_v2] [--rounds 11] [--threads 2]
        [--target "llvm -mcpu=core-avx2 -num-cores 2"] [--schedule default]

quantfuse's targets carry LLVM options where their code needs them
(:func:`relay_ext.lowering.x86.x86_codegen.with_llvm_options`: ``-x86-machine-combiner=0`` where
the int8 convs become int16 pairs). Each model is built twice, with the normalized target and
with the option set back to LLVM's default (``-cl-opt=-<option>:bool=1``); ``--schedule default``
(TVM's untuned schedules and quantfuse's own: what the per-task choice keeps on targets without
VNNI) or ``no-search`` (the rule designs, no per-task choice). Both run on the model's input (the
outputs must be identical: an LLVM option changes instructions, not results), then are timed in
turns (:func:`benchmarks.lowering_pass_ab.time_in_turns`). The table also counts the vector
registers each build stores to the stack (``vmovdqu/vmovdqa %ymm/%zmm, (%rsp)``: spills and
stack buffers). Prints the table and writes the section ``llvm_option_ab_<target>`` of
docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import re

import relay_ext
from benchmarks.lowering_pass_ab import time_in_turns
from benchmarks.markdown_report import markdown_table, write_section
from relay_ext.measure.timing import with_tvm_threads

OURS, LLVM_DEFAULT = "quantfuse", "LLVM's default"
STACK_STORE = re.compile(r"vmovdq[au](?:32|64)?\s+%[yz]mm\d+, -?\d*\(%rsp\)")


def build(loaded, target: str, schedule: str):
    if schedule == "default":
        return relay_ext.compile(loaded, target=target, schedule="default").lib
    return relay_ext.compile(loaded, target=target, schedule="no-search",
                             choose_per_task=False).lib


def stack_stores(lib) -> int:
    return len(STACK_STORE.findall(lib.get_lib().get_source("asm")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--option", default="x86-machine-combiner")
    parser.add_argument("--models", default="resnet50,resnet18,mobilenet_v2")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--target", default="llvm -mcpu=core-avx2 -num-cores 2")
    parser.add_argument("--schedule", choices=["no-search", "default"], default="default")
    args = parser.parse_args()
    llvm_default = f"{args.target} -cl-opt=-{args.option}:bool=1"
    rows = []
    for name in args.models.split(","):
        loaded = relay_ext.load_model(name)
        libs = {OURS: build(loaded, args.target, args.schedule),
                LLVM_DEFAULT: build(loaded, llvm_default, args.schedule)}
        result = with_tvm_threads(args.threads, lambda: time_in_turns(libs, loaded.inputs,
                                                                        args.rounds))
        ms = result["ms"]
        ours, theirs = ms[OURS], ms[LLVM_DEFAULT]
        rows.append([name, f"{ours:.3f}", f"{theirs:.3f}", f"{ours / theirs:.3f}",
                     f"{stack_stores(libs[OURS])} / {stack_stores(libs[LLVM_DEFAULT])}",
                     "yes" if result["identical"] else "NO"])
        print(rows[-1], flush=True)
    table = markdown_table(["model", f"{OURS} (ms)", f"{LLVM_DEFAULT} (ms)", "ratio",
                            "vector stores to the stack", "outputs identical"], rows)
    print(table)
    build_name = "no-search build" if args.schedule == "no-search" else "untuned build"
    body = (f"`-{args.option}` as quantfuse's target sets it and at LLVM's default "
            f"(`-cl-opt=-{args.option}:bool=1`), quantfuse's {build_name} (`--target "
            f"{args.target}`, batch 1, 224x224, {args.threads} threads, random weights; median of "
            f"{args.rounds} rounds of 10 runs, the two builds in turns).\n\n" + table)
    slug = re.sub(r"\W+", "_", f"{args.option} {args.target}").strip("_")
    write_section(f"llvm_option_ab_{slug}", f"An LLVM option on and off: -{args.option}, "
                  f"{args.target}", body)


if __name__ == "__main__":
    main()
