"""What a tune pays before its first measurement, phase by phase.

    python -m benchmarks.tune_startup [--model tiny_resnet] [--image-size 32]
        [--target 'llvm -mcpu=core-avx2 -num-cores 2']

Phases, in the order ``quantfuse tune`` runs them: importing quantfuse's tuning package (a fresh
process), TVM's TensorIntrin families (MetaSchedule's ``TuneContext`` imports all of them; a
fresh process), loading the model, extracting the tasks, generating the design spaces of every
task (``tune_contexts``), and the second generation MetaSchedule's task scheduler asks for when
tuning starts, timed as it is (the space generator returns its last result for the same module)
beside what a second generation from scratch costs. Writes a section of
docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from typing import Callable, List, Tuple

from benchmarks.markdown_report import markdown_table, write_section


def in_fresh_process(statement: str) -> float:
    """Seconds ``statement`` takes in a new Python process (after ``import time``)."""
    code = ("import time; t = time.perf_counter(); " + statement
            + "; print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def timed(fn: Callable[[], object]) -> Tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny_resnet")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--target", default="llvm -mcpu=core-avx2 -num-cores 2")
    args = parser.parse_args()

    rows: List[List[object]] = []
    rows.append(["import relay_ext.tuning (fresh process)",
                 f"{in_fresh_process('import relay_ext.tuning'):.1f}"])
    intrinsics = ("from meta_rules.generic.tensor_intrinsics import register_tensor_intrinsics; "
                  "t = time.perf_counter(); register_tensor_intrinsics(None)")
    rows.append(["TVM's TensorIntrin families, all (fresh process; MetaSchedule's TuneContext "
                 "imports them)", f"{in_fresh_process(intrinsics):.1f}"])

    import relay_ext
    from relay_ext.lowering.targets import normalize_target
    from relay_ext.tuning.contexts import tune_contexts
    from relay_ext.lowering.tasks import lowered_tasks

    target = normalize_target(args.target)
    seconds, loaded = timed(lambda: relay_ext.load_model(args.model, image_size=args.image_size))
    rows.append([f"load {args.model} {args.image_size}x{args.image_size} (PyTorch, quantize, "
                 "Relay)", f"{seconds:.1f}"])
    seconds, tasks = timed(lambda: lowered_tasks(loaded.mod, loaded.params, target, "ours"))
    rows.append([f"extract the tasks ({len(tasks)})", f"{seconds:.1f}"])
    with tempfile.TemporaryDirectory() as work_dir:
        seconds, _ = timed(lambda: tune_contexts(tasks, target, "ours", work_dir, seed=0))
        rows.append(["design spaces of every task (tune_contexts; the process's first TuneContext "
                     "included)", f"{seconds:.1f}"])
        seconds, (contexts, _, _) = timed(lambda: tune_contexts(tasks, target, "ours", work_dir,
                                                                seed=0))
        rows.append(["design spaces of every task, once more (what MetaSchedule's second request "
                     "would cost from scratch)", f"{seconds:.1f}"])
        again, _ = timed(lambda: [c.generate_design_space() for c in contexts])
    rows.append(["MetaSchedule's second request (the last result reused)", f"{again:.2f}"])
    table = markdown_table(["phase", "seconds"], rows)
    print(table)
    write_section("tune_startup", f"Tuning start-up: {args.model} {args.image_size}x"
                  f"{args.image_size}, {args.target}",
                  "What a tune pays before its first measurement, phase by phase "
                  "(docs/tuning.md).\n\n" + table)


if __name__ == "__main__":
    main()
