"""Design-space generation time under "ours" vs "upstream", side by side in one process.

    python -m benchmarks.rule_overhead [--repeats 7]

For each quantized task and target the same TuneContext setup is timed for both variants
(generate_design_space only, median of repeats, variants interleaved so drift hits both alike);
the ratio ours/upstream is printed and written to docs/BENCHMARKS.md. Target: <= 1.15.

Besides the seed workloads, two tasks where ours' fusion rules act (tests/fusion_workloads.py,
the workloads of their tests): a ResNet basic block's conv with its residual epilogue, NHWC at
ResNet-18's first stage size, and a global average pool + cast.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import tvm
from tvm import meta_schedule as ms

import meta_rules
from benchmarks.markdown_report import markdown_table, write_section
from relay_ext.te_workloads import BENCHMARK_TASKS

# The shared TE workloads live with the tests until they move to a package of their own.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fusion_workloads import avg_pool_cast, residual_conv_epilogue  # noqa: E402  pylint: disable=wrong-import-position

TASKS: Dict[str, Callable[[], tvm.IRModule]] = {
    **BENCHMARK_TASKS,
    "residual: int8 conv2d 3x3 NHWC 56x56x64 + requantize + residual add + relu":
        lambda: residual_conv_epilogue("NHWC", size=56, channels=64),
    "int8 global avg pool 7x7x512 NHWC + cast": lambda: avg_pool_cast("NHWC", channels=512),
}
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tasks", default="",
                        help="comma-separated substrings: time only the tasks whose name has one")
    args = parser.parse_args()
    wanted = [w for w in args.tasks.split(",") if w]
    rows: List[List[object]] = []
    ratios = []
    for task_name, build in TASKS.items():
        if wanted and not any(w in task_name for w in wanted):
            continue
        mod = build()
        for target_name, target in TARGETS.items():
            timers = {v: time_generation(mod, target, v) for v in ("ours", "upstream")}
            samples: Dict[str, List[float]] = {v: [] for v in timers}
            for _ in range(args.repeats):
                for variant, timer in timers.items():
                    samples[variant].append(timer())
            ours, upstream = (statistics.median(samples[v]) for v in ("ours", "upstream"))
            ratios.append(ours / upstream)
            rows.append([task_name, target_name, f"{ours * 1e3:.1f}", f"{upstream * 1e3:.1f}",
                         f"{ours / upstream:.2f}"])
            print(f"{task_name:55s} {target_name:24s} ours {ours * 1e3:7.1f} ms  "
                  f"upstream {upstream * 1e3:7.1f} ms  ratio {ours / upstream:.2f}", flush=True)
    worst, geo = max(ratios), statistics.geometric_mean(ratios)
    verdict = "met" if worst <= 1.15 else "NOT met"
    print(f"ratio ours/upstream: geometric mean {geo:.2f}, worst {worst:.2f} (target <= 1.15: {verdict})")
    body = (
        f"Median of {args.repeats} repeats of `generate_design_space` per task, variants interleaved.\n\n"
        + markdown_table(["task", "target", "ours (ms)", "upstream (ms)", "ours / upstream"], rows)
        + f"\n\nRatio ours/upstream: geometric mean **{geo:.2f}**, worst **{worst:.2f}** "
        f"(target <= 1.15: {verdict})."
    )
    write_section("rule_overhead", "Design-space generation: ours vs upstream", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
