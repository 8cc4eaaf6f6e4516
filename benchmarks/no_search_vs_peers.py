"""TVM's untuned build, the no-search build (the rules' designs, no tuning) and PyTorch int8: one
model, one process.

    PYTHONPATH=. python -m benchmarks.no_search_vs_peers --model resnet18 --image-size 224 --threads 2

Both TVM builds come from :func:`relay_ext.compile` (schedule "no-search", its per-task choice
timed with ``--threads`` threads and kept in ``--cache``; schedule "default", bench's "TVM
untuned"); the three are timed in interleaved rounds
(``relay_ext.measure.timing.interleaved_rounds``) with the load average before and after. Prints
the medians and minima; figures taken on a loaded machine are indicative only.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import relay_ext
from relay_ext.lowering.targets import normalize_target
from relay_ext.measure.timing import TVMThread, interleaved_rounds, load_average
from relay_ext.peers.pytorch import torch_timer
from relay_ext.report.accuracy import quantization_step_error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--target", default="host")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=10, help="runs per round")
    parser.add_argument("--cache", default=None, help="the per-task choice's timing cache (JSON)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = relay_ext.load_model(args.model, image_size=args.image_size)
    target = normalize_target(args.target)
    print(f"{args.model} {args.image_size}, {target}, {args.threads} threads, "
          f"load average {load_average()}")
    start = time.monotonic()
    no_search = relay_ext.compile(model, target=target, schedule="no-search",
                                  threads=args.threads, timing_cache=args.cache)
    designs = no_search.designs.designs if no_search.designs is not None else []
    records = sum(d.has_record for d in designs)
    print(f"no-search build: {time.monotonic() - start:.1f} s; {len(designs)} tasks, "
          f"{records} rule designs, {records - len(no_search.default_tasks)} kept by the "
          "per-task choice")
    untuned = relay_ext.compile(model, target=target, schedule="default")
    reference = model.run_reference()
    with TVMThread(args.threads) as tvm_thread:
        timers = {}
        for label, built in (("TVM untuned", untuned), ("TVM no-search", no_search)):
            output, timers[label] = tvm_thread.tvm_timer(built.lib, model.inputs, args.number)
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
