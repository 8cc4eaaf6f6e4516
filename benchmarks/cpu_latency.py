"""CPU latency of int8 models at equal tuning budgets: ours vs upstream vs legacy, PyTorch, untuned.

    python -m benchmarks.cpu_latency [--models resnet18,resnet50] [--trials-per-task 2]
        [--seeds 0,1,2] [--repeats 9] [--number 5] [--work-root /tmp/quantfuse-cpu-latency]

For each model (batch 1, 224x224, llvm on this CPU) and each seed: every variant is tuned with the
same budget (``trials-per-task`` x number of tasks, same seed, same search, one search thread,
which removes one source of run-to-run variation; runs still differ, see ``relay_ext.tune``)
into its own work dir under ``--work-root`` (a rerun resumes there instead of tuning again),
compiled with each task's fastest record (:func:`relay_ext.compile`, no per-task timing), and
checked against
PyTorch's quantized module. A few trials per task are mostly random samples, so which variant
wins at one seed is largely search luck; several seeds show how large that luck is. Then every
tuned build, TVM untuned (TVM's default schedules) and PyTorch int8 are timed in interleaved
rounds (each round times every configuration once, the mean of ``number`` runs), so drift hits
all alike. Reported: median, min-max over rounds, and the ratio ours/upstream paired per round
and seed (per seed, and over all seeds). Each model's result is kept in
``benchmarks/results/cpu_latency.json``; the section ``cpu_latency`` of docs/BENCHMARKS.md is
rendered from all kept results.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List

import torch
import tvm
from tvm import meta_schedule as ms

import relay_ext
from benchmarks.markdown_report import (current_commit, save_result, markdown_table, load_results,
                                         write_results_section)
from meta_rules import VARIANTS
from meta_rules.generic.tensor_intrinsics import register_tensor_intrinsics
from relay_ext.latency.result import UNTUNED
from relay_ext.lowering.targets import host_llvm_target, normalize_target
from relay_ext.measure.timing import TVMThread, interleaved_rounds
from relay_ext.peers.pytorch import PYTORCH, torch_timer
from relay_ext.report.accuracy import run_torchscript, step_error
from relay_ext.report.tables import machine_description
from relay_ext.tuning import extract_tasks
from relay_ext.workdir.records import valid_run_secs

RESULTS = Path(__file__).resolve().parent / "results" / "cpu_latency.json"


def search_strategy() -> ms.search_strategy.EvolutionarySearch:
    """A smaller evolutionary search than TVM's default (population 2048), which takes tens of
    seconds per round here; the same for every variant."""
    return ms.search_strategy.EvolutionarySearch(
        population_size=64, init_measured_ratio=0.2, init_min_unmeasured=16,
        genetic_num_iters=2, genetic_max_fail_count=4)


def tune_variant(loaded, target, variant: str, work_dir: Path, budget: int, per_iter: int,
                 seed: int, search_threads: int) -> Dict:
    work_dir.mkdir(parents=True, exist_ok=True)
    register_tensor_intrinsics(target)  # before a database of tensorized records is read
    database = ms.database.JSONDatabase(work_dir=str(work_dir))
    have = len(database)
    start = time.perf_counter()
    if have < budget:
        database = relay_ext.tune(loaded.mod, loaded.params, target, work_dir,
                                  max_trials=budget - have, variant=variant,
                                  num_trials_per_iter=per_iter, seed=seed,
                                  strategy=search_strategy(), num_tuning_cores=search_threads)
    return {"database": database, "tuning_s": time.perf_counter() - start, "resumed_from": have}


def bench_model(name: str, args) -> Dict:
    target = normalize_target(args.target) if args.target else host_llvm_target(args.threads)
    loaded = relay_ext.load_model(name, image_size=args.image_size)
    n_tasks = len(extract_tasks(loaded.mod, loaded.params, target, "ours"))
    budget = args.trials_per_task * n_tasks
    print(f"{name}: {n_tasks} tasks, {budget} trials per variant", flush=True)
    expected = run_torchscript(loaded.torchscript, loaded.example_input)
    libs, tuning = {}, {}
    for seed in args.seeds:
        for variant in VARIANTS:
            key = tuned_key(variant, seed)
            work_dir = Path(args.work_root) / name / mcpu_of(target) / f"{variant}-seed{seed}"
            tuned = tune_variant(loaded, target, variant, work_dir, budget, args.trials_per_task,
                                 seed, args.search_threads)
            records = tuned["database"].get_all_tuning_records()
            tuning[key] = {"seconds": round(tuned["tuning_s"], 1),
                           "records": len(records),
                           "failed": sum(valid_run_secs(r.run_secs) is None for r in records),
                           "resumed_from": tuned["resumed_from"]}
            print(f"  {key}: tuned ({tuning[key]})", flush=True)
            libs[key] = relay_ext.compile(loaded, target=target, records=tuned["database"],
                                          variant=variant, choose_per_task=False).lib
    libs[UNTUNED] = relay_ext.compile(loaded, target=target, schedule="default").lib
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]  # other work on the 2 cores would skew every configuration

    timers, steps = {}, {}
    with TVMThread(args.threads) as tvm_thread:  # TVM on --threads threads, PyTorch on this one
        for key, lib in libs.items():
            output, timers[key] = tvm_thread.tvm_timer(lib, loaded.inputs, args.number)
            steps["untuned" if key == UNTUNED else key] = step_error(
                output, expected, loaded.output_scale).max_steps
        timers[PYTORCH] = torch_timer(loaded.torchscript, loaded.example_input, args.number)
        samples = interleaved_rounds(timers, args.repeats)
    ratios = {seed: ratio_summary(paired_ratios(samples, seed)) for seed in args.seeds}
    every = [r for seed in args.seeds for r in paired_ratios(samples, seed)]
    return {
        "model": name, "image_size": args.image_size, "target": str(target), "tasks": n_tasks,
        "budget": budget, "trials_per_task": args.trials_per_task, "seeds": list(args.seeds),
        "search_threads": args.search_threads, "threads": args.threads,
        "tvm_threads": args.threads,  # a fresh TVMThread pool of this size
        "repeats": args.repeats, "number": args.number, "tuning": tuning, "max_steps": steps,
        "load_average_before_timing": round(load_before, 2),
        "samples_s": samples,
        "ours_over_upstream_by_seed": {str(seed): r for seed, r in ratios.items()},
        "ours_over_upstream": ratio_summary(every),
        "machine": machine_description(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": current_commit(),
        "command": shlex.join(["python", "-m", "benchmarks.cpu_latency", *sys.argv[1:]]),
    }


def mcpu_of(target) -> str:
    return str(target.attrs.get("mcpu", "generic"))


def result_key(result: Dict) -> str:
    """Where a result is kept: model, image size and -mcpu (one result per combination)."""
    return f"{result['model']}/{result['image_size']}/{mcpu_of(tvm.target.Target(result['target']))}"


def tuned_key(variant: str, seed: int) -> str:
    return f"TVM tuned ({variant}, seed {seed})"


def paired_ratios(samples: Dict[str, List[float]], seed: int) -> List[float]:
    """ours/upstream at ``seed``, one ratio per timing round (both timed in the same round)."""
    return [o / u for o, u in zip(samples[tuned_key("ours", seed)],
                                  samples[tuned_key("upstream", seed)])]


def ratio_summary(ratios: List[float]) -> Dict[str, float]:
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def variant_median(samples: Dict[str, List[float]], variant: str) -> float:
    """Median over seeds of each seed's median time (results before seeds: the one key)."""
    return statistics.median(statistics.median(v) for k, v in samples.items()
                             if k.startswith(f"TVM tuned ({variant}"))


