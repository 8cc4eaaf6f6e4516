"""A lowering pass of quantfuse's builds, on and off: the whole model's time and output, one run.

    python -m benchmarks.lowering_pass_ab [--pass quantfuse.RoundAndConvert]
        [--models resnet50,resnet18,mobilenet_v2] [--rounds 15] [--threads 2]
        [--target host] [--schedule no-search]

Each model's no-search build (the rule designs, no per-task choice, so that both builds have the
same schedules; ``--schedule default``: TVM's untuned schedules and quantfuse's own, which is what
the per-task choice keeps on targets without VNNI, whose MetaSchedule designs of the int16 convs
are slow) is built twice, with every pass of ``BUILD_OPTIONS["tir.add_lower_pass"]`` and
without the one named; both run on the model's input (the outputs must be identical: the passes
are exact rewrites), then are timed in turns (``--rounds`` rounds, each the mean of 10 runs after
the pause of :func:`relay_ext.measure.timing.interleaved_rounds`), so that the VM's drift hits
both alike. Prints the table and writes the
section ``lowering_pass_ab`` of docs/BENCHMARKS.md (``lowering_pass_ab_<target>`` for a target
other than ``host``).
"""

from __future__ import annotations

import argparse
import re
import statistics
from typing import Dict, List

import numpy as np
import tvm

import relay_ext
from benchmarks.markdown_report import markdown_table, write_section
from relay_ext.lowering import config
from relay_ext.measure.timing import interleaved_rounds, tvm_timer, with_tvm_threads


def passes_without(name: str) -> List:
    passes = list(config.BUILD_OPTIONS["tir.add_lower_pass"])
    kept = [entry for entry in passes if entry[1].info.name != name]
    if len(kept) == len(passes):
        names = ", ".join(entry[1].info.name for entry in passes)
        raise SystemExit(f"no lowering pass named {name!r}; quantfuse's builds run {names}")
    return kept


def build(loaded, passes: List, target: str = "host",
          schedule: str = "no-search") -> tvm.runtime.Module:
    saved = config.BUILD_OPTIONS["tir.add_lower_pass"]
    config.BUILD_OPTIONS["tir.add_lower_pass"] = passes
    try:
        if schedule == "default":
            return relay_ext.compile(loaded, target=target, schedule="default").lib
        return relay_ext.compile(loaded, target=target, schedule="no-search",
                                 choose_per_task=False).lib
    finally:
        config.BUILD_OPTIONS["tir.add_lower_pass"] = saved


def time_in_turns(libs: Dict[str, tvm.runtime.Module], inputs, rounds: int) -> Dict:
    """Whether the builds' outputs are identical, and each build's median ms per run; call it on
    the TVM thread that has the model's threads."""
    timed = {label: tvm_timer(lib, inputs, number=10) for label, lib in libs.items()}
    outputs = [output for output, _ in timed.values()]
    samples = interleaved_rounds({label: timer for label, (_, timer) in timed.items()}, rounds)
    return {"identical": all(np.array_equal(outputs[0], out) for out in outputs[1:]),
            "ms": {label: statistics.median(secs) * 1e3 for label, secs in samples.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pass", dest="pass_name", default="quantfuse.RoundAndConvert")
    parser.add_argument("--models", default="resnet50,resnet18,mobilenet_v2")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--target", default="host")
    parser.add_argument("--schedule", choices=["no-search", "default"], default="no-search")
    args = parser.parse_args()
    without = passes_without(args.pass_name)
    rows = []
    for name in args.models.split(","):
        loaded = relay_ext.load_model(name)
        libs = {"with": build(loaded, list(config.BUILD_OPTIONS["tir.add_lower_pass"]),
                              args.target, args.schedule),
                "without": build(loaded, without, args.target, args.schedule)}
        result = with_tvm_threads(args.threads, lambda: time_in_turns(libs, loaded.inputs,
                                                                        args.rounds))
        ms = result["ms"]
        rows.append([name, f"{ms['with']:.3f}", f"{ms['without']:.3f}",
                     f"{ms['with'] / ms['without']:.3f}", "yes" if result["identical"] else "NO"])
        print(rows[-1], flush=True)
    table = markdown_table(["model", "with (ms)", "without (ms)", "with / without",
                            "outputs identical"], rows)
    print(table)
    build_name = "no-search build" if args.schedule == "no-search" else "untuned build"
    body = (f"`{args.pass_name}` on and off in quantfuse's {build_name} (`--target "
            f"{args.target}`, batch 1, 224x224, {args.threads} threads, random weights; median of "
            f"{args.rounds} rounds of 10 runs, the two builds in turns).\n\n" + table)
    name, title = "lowering_pass_ab", f"A lowering pass on and off: {args.pass_name}"
    if args.target != "host":
        name += "_" + re.sub(r"\W+", "_", args.target).strip("_")
        title += f", {args.target}"
    write_section(name, title, body)


if __name__ == "__main__":
    main()
