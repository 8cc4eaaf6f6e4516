"""Time per candidate of VerifyLoweredGPUCode vs TVM's VerifyGPUCode, side by side in one process.

    python -m benchmarks.verifier_overhead [--per-task 40] [--repeats 3]

Candidates are sampled from the "ours" design spaces of quantized tasks for CUDA targets: each
space's trace is replayed with fresh random decisions (as ReplayTrace does), then the postprocs that
run before the verifier in TVM's CUDA list; a candidate those reject is not counted. Each candidate
is judged by both verifiers `--repeats` times, in alternating order, and its median time is kept.
The agreement rate is the share of candidates both verifiers decide alike. Target: ours <= 2 x TVM's
time per candidate. The table is printed and written to docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from typing import Callable, Dict, List, Tuple

import tvm
from tvm import meta_schedule as ms
from tvm import tir

import meta_rules
from benchmarks.markdown_report import markdown_table, write_section
from meta_rules.gpu.verify_lowered_gpu_code import (VerifyLoweredGPUCode, lower_for_verification,
                                                thread_extent_rejections)
from meta_rules.testing.candidate_sampling import draw_candidate, postprocs_before_gpu_verifier
from meta_rules.testing.te_workloads import BENCHMARK_TASKS

TASKS: Dict[str, Callable[[], tvm.IRModule]] = BENCHMARK_TASKS
TARGETS = {
    "rtx-3080 (cuda-tensorcore)": "nvidia/geforce-rtx-3080",
    "cuda sm_70": "cuda -arch=sm_70 -max_threads_per_block=1024 -max_shared_memory_per_block=49152 "
                  "-thread_warp_size=32",
}


def sample_candidates(mod: tvm.IRModule, target: tvm.target.Target, count: int,
                      rand_state: int = 0) -> List[tir.Schedule]:
    """``count`` candidates (or fewer, after 20 x count tries) from the "ours" design spaces."""
    before = postprocs_before_gpu_verifier(mod, target)
    spaces = meta_rules.measure.fusion.design_spaces(mod, target, "ours", rand_state=rand_state)
    out: List[tir.Schedule] = []
    for seed in range(1, 20 * count + 1):
        if len(out) == count:
            break
        sch = draw_candidate(mod, spaces[seed % len(spaces)], seed, before)
        if sch is not None:
            out.append(sch)
    return out


def _timed(postproc: ms.Postproc, sch: tir.Schedule) -> Tuple[bool, float]:
    start = time.perf_counter()
    ok = postproc.apply(sch)
    return ok, time.perf_counter() - start


def measure(task: str, mod: tvm.IRModule, target: tvm.target.Target, count: int,
            repeats: int) -> Dict[str, object]:
    candidates = sample_candidates(mod, target, count)
    context = ms.TuneContext(mod=mod, target=target, task_name=task)
    ours = VerifyLoweredGPUCode()
    ours._initialize_with_tune_context(context)  # pylint: disable=protected-access
    ours_timed = VerifyLoweredGPUCode()  # timed; its counts are not reported
    ours_timed._initialize_with_tune_context(context)  # pylint: disable=protected-access
    theirs = ms.postproc.VerifyGPUCode()
    theirs._initialize_with_tune_context(context)  # pylint: disable=protected-access
    ours_t, tvm_t, lower_t, agree = [], [], [], 0
    stricter: Counter = Counter()
    for index, sch in enumerate(candidates):
        times: Dict[str, List[float]] = {"ours": [], "tvm": [], "lowering": []}
        decisions = {}
        lowers = not thread_extent_rejections(sch.mod["main"], ours.limits.thread_warp_size)
        for rep in range(repeats):
            order = [("ours", ours_timed), ("tvm", theirs)]
            if (index + rep) % 2:
                order.reverse()
            for name, postproc in order:
                decisions[name], elapsed = _timed(postproc, sch)
                times[name].append(elapsed)
            start = time.perf_counter()
            if lowers:  # what ours lowers; nothing for a candidate rejected before lowering
                lower_for_verification(sch.mod["main"], "main", target)
            times["lowering"].append(time.perf_counter() - start if lowers else 0.0)
        ours.apply(sch)  # once more, untimed: the rejection counts reported
        ours_t.append(statistics.median(times["ours"]))
        tvm_t.append(statistics.median(times["tvm"]))
        lower_t.append(statistics.median(times["lowering"]))
        if decisions["ours"] == decisions["tvm"]:
            agree += 1
        else:
            for reason in ours.verify(sch.mod):
                stricter[reason.key] += 1
    n = len(candidates)
    return {
        "n": n,
        "ours_ms": 1e3 * sum(ours_t) / n,
        "tvm_ms": 1e3 * sum(tvm_t) / n,
        "lower_ms": 1e3 * sum(lower_t) / n,
        "agree": agree,
        "stricter": stricter,
        "summary": ours.stats(task),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-task", type=int, default=40, help="candidates per task and target")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    args = parser.parse_args()
    rows: List[List[object]] = []
    total = {"n": 0, "ours": 0.0, "tvm": 0.0, "agree": 0}
    stricter: Counter = Counter()
    reasons: List[str] = []
    for task_name, build in TASKS.items():
        mod = build()
        for target_name, target_str in TARGETS.items():
            target = tvm.target.Target(target_str)
            r = measure(f"{task_name} @ {target_name}", mod, target, args.per_task, args.repeats)
            n = r["n"]
            total["n"] += n
            total["ours"] += r["ours_ms"] * n
            total["tvm"] += r["tvm_ms"] * n
            total["agree"] += r["agree"]
            stricter.update(r["stricter"])
            stats = r["summary"]
            reasons.append(f"- {stats.summary()}")
            ratio = r["ours_ms"] / r["tvm_ms"]
            rows.append([task_name, target_name, n, f"{r['tvm_ms']:.1f}", f"{r['ours_ms']:.1f}",
                         f"{r['lower_ms']:.1f}", f"{ratio:.2f}", f"{r['agree']}/{n}"])
            print(f"{task_name:55s} {target_name:28s} n={n:3d} tvm {r['tvm_ms']:6.1f} ms  "
                  f"ours {r['ours_ms']:6.1f} ms (lowering {r['lower_ms']:6.1f})  ratio {ratio:.2f}  "
                  f"agree {r['agree']}/{n}", flush=True)
    n = total["n"]
    ours_ms, tvm_ms = total["ours"] / n, total["tvm"] / n
    ratio = ours_ms / tvm_ms
    verdict = "met" if ratio <= 2.0 else "NOT met"
    worst = max(float(row[6]) for row in rows)
    within = sum(float(row[6]) <= 2.0 for row in rows)
    print(f"all {n} candidates: tvm {tvm_ms:.1f} ms, ours {ours_ms:.1f} ms per candidate, "
          f"ratio {ratio:.2f} (target <= 2: {verdict}); {within} of {len(rows)} task rows within "
          f"2x, worst {worst:.2f}; agreement {total['agree']}/{n} = "
          f"{100 * total['agree'] / n:.1f}%")
    if stricter:
        print("disagreements (ours rejects):", dict(stricter))
    body = (
        f"{n} candidates sampled from the \"ours\" design spaces (trace replayed with fresh "
        f"decisions, then the postprocs before the verifier); each judged by both verifiers "
        f"{args.repeats} times in alternating order, median per candidate. \"lowering\" is the part "
        f"of ours spent in TVM's own lowering passes (the same list TVM's verifier runs; none for a "
        f"candidate rejected by the thread-extent check made before lowering).\n\n"
        + markdown_table(["task", "target", "candidates", "TVM VerifyGPUCode (ms)",
                          "VerifyLoweredGPUCode (ms)", "of which lowering (ms)", "ours / TVM",
                          "same decision"], rows)
        + f"\n\nAll candidates: TVM **{tvm_ms:.1f} ms**, ours **{ours_ms:.1f} ms** per candidate, "
        f"ratio **{ratio:.2f}** (target <= 2: {verdict}); {within} of {len(rows)} task rows within "
        f"2x, worst {worst:.2f}. Agreement "
        f"**{total['agree']}/{n} ({100 * total['agree'] / n:.1f}%)**"
        + (f"; disagreements by our reason: {dict(stricter)}." if stricter else ".")
        + "\n\nOur rejection counts per task:\n\n" + "\n".join(reasons)
    )
    if args.no_write:
        return 0
    write_section("verifier_overhead", "GPU verifier: VerifyLoweredGPUCode vs TVM's VerifyGPUCode",
                  body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
