"""Design-space generation time under "ours" vs "upstream", side by side in one process.

    python -m benchmarks.rule_overhead [--repeats 7] [--tasks SUBSTRING,...] [--models resnet18]

For each quantized task and target the same TuneContext setup is timed for both variants
(generate_design_space only, median of repeats, variants interleaved so drift hits both alike);
the ratio ours/upstream is printed and written to docs/BENCHMARKS.md. Target: <= 1.15.

Besides the seed workloads, two tasks where ours' fusion rules act (tests/fusion_workloads.py,
the workloads of their tests): a ResNet basic block's conv with its residual epilogue, NHWC at
ResNet-18's first stage size, and a global average pool + cast. ``--models`` adds, per GPU target,
the generation time of every task of a built-in model summed (each task's median), which is what
a tune pays: tiny tasks such as a pool take a few milliseconds, where a fixed cost per rule call
weighs more than it does on the model.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Dict, List

import tvm
from tvm import meta_schedule as ms

import meta_rules
from benchmarks.markdown_report import markdown_table, write_section
import relay_ext
from meta_rules.testing.fusion_workloads import avg_pool_cast, residual_conv_epilogue
from meta_rules.testing.te_workloads import BENCHMARK_TASKS
from relay_ext.tuning import extract_tasks

TASKS: Dict[str, Callable[[], tvm.IRModule]] = {
    **BENCHMARK_TASKS,
    "residual: int8 conv2d 3x3 NHWC 56x56x64 + requantize + residual add + relu":
        lambda: residual_conv_epilogue("NHWC", size=56, channels=64),
    "int8 global avg pool 7x7x512 NHWC + cast": lambda: avg_pool_cast("NHWC", channels=512),
}
VARIANTS = ("ours", "upstream")
TARGETS = {
    "a100 (cuda-tensorcore)": "nvidia/nvidia-a100",
    "cuda sm_70": "cuda -arch=sm_70 -max_threads_per_block=1024 -max_shared_memory_per_block=49152 "
                  "-thread_warp_size=32",
    "llvm": "llvm -num-cores 2",
}


def time_generation(mod: tvm.IRModule, target: str, variant: str) -> Callable[[], float]:
    context = ms.TuneContext(mod=mod, target=target,
                             space_generator=meta_rules.space_generator(target, variant),
                             rand_state=1)

    def once() -> float:
        start = time.perf_counter()
        context.generate_design_space()
        return time.perf_counter() - start

    once()  # warm-up
    return once


def interleaved_medians(timers: Dict[str, Callable[[], float]], repeats: int) -> Dict[str, float]:
    """Median seconds per timer, the timers run in turn so that drift hits all alike."""
    samples: Dict[str, List[float]] = {name: [] for name in timers}
    for _ in range(repeats):
        for name, timer in timers.items():
            samples[name].append(timer())
    return {name: statistics.median(values) for name, values in samples.items()}


# The GPU targets timed on whole models, with the layout their fusion rows use.
MODEL_TARGETS = {"a100 (cuda-tensorcore)": "NHWC", "cuda sm_70": "NCHW"}


def model_row(model: str, target_name: str, repeats: int) -> List[object]:
    """Generation time of every task of ``model`` summed, per variant."""
    target = TARGETS[target_name]
    loaded = relay_ext.load_model(model, layout=MODEL_TARGETS[target_name])
    tasks = {v: extract_tasks(loaded.mod, loaded.params, target, v) for v in VARIANTS}
    totals = {v: 0.0 for v in VARIANTS}
    for index in range(len(tasks["ours"])):
        timers = {v: time_generation(tasks[v][index].dispatched[0], target, v) for v in VARIANTS}
        for variant, median in interleaved_medians(timers, repeats).items():
            totals[variant] += median
    return [f"{model}: all {len(tasks['ours'])} tasks ({MODEL_TARGETS[target_name]}, summed)",
            target_name, f"{totals['ours'] * 1e3:.1f}", f"{totals['upstream'] * 1e3:.1f}",
            f"{totals['ours'] / totals['upstream']:.2f}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tasks", default="",
                        help="comma-separated substrings: time only the tasks whose name has one")
    parser.add_argument("--models", default="",
                        help="comma-separated built-in models timed whole on the GPU targets")
    args = parser.parse_args()
    wanted = [w for w in args.tasks.split(",") if w]
    rows: List[List[object]] = []
    for task_name, build in TASKS.items():
        if wanted and not any(w in task_name for w in wanted):
            continue
        mod = build()
        for target_name, target in TARGETS.items():
            medians = interleaved_medians(
                {v: time_generation(mod, target, v) for v in VARIANTS}, args.repeats)
            ours, upstream = medians["ours"], medians["upstream"]
            rows.append([task_name, target_name, f"{ours * 1e3:.1f}", f"{upstream * 1e3:.1f}",
                         f"{ours / upstream:.2f}"])
            print(" | ".join(str(c) for c in rows[-1]), flush=True)
    task_ratios = [float(r[4]) for r in rows]
    model_rows = [model_row(m, t, args.repeats) for m in args.models.split(",") if m
                  for t in MODEL_TARGETS]
    for row in model_rows:
        print(" | ".join(str(c) for c in row), flush=True)
    worst, geo = max(task_ratios), statistics.geometric_mean(task_ratios)
    verdict = "met" if worst <= 1.15 else "NOT met"
    summary = (f"Ratio ours/upstream per task: geometric mean **{geo:.2f}**, worst **{worst:.2f}** "
               f"(target <= 1.15: {verdict})")
    over = [f"{r[0]} on {r[1]} ({r[4]}: {r[2]} against {r[3]} ms)" for r in rows if float(r[4]) > 1.15]
    if over:
        summary += "; over the target: " + "; ".join(over)
    if model_rows:
        model_ratios = [float(r[4]) for r in model_rows]
        summary += (f". Whole models: worst **{max(model_ratios):.2f}** (target <= 1.15: "
                    f"{'met' if max(model_ratios) <= 1.15 else 'NOT met'})")
    print(summary.replace("**", ""))
    body = (
        f"Median of {args.repeats} repeats of `generate_design_space` per task, variants "
        "interleaved, random state 1. Model rows sum the medians of every task of the model.\n\n"
        + markdown_table(["task", "target", "ours (ms)", "upstream (ms)", "ours / upstream"],
                         rows + model_rows)
        + f"\n\n{summary}."
    )
    write_section("rule_overhead", "Design-space generation: ours vs upstream", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