def model_table(result: Dict) -> str:
    samples = result["samples_s"]
    torch_median = statistics.median(samples["PyTorch int8"])
    upstream_median = variant_median(samples, "upstream")
    rows = []
    for key, values in samples.items():
        median = statistics.median(values)
        rows.append([key, f"{median * 1e3:.2f}", f"{min(values) * 1e3:.2f} - {max(values) * 1e3:.2f}",
                     f"{median / upstream_median:.2f}", f"{median / torch_median:.2f}"])
    ratio = result["ours_over_upstream"]
    tuning = ", ".join(f"{v} {t['seconds']:.0f} s ({t.get('failed', '?')} of {t['records']} "
                       "records failed to build or run)" + (f" (resumed from {t['resumed_from']} records)"
                                                      if t["resumed_from"] else "")
                       for v, t in result["tuning"].items())
    steps = ", ".join(f"{k} {v:.0f}" for k, v in result["max_steps"].items())
    seeds = result.get("seeds", [0])
    search = (f"seeds {', '.join(map(str, seeds))}, {result['search_threads']} search thread(s)"
              if "seeds" in result else "seed 0")
    by_seed = result.get("ours_over_upstream_by_seed", {})
    per_seed = "; ".join(f"seed {s} {r['median']:.3f} ({r['min']:.3f} - {r['max']:.3f})"
                         for s, r in by_seed.items())
    summary = ""
    if len(seeds) > 1:
        summary = ("Median over seeds of each variant's median: "
                   + ", ".join(f"{v} {variant_median(samples, v) * 1e3:.2f} ms"
                               for v in VARIANTS) + ".\n\n")
    return (
        f"### int8 {result['model']}, batch 1, {result['image_size']}x{result['image_size']}, "
        f"-mcpu={mcpu_of(tvm.target.Target(result['target']))}\n\n"
        f"Target `{result.get('target', 'llvm')}`. {result['tasks']} tasks; each variant tuned with **{result['budget']} trials** "
        f"({result['trials_per_task']} per task), {search}; tuning time: {tuning}. "
        f"{_threads_text(result)}; {result['repeats']} interleaved rounds, "
        f"each the mean of {result['number']} runs (1-minute load average when timing began: "
        f"{result.get('load_average_before_timing', '?')}). Computed {result['date']} (commit "
        f"{result['commit']}). Largest distance from PyTorch's output, in output quantization "
        f"steps: {steps}."
        + (f" Command: `{result['command']}`." if "command" in result else "") + "\n\n"
        + markdown_table(["configuration", "median ms", "min - max ms",
                          "/ TVM tuned (upstream, median over seeds)", "/ PyTorch int8"], rows)
        + "\n\n" + summary
        + f"Ours / upstream, paired per round{' and seed' if by_seed else ''}: median "
          f"**{ratio['median']:.3f}** (range {ratio['min']:.3f} - {ratio['max']:.3f})"
        + (f"; per seed: {per_seed}" if len(by_seed) > 1 else "") + ".\n"
    )


