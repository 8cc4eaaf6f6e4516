"""Where a tuned int8 model's time goes, layer by layer, against PyTorch int8 (issue 18).

    python -m benchmarks.where_time_goes --model resnet18 --work-dir W [--target host]
        [--image-size 224] [--threads 2] [--rounds 7] [--section NAME]

TVM side: every task of the model (one fused function) is built twice and timed in interleaved
rounds, as ``quantfuse bench``'s never-slower rule does (relay_ext/tuning/never_slower.py): with
the work dir's best buildable record and with TOPI's default schedule; the row takes the time of
what the model runs (the record, unless the rule drops it for being more than 5% slower than the
default). Multiplied by the number of calls the model makes to the function, that is the task's
share of the model. The whole-model row is the model as bench compiles it (same rule).

PyTorch side: the same quantized network as ``models.load`` builds it (same seed, eager mode, x86
engine), each leaf module timed with forward hooks over ``--rounds`` runs (median per module),
at the same thread count.

Convolutions are matched by (input channels, output channels, kernel, output height and width),
with PyTorch's channel counts padded as TVM's x86 int8 convolutions pad them (:func:`tvm_channels`);
what is not a convolution is summed per side as "everything else" (TVM: pads, pools, layout
transforms, the dense; PyTorch: quantize, adds, pools, the linear...). Timed in isolation, the
per-layer sums do not add up exactly to the whole-model latency (caches, the executor), which the
last rows give for both.
"""

from __future__ import annotations

import argparse
import collections
import functools
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
import tvm
from tvm import meta_schedule as ms
from tvm import relay

from benchmarks.markdown_report import markdown_table, write_section
from meta_rules.base.tvm_errors import tvm_error_message
from relay_ext.frontend import models as frontend_models
from relay_ext.frontend.eager_quantization import (QUANTIZATION_BACKEND, quantization_engine,
                                                   quantize_eager, random_batches,
                                                   seeded_float_model)
from relay_ext.lowering.targets import check_runs_here, host_cpu_flags, normalize_target
from relay_ext.lowering.x86.vnni_conv_schedule import vpdpbusd_accumulators
from relay_ext.tuning.compilable_records import compilable_records
from relay_ext.tuning.never_slower import compile_never_slower, has_record, time_task
from relay_ext.tuning.tasks import lowered_tasks
from relay_ext.tuning.timing import tvm_timer, with_tvm_threads
from relay_ext.tuning.work_dir import open_tuned_database, recorded_run

logger = logging.getLogger(__name__)

Signature = Tuple[int, int, int, int, int]  # in channels, out channels, kernel, out H, out W


def conv_signature(task: ms.ExtractedTask) -> Optional[Signature]:
    """The signature of the task's convolution, or None when it has none."""
    (_, func), = task.mod.functions.items()
    found: List[Signature] = []

    def visit(node):
        if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op) and \
                "conv2d" in node.op.name and not found:
            data = [int(d) for d in node.args[0].checked_type.shape]
            out = [int(d) for d in node.checked_type.shape]
            layout = str(node.attrs.data_layout)
            channels = data[1] * (data[4] if len(data) == 5 else 1) if layout.startswith("NCHW") \
                else data[3]
            height, width = (out[2], out[3]) if layout.startswith("NCHW") else (out[1], out[2])
            found.append((channels, int(node.attrs.channels), int(node.attrs.kernel_size[0]),
                          height, width))

    relay.analysis.post_order_visit(func.body, visit)
    return found[0] if found else None


