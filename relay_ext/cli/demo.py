"""``quantfuse demo``: the whole job on the built-in tiny_resnet in a minute or two: the fusion
report on nvidia/nvidia-a100, a short tune on this machine's host target, then bench."""

from __future__ import annotations

import os
import time

from relay_ext.cli import EXIT_FAILED
from relay_ext.cli.commands import print_bench, print_fusion_table
from relay_ext.cli.inputs import resolve_target, writable_dir

MODEL = "tiny_resnet"
FUSION_TARGET = "nvidia/nvidia-a100"


def demo_search():
    """A small evolutionary search: the demo's tune takes seconds per task."""
    from tvm import meta_schedule as ms

    return ms.search_strategy.EvolutionarySearch(
        population_size=16, init_measured_ratio=0.5, init_min_unmeasured=4,
        genetic_num_iters=1, genetic_max_fail_count=2)


def cmd_demo(args) -> int:
    import meta_rules
    from relay_ext.latency.run import bench
    from relay_ext.frontend.loader import load_model
    from relay_ext.lowering.targets import host_llvm_target
    from relay_ext.report.fusion import fusion_report
    from relay_ext.tuning import extract_tasks, measured_line, read_tuning_summary, tune
    from relay_ext.workdir.files import RunDescription

    start = time.monotonic()
    work_dir = writable_dir(args.work_dir)
    llvm = host_llvm_target(os.cpu_count() or 1)  # the best -mcpu the OS enables the features of

    def step(text):
        print(f"\n== [{time.monotonic() - start:5.1f} s] {text}", flush=True)

    step(f"fusion report: {MODEL} {args.image_size}x{args.image_size}, {FUSION_TARGET}, "
         "all variants (nothing tuned)")
    loaded = load_model(MODEL, image_size=args.image_size)
    print_fusion_table(fusion_report(loaded.mod, loaded.params, resolve_target(FUSION_TARGET),
                                     list(meta_rules.VARIANTS)))

    n_tasks = len(extract_tasks(loaded.mod, loaded.params, llvm, "ours"))
    trials = args.trials or 2 * n_tasks
    step(f"tune on {llvm} (ours): {trials} trials over {n_tasks} tasks, into {work_dir}")
    database = tune(loaded.mod, loaded.params, llvm, work_dir, max_trials=trials, variant="ours",
                    num_trials_per_iter=min(4, trials), seed=0, strategy=demo_search())
    RunDescription(MODEL, None, args.image_size, "NCHW", llvm, "ours").write(work_dir)
    print(f"{len(database)} records; {measured_line(read_tuning_summary(work_dir))}")

    step("compile with the tuned records, check against PyTorch, time TVM, PyTorch and ONNX "
         "Runtime")
    result = bench(loaded, target=llvm, records=database, work_dir=work_dir, repeats=10,
                   number=10)
    print_bench(result, work_dir)
    ok = round(result.max_steps, 3) <= 3  # whole steps apart, up to float rounding
    step(f"done: TVM tuned is {result.max_steps:.2f} quantization steps from PyTorch "
         f"({'OK' if ok else 'MORE THAN 3'}); report in {work_dir}")
    return 0 if ok else EXIT_FAILED
