"""Issue 29: TVM's untuned build, the no-search build and PyTorch int8, one model, one process.

    PYTHONPATH=. python -m benchmarks.no_search_vs_peers --model resnet18 --image-size 224 --threads 2

The no-search build is ``relay_ext.build.whole_model.compile_no_search`` (never-slower rule, its
timings cached in ``--cache``); the three are timed in interleaved rounds
(``relay_ext.measure.timing.interleaved_rounds``) with the load average before and after. Prints
the medians and minima; figures taken on a loaded machine are indicative only.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from tvm import meta_schedule as ms

from relay_ext import models
from relay_ext.lowering.targets import normalize_target
from relay_ext.report.accuracy import quantization_step_error
from relay_ext.schedules.records import build_with_records
from relay_ext.build.whole_model import compile_no_search
from relay_ext.measure.timing import TVMThread, interleaved_rounds, load_average, torch_timer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--target", default="host")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=10, help="runs per round")
    parser.add_argument("--cache", default=None, help="the never-slower timing cache (JSON)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = models.load(args.model, image_size=args.image_size)
    target = normalize_target(args.target)
    print(f"{args.model} {args.image_size}, {target}, {args.threads} threads, "
          f"load average {load_average()}")
    with TVMThread(args.threads) as tvm_thread:
        start = time.monotonic()
        lib, found, kept = tvm_thread.run(lambda: compile_no_search(
            model.mod, model.params, target, "ours", cache_path=args.cache))
        records = sum(d.has_record for d in found.designs)
        print(f"no-search build: {time.monotonic() - start:.1f} s; {len(found.designs)} tasks, "
              f"{records} records, {records - len(kept.defaults)} kept by the never-slower rule")
        untuned = tvm_thread.run(lambda: build_with_records(
            ms.database.MemoryDatabase(), model.mod, model.params, target, "ours"))
        reference = model.run_reference()
        timers = {}
        for label, built in (("TVM untuned", untuned), ("TVM no-search", lib)):
            output, timers[label] = tvm_thread.tvm_timer(built, model.inputs, args.number)
            steps = quantization_step_error(output, reference, model.output_scale)
            print(f"{label}: {steps:.2f} output steps from PyTorch")
        timers["PyTorch int8"] = torch_timer(model.torchscript, model.example_input, args.number)
        before = load_average()
        samples = interleaved_rounds(timers, args.rounds)
    print(f"load average {before} before the rounds, {load_average()} after")
    for label, values in samples.items():
        print(f"{label:14s} median {1e3 * statistics.median(values):.3f} ms  "
              f"min {1e3 * min(values):.3f} ms")


if __name__ == "__main__":
    main()