def _threads_text(result: Dict) -> str:
    if "tvm_threads" in result:
        return f"{result['tvm_threads']} threads for TVM and PyTorch"
    # Older results (no tvm_threads): the pool TVM's runtime made at start (half the logical
    # CPUs) was never widened, so TVM ran on one thread whatever --threads said.
    return (f"PyTorch on {result['threads']} threads, **TVM on one** (measured before TVM's pool "
            "was sized by TVM_NUM_THREADS: compare the TVM rows with each other, not with PyTorch)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--trials-per-task", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--number", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--target", default=None,
                        help="TVM target (default: relay_ext.lowering.targets.host_llvm_target("
                             "THREADS): this machine's best -mcpu)")
    parser.add_argument("--seeds", default="0",
                        help="comma-separated seeds; each variant is tuned once per seed")
    parser.add_argument("--search-threads", type=int, default=1,
                        help="threads of the evolutionary search (1: threads do not reorder the draws)")
    parser.add_argument("--work-root", default="/tmp/quantfuse-cpu-latency")
    args = parser.parse_args()
    args.seeds = [int(seed) for seed in args.seeds.split(",")]
    stored = {result_key(result): result for result in load_results(RESULTS).values()}  # older keys lacked -mcpu
    for name in [m for m in args.models.split(",") if m]:  # --models '': only render the section
        result = bench_model(name, args)
        print(model_table(result), flush=True)
        save_result(RESULTS, result_key(result), result)
        stored = {result_key(r): r for r in load_results(RESULTS).values()}
    write_results_section(
        "cpu_latency", "CPU latency at equal tuning budgets",
        "Weights are random (fixed seed), calibrated on random data. Tuning here is small: 2 "
        "cores, and an evolutionary search with population 64 (TVM's default of 2048 takes tens "
        "of seconds per round on this machine), so a few trials per task are mostly random "
        "samples: the budget is equal across variants, which is what the comparison needs, but "
        "it is far below what a real tune uses (TVM suggests ~1000 trials per task). Each table "
        "names the command that measured it (the line above names the last run). Older tables timed "
        "TVM on one thread while PyTorch had two; each table says which.",
        stored, model_table)
    print("wrote docs/BENCHMARKS.md section cpu_latency")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
