"""CPU latency of an int8 model in ONNX Runtime, PyTorch and TVM, timed in interleaved rounds.

    python -m benchmarks.onnx_latency [--model resnet50] [--image-size 224] [--threads 2]
        [--repeats 9] [--number 5] [--tuned-work-dir DIR [--tuned-import torchscript|onnx]
        [--variant ours] [--tune-trials N]] [--settle-ms 100] [--work-root /tmp/quantfuse-onnx-latency]

One built-in model (random weights from a fixed seed), batch 1, in the configurations a CPU user
compares:

* ONNX Runtime int8: the float network exported to ONNX and quantized QDQ with ONNX Runtime's
  ``quantize_static`` (:func:`relay_ext.frontend.onnx_export.export_quantized`), CPU execution
  provider, ``intra_op_num_threads = --threads``;
* PyTorch int8: the same weights quantized with PyTorch eager mode (x86/fbgemm), as
  :func:`relay_ext.load_model` makes the built-in model, ``torch.set_num_threads(--threads)``;
* TVM untuned, from the ONNX file (:func:`relay_ext.load_model` of it) and from the TorchScript
  module: TVM's default schedules (:func:`relay_ext.compile`, schedule "default");
* TVM tuned, when ``--tuned-work-dir`` names a work dir that ``quantfuse tune`` (or
  :func:`relay_ext.tune`) filled for the same model, size and target (each task its fastest
  record, no per-task timing: :func:`relay_ext.compile` with ``choose_per_task=False``); with
  ``--tune-trials N`` the script first tunes it up to N records itself (the small evolutionary
  search of ``benchmarks.cpu_latency``, one search thread, seed ``--seed``; a rerun resumes).

TVM's thread pool takes its size from ``TVM_NUM_THREADS`` when it starts; ``runtime.config_threadpool``
does not widen it in this build (TVM would run on 1 thread here). The timing runs in
:class:`relay_ext.measure.timing.TVMThread` (a fresh TVM pool of ``--threads``; PyTorch and ONNX
Runtime stay on the main thread), which
records the pool size TVM reports. Each round times every
configuration once (the mean of ``--number`` runs, after a ``--settle-ms`` pause that lets the
previous runtime's spinning worker threads go idle), so load changes hit all alike; reported are
the median and min-max over rounds. Each TVM build's output is compared with its own reference
(the ONNX import's QDQ graph as written, run by ONNX Runtime with graph optimizations off; PyTorch
for the TorchScript import) in output quantization steps, and so is ONNX Runtime's int8 output; the ONNX and PyTorch models are two different quantizations of one float network, so their
outputs are not compared with each other. Results are kept in ``benchmarks/results/onnx_latency.json``
(one per model, image size and -mcpu) and the section ``onnx_latency`` of docs/BENCHMARKS.md is
rendered from them.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import statistics
import sys
from pathlib import Path
from typing import Callable, Dict, List

RESULTS = Path(__file__).resolve().parent / "results" / "onnx_latency.json"


def parse_args(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="a built-in image model (default resnet50)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9, help="interleaved timing rounds")
    parser.add_argument("--number", type=int, default=5, help="runs per configuration and round")
    parser.add_argument("--seed", type=int, default=0, help="weights and calibration data")
    parser.add_argument("--target", default=None,
                        help="TVM target (default: relay_ext.lowering.targets."
                        "host_llvm_target(THREADS))")
    parser.add_argument("--tuned-work-dir", default=None,
                        help="a tuning work dir for this model, size and target: adds TVM tuned")
    parser.add_argument("--tuned-import", choices=("torchscript", "onnx"), default="torchscript",
                        help="which import the work dir was tuned from (default torchscript)")
    parser.add_argument("--variant", default="ours", help="rule set the work dir was tuned with")
    parser.add_argument("--tune-trials", type=int, default=0,
                        help="first tune the --tuned-import module into --tuned-work-dir until it holds "
                             "this many records (a rerun resumes; 0: use the work dir as it is)")
    parser.add_argument("--settle-ms", type=float, default=100.0,
                        help="pause between configurations, so that one runtime's spinning worker "
                             "threads are idle before the next is timed")
    parser.add_argument("--ort-no-spinning", action="store_true",
                        help="ONNX Runtime without spinning worker threads (its default spins)")
    parser.add_argument("--work-root", default="/tmp/quantfuse-onnx-latency",
                        help="where the quantized ONNX file is written (and reused)")
    parser.add_argument("--render-only", action="store_true",
                        help="measure nothing: rewrite the docs section from the kept results")
    parser.add_argument("--no-docs", action="store_true",
                        help="keep the result out of benchmarks/results and docs/BENCHMARKS.md (a trial run)")
    return parser.parse_args(argv)


def bench(args: argparse.Namespace) -> Dict:
    import torch
    import tvm
    from tvm import meta_schedule as ms

    from meta_rules.generic.tensor_intrinsics import register_tensor_intrinsics

    import relay_ext
    from benchmarks.markdown_report import current_commit
    from relay_ext.report.accuracy import step_error
    from relay_ext.frontend.onnx_export import export_quantized
    from relay_ext.measure.timing import TVMThread, interleaved_rounds
    from relay_ext.peers.onnx_runtime import onnxruntime_timer
    from relay_ext.peers.pytorch import torch_timer
    from relay_ext.report.tables import machine_description
    from benchmarks.cpu_latency import search_strategy
    from relay_ext.lowering.targets import host_llvm_target, normalize_target
    from relay_ext.tuning import read_tuning_summary

    target = normalize_target(args.target) if args.target else host_llvm_target(args.threads)
    torch_model = relay_ext.load_model(args.model, image_size=args.image_size, seed=args.seed)
    onnx_path = Path(args.work_root) / f"{args.model}_{args.image_size}_seed{args.seed}_qdq.onnx"
    if not onnx_path.exists():
        onnx_path.parent.mkdir(parents=True, exist_ok=True)
        export_quantized(args.model, onnx_path, image_size=args.image_size, seed=args.seed)
    onnx_model = relay_ext.load_model(onnx_path, seed=args.seed)
    print(f"{args.model} {args.image_size}: ONNX file {onnx_path}; target {target}", flush=True)

    libs = {}  # label -> (lib, the model it was built from)
    for name, model in (("ONNX", onnx_model), ("TorchScript", torch_model)):
        libs[f"TVM untuned ({name} import)"] = (
            relay_ext.compile(model, target=target, schedule="default").lib, model)
    tuned = None
    if args.tuned_work_dir:
        loaded = onnx_model if args.tuned_import == "onnx" else torch_model
        Path(args.tuned_work_dir).mkdir(parents=True, exist_ok=True)
        register_tensor_intrinsics(target)  # before a database of tensorized records is read
        database = ms.database.JSONDatabase(work_dir=args.tuned_work_dir)
        if len(database) < args.tune_trials:
            print(f"  tuning {args.tune_trials - len(database)} trials into {args.tuned_work_dir}", flush=True)
            database = relay_ext.tune(loaded.mod, loaded.params, target, args.tuned_work_dir,
                                      max_trials=args.tune_trials - len(database),
                                      variant=args.variant, seed=args.seed,
                                      strategy=search_strategy(), num_tuning_cores=1)
        summary_path = Path(args.tuned_work_dir) / "tuning_summary.json"
        summary = read_tuning_summary(args.tuned_work_dir) if summary_path.exists() else {}
        tuned = {"work_dir": str(args.tuned_work_dir), "import": args.tuned_import, "variant": args.variant,
                 "records": len(database), "max_trials": summary.get("max_trials"),
                 "tasks": len(summary.get("tasks", [])) or None}
        libs[f"TVM tuned ({args.variant}, {args.tuned_import} import)"] = (
            relay_ext.compile(loaded, target=target, records=database, variant=args.variant,
                              choose_per_task=False).lib, loaded)

    torch_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    timers: Dict[str, Callable[[], float]] = {}
    steps: Dict[str, float] = {}
    try:
        with TVMThread(args.threads) as tvm_thread:  # TVM on --threads threads, the others here
            ort_output, timers["ONNX Runtime int8"] = onnxruntime_timer(
                onnx_path, onnx_model.inputs, args.number, args.threads,
                allow_spinning=not args.ort_no_spinning)
            # Each model's reference output, computed once (ONNX: its QDQ graph as written).
            expected = {id(m): m.run_reference() for m in (onnx_model, torch_model)}
            # ONNX Runtime's int8 kernels against the model as written (they saturate without VNNI)
            ort_steps = step_error(ort_output, expected[id(onnx_model)], onnx_model.output_scale).max_steps
            print(f"  ONNX Runtime int8: {ort_steps:.0f} steps from {onnx_model.reference_name}", flush=True)
            timers["PyTorch int8"] = torch_timer(torch_model.torchscript, torch_model.example_input,
                                                 args.number)
            for label, (lib, loaded) in libs.items():
                output, timers[label] = tvm_thread.tvm_timer(lib, loaded.inputs, args.number)
                steps[label] = step_error(output, expected[id(loaded)], loaded.output_scale).max_steps
                print(f"  built {label}: {steps[label]:.0f} steps from {loaded.reference_name}", flush=True)
            pool = tvm_thread.run(tvm.get_global_func("runtime.NumThreads"))
            samples = interleaved_rounds(timers, args.repeats, settle_s=args.settle_ms / 1e3)
    finally:
        torch.set_num_threads(torch_threads)
    return {
        "model": args.model, "image_size": args.image_size, "target": str(target), "threads": args.threads,
        "tvm_pool_threads": pool, "settle_ms": args.settle_ms, "ort_spinning": not args.ort_no_spinning,
        "repeats": args.repeats, "number": args.number, "seed": args.seed,
        "tuned": tuned, "max_steps": steps, "ort_int8_max_steps": ort_steps, "samples_s": samples,
        "load_average_before_timing": round(load_before, 2), "machine": machine_description(),
        "cpu_features": cpu_features(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": current_commit(),
        "command": shlex.join(["python", "-m", "benchmarks.onnx_latency", *sys.argv[1:]]),
    }


VECTOR_FEATURES = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8")


def cpu_features() -> List[str]:
    """The int8-relevant vector extensions the OS enables (the CPU's model name may be generic)."""
    from relay_ext.lowering.targets import host_cpu_flags

    flags = host_cpu_flags() or frozenset()
    return [feature for feature in VECTOR_FEATURES if feature in flags]


def result_key(result: Dict) -> str:
    mcpu = result["target"].split("-mcpu=")[1].split()[0] if "-mcpu=" in result["target"] else "generic"
    return f"{result['model']}/{result['image_size']}/{mcpu}"


def busy_note(result: Dict) -> str:
    """A warning when the machine had more runnable work than CPUs as timing began."""
    load = result.get("load_average_before_timing")
    cpus = os.cpu_count() or 1
    if load is None or load <= max(1.0, 0.5 * cpus):
        return ""
    return (f"**Measured while other work kept this {cpus}-CPU machine busy (1-minute load average {load}): "
            "every time is inflated and spread out; take the ratios as rough and rerun on a quiet machine "
            "for real figures.**\n\n")


def model_table(result: Dict) -> str:
    from benchmarks.markdown_report import markdown_table

    samples = result["samples_s"]
    medians = {label: statistics.median(values) for label, values in samples.items()}
    rows = [[label, f"{medians[label] * 1e3:.2f}", f"{min(values) * 1e3:.2f} - {max(values) * 1e3:.2f}",
             f"{medians[label] / medians['ONNX Runtime int8']:.2f}", f"{medians[label] / medians['PyTorch int8']:.2f}"]
            for label, values in samples.items()]
    steps = ", ".join(f"{label} {value:.0f}" for label, value in result["max_steps"].items())
    ort_steps = ("" if result.get("ort_int8_max_steps") is None else
                 f" ONNX Runtime int8 itself: {result['ort_int8_max_steps']:.0f} steps from the model as "
                 "written (graph optimizations off; its uint8 x int8 kernels saturate on CPUs without VNNI).")
    # Older results (no ort_int8_max_steps) were checked against ONNX Runtime's int8 output itself.
    onnx_reference = ("its QDQ graph as written, run by ONNX Runtime with graph optimizations off"
                      if result.get("ort_int8_max_steps") is not None else "ONNX Runtime int8")
    tuned = result.get("tuned")
    budget = ("" if not tuned else
              f" TVM tuned: work dir `{tuned['work_dir']}` ({tuned['records']} records"
              + (f" for {tuned['tasks']} tasks" if tuned.get("tasks") else "")
              + (f", tuned with a budget of {tuned['max_trials']} trials" if tuned.get("max_trials") else "")
              + f", rule set `{tuned['variant']}`, tuned from the {tuned['import']} import; a few trials per "
              "task are mostly random samples, far below a real tune's ~1000 per task).")
    return (
        f"### int8 {result['model']}, batch 1, {result['image_size']}x{result['image_size']}, "
        f"{result['threads']} threads\n\n"
        f"Target `{result['target']}`; TVM's thread pool: {result['tvm_pool_threads']} threads "
        f"(`TVM_NUM_THREADS`); ONNX Runtime's worker threads {'spin' if result.get('ort_spinning', True) else 'do not spin'} "
        f"(its default is to spin). {result['repeats']} interleaved rounds, each the mean of {result['number']} runs "
        f"with a {result.get('settle_ms', 0):.0f} ms pause before each configuration "
        f"(1-minute load average when timing began: {result['load_average_before_timing']}). Machine: "
        f"{result['machine']}; vector extensions: {', '.join(result.get('cpu_features') or ['?'])}. Computed {result['date']} (commit {result['commit']}), command "
        f"`{result['command']}`. Largest distance of each TVM build from its reference ({onnx_reference} for "
        f"the ONNX import, PyTorch for the TorchScript one), in output quantization steps: {steps}.{ort_steps}{budget}\n\n"
        + busy_note(result)
        + markdown_table(["configuration", "median ms", "min - max ms", "/ ONNX Runtime", "/ PyTorch"], rows)
        + "\n"
    )


def main() -> int:
    args = parse_args(sys.argv[1:])
    from benchmarks.markdown_report import save_result, load_results, write_results_section

    stored = load_results(RESULTS)
    if not args.render_only:
        result = bench(args)
        print(model_table(result), flush=True)
        if args.no_docs:
            return 0
        save_result(RESULTS, result_key(result), result)
        stored = load_results(RESULTS)
    write_results_section(
        "onnx_latency", "CPU latency: ONNX Runtime int8, PyTorch int8 and TVM",
        "ONNX Runtime's int8 execution of the model exported to ONNX and quantized QDQ by ONNX Runtime "
        "(`quantize_static`, uint8 activations, per-channel int8 weights, MinMax calibration on the same "
        "random samples PyTorch's model is calibrated on), beside PyTorch's int8 module and TVM's builds of "
        "both imports. Weights are random (fixed seed). Each table names the command that measured it.",
        stored, model_table, command=["-m", "benchmarks.onnx_latency", *sys.argv[1:]])
    print("wrote docs/BENCHMARKS.md section onnx_latency")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