def tvm_channels(cin: int, cout: int, groups: int) -> Tuple[int, int]:
    """The channel counts TVM's x86 int8 convolution runs with: a non-grouped one has its input
    channels padded to a multiple of 4 and its output channels to a multiple of 16 (TOPI's
    ``conv2d_alter_int8_common``), so ResNet's 3-channel stem is a 4-channel conv there."""
    if groups != 1:
        return cin, cout
    return -(-cin // 4) * 4, -(-cout // 16) * 16


def tvm_layers(tasks, database: ms.Database, target, variant: str, rounds: int) -> List[Dict]:
    """Per task: its calls, conv signature, and the time of what the model runs (the record, or
    TOPI's default where the never-slower rule drops the record)."""
    rows = []
    for task in tasks:
        tuned = has_record(database, task.dispatched[0])
        registers: Dict[str, int] = {}

        def count(record_lib, default_lib, registers=registers):
            registers["record"] = vpdpbusd_accumulators(record_lib)
            registers["default"] = vpdpbusd_accumulators(default_lib)

        try:
            timed = time_task(task, database if tuned else ms.database.MemoryDatabase(),
                              target, variant, rounds, on_built=count)
        except Exception as error:  # pylint: disable=broad-except - one row lost, not the table
            logger.warning("could not time %s: %s", task.task_name,
                           tvm_error_message(error, limit=200))
            continue
        runs_record = tuned and not timed.uses_default
        rows.append({"task": task.task_name, "calls": int(task.weight),
                     "signature": conv_signature(task), "tuned": tuned,
                     "record_ms": timed.record_ms if tuned else None,
                     "default_ms": timed.default_ms,
                     "used_ms": timed.record_ms if runs_record else timed.default_ms,
                     "accumulators": registers.get("record" if runs_record else "default")})
    return rows


def pytorch_model(name: str, image_size: int, seed: int = frontend_models.DEFAULT_SEED):
    """The eager quantized network models.load traces (same seed, same calibration)."""
    spec = frontend_models._model_spec(name)  # pylint: disable=protected-access
    shape = spec.input_shape(1, image_size)
    model = quantize_eager(seeded_float_model(spec.build, seed),
                           random_batches(shape, frontend_models.CALIBRATION_BATCHES, seed + 1))
    return model, shape


def pytorch_layers(name: str, image_size: int, threads: int, rounds: int) -> Tuple[List[Dict], float]:
    """Per leaf module: median ms per run (and its conv signature); and the model's median ms."""
    model, shape = pytorch_model(name, image_size)
    data = torch.randn(shape)
    times: Dict[str, List[float]] = collections.defaultdict(list)
    info: Dict[str, Dict] = {}
    started: Dict[str, float] = {}
    leaves = [(n, m) for n, m in model.named_modules() if not list(m.children())]

    def pre(module_name, mod, args):
        started[module_name] = time.perf_counter()

    def post(module_name, mod, args, output):
        times[module_name].append(1e3 * (time.perf_counter() - started[module_name]))
        if module_name not in info:
            signature = None
            if hasattr(mod, "kernel_size") and hasattr(mod, "out_channels"):
                out = output.shape
                signature = (*tvm_channels(int(mod.in_channels), int(mod.out_channels),
                                           int(getattr(mod, "groups", 1))),
                             int(mod.kernel_size[0]), int(out[2]), int(out[3]))
            info[module_name] = {"kind": type(mod).__name__, "signature": signature}

    def hooked():
        return [handle for n, m in leaves
                for handle in (m.register_forward_pre_hook(functools.partial(pre, n)),
                               m.register_forward_hook(functools.partial(post, n)))]

    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    whole: List[float] = []
    hooks = hooked()
    try:
        with quantization_engine(QUANTIZATION_BACKEND), torch.no_grad():
            for _ in range(3):  # warm-up, and each module's signature
                model(data)
            for hook in hooks:  # the whole model without hooks first, then each module with
                hook.remove()
            for _ in range(rounds):
                start = time.perf_counter()
                model(data)
                whole.append(1e3 * (time.perf_counter() - start))
            times.clear()
            hooks = hooked()
            for _ in range(rounds):
                model(data)
    finally:
        torch.set_num_threads(old_threads)
        for hook in hooks:
            hook.remove()
    layers = [{"module": n, **info[n], "ms": statistics.median(times[n])} for n in info]
    return layers, statistics.median(whole)


def tvm_model_ms(loaded, tasks, database: ms.Database, target, variant: str,
                 rounds: int) -> float:
    """The whole model compiled as ``quantfuse bench`` compiles it (never-slower rule; ``tasks``:
    the model's extracted tasks, so they are not extracted again)."""
    lib, _ = compile_never_slower(database, loaded.mod, loaded.params, target, variant,
                                  tasks=tasks)
    _, one_round = tvm_timer(lib, loaded.inputs, 5)
    return 1e3 * statistics.median(one_round() for _ in range(rounds))


def describe(signature: Signature) -> str:
    cin, cout, kernel, height, width = signature
    return f"conv {kernel}x{kernel} {cin}->{cout}, out {height}x{width}"


def table(tvm_rows: List[Dict], torch_rows: List[Dict], tvm_total: float,
          torch_total: float) -> Tuple[List[str], List[List[str]]]:
    by_sig: Dict[Signature, Dict] = collections.OrderedDict()
    for row in tvm_rows:
        if row["signature"] is None:
            continue
        entry = by_sig.setdefault(row["signature"], {"tvm": 0.0, "default": 0.0, "calls": 0,
                                                     "torch": 0.0, "layers": 0, "tuned": 0,
                                                     "acc": set()})
        if row.get("accumulators") is not None:
            entry["acc"].add(row["accumulators"])
        entry["tvm"] += row["calls"] * row["used_ms"]
        entry["default"] += row["calls"] * row["default_ms"]
        entry["calls"] += row["calls"]
        entry["tuned"] += row["calls"] if row["tuned"] else 0
    torch_other = 0.0
    for row in torch_rows:
        entry = by_sig.get(row["signature"]) if row["signature"] else None
        if entry is None:
            torch_other += row["ms"]
        else:
            entry["torch"] += row["ms"]
            entry["layers"] += 1
    tvm_other = sum(r["calls"] * r["used_ms"] for r in tvm_rows if r["signature"] is None)
    tvm_other_default = sum(r["calls"] * r["default_ms"] for r in tvm_rows
                            if r["signature"] is None)
    header = ["layer", "calls (TVM / PyTorch)", "TVM tuned ms", "TVM default ms",
              "PyTorch int8 ms", "TVM tuned / PyTorch", "gap ms", "vpdpbusd chains"]
    rows = []
    ordered = sorted(by_sig.items(), key=lambda kv: -(kv[1]["tvm"] - kv[1]["torch"]))
    for signature, e in ordered:
        rows.append([describe(signature), f"{e['calls']} / {e['layers']}", f"{e['tvm']:.3f}",
                     f"{e['default']:.3f}", f"{e['torch']:.3f}",
                     f"{e['tvm'] / e['torch']:.2f}x" if e["torch"] else "-",
                     f"{e['tvm'] - e['torch']:+.3f}",
                     ", ".join(map(str, sorted(e["acc"]))) or "-"])
    rows.append(["everything else", "", f"{tvm_other:.3f}", f"{tvm_other_default:.3f}",
                 f"{torch_other:.3f}", f"{tvm_other / torch_other:.2f}x" if torch_other else "-",
                 f"{tvm_other - torch_other:+.3f}", ""])
    tvm_sum = sum(r["calls"] * r["used_ms"] for r in tvm_rows)
    torch_sum = sum(r["ms"] for r in torch_rows)
    rows.append(["sum of the layers", "", f"{tvm_sum:.3f}",
                 f"{sum(r['calls'] * r['default_ms'] for r in tvm_rows):.3f}", f"{torch_sum:.3f}",
                 f"{tvm_sum / torch_sum:.2f}x", f"{tvm_sum - torch_sum:+.3f}", ""])
    rows.append(["whole model (one run, median)", "", f"{tvm_total:.3f}", "", f"{torch_total:.3f}",
                 f"{tvm_total / torch_total:.2f}x", f"{tvm_total - torch_total:+.3f}", ""])
    return header, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--work-dir", type=Path, required=True)
    parser.add_argument("--target", default="host")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--section", default=None,
                        help="docs/BENCHMARKS.md section to write (default where_time_goes_<model>)")
    parser.add_argument("--note", default="", help="a sentence on what the work dir holds")
    args = parser.parse_args()
    target = normalize_target(args.target)
    check_runs_here(target)  # before anything is built: code this CPU lacks dies with SIGILL
    run = recorded_run(args.work_dir) or {}
    variant = run.get("variant", "ours")
    if run.get("target") and str(normalize_target(run["target"])) != str(target):
        raise SystemExit(f"{args.work_dir} was tuned for {run['target']!r}, not {str(target)!r}; "
                         "pass --target with the tuned target")
    database = compilable_records(open_tuned_database(args.work_dir)).database
    loaded = frontend_models.load(args.model, image_size=args.image_size)
    tasks = lowered_tasks(loaded.mod, loaded.params, target, variant)
    tvm_rows = with_tvm_threads(
        args.threads, lambda: tvm_layers(tasks, database, target, variant, args.rounds))
    tvm_total = with_tvm_threads(
        args.threads, lambda: tvm_model_ms(loaded, tasks, database, target, variant, args.rounds))
    torch_rows, torch_total = pytorch_layers(args.model, args.image_size, args.threads,
                                             args.rounds)
    header, rows = table(tvm_rows, torch_rows, tvm_total, torch_total)
    text = markdown_table(header, rows)
    print(text)
    flags = sorted((host_cpu_flags() or frozenset()) & {"avx2", "avx512f", "avx512_vnni", "amx_int8", "amx_tile"})
    write_section(
        args.section or f"where_time_goes_{args.model}",
        f"Where the time goes: int8 {args.model} {args.image_size}, TVM tuned vs PyTorch int8, "
        "layer by layer",
        f"Host flags {', '.join(flags)}; target `{target}`; {args.threads} threads for both. "
        f"{args.note} Random weights, "
        "calibrated on random data. TVM: each fused function timed alone (median of "
        f"{args.rounds} interleaved rounds, record vs TOPI's default schedule; the model uses the "
        "faster), times the calls the model makes; PyTorch: each leaf module of the eager "
        "quantized network timed with forward hooks (median of "
        f"{args.rounds} runs). Rows sorted by the gap (TVM minus PyTorch), largest first; "
        "see benchmarks/where_time_goes.py. vpdpbusd chains: the distinct registers VNNI's dot "
        "product accumulates into in the code the model runs for that layer (1: each waits 5 "
        "cycles for the previous; 0: no VNNI). PyTorch's residual adds (QFunctional.add, a method, "
        "not a module call) are in no row but the whole model's.\n\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
