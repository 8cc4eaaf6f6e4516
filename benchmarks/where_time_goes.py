"""Where an int8 model's time goes, layer by layer: TVM against PyTorch int8 and OpenVINO (issues 18, 28, 29).

    python -m benchmarks.where_time_goes --model resnet18 --work-dir W [--target host]
        [--image-size 224] [--threads 2] [--rounds 7] [--peer both|pytorch|openvino] [--section NAME]
    python -m benchmarks.where_time_goes --model resnet18 --no-search ...   # no tuning: issue 29's build
    python -m benchmarks.where_time_goes --model resnet18 ...               # no work dir: TVM untuned

TVM side: the build examined is the work dir's tuned build (``--work-dir``: as bench builds it,
each task its tuned record or its no-search schedule, whichever ran faster here, a task without
a record its no-search schedule: :func:`relay_ext.build.whole_model.compile_builds`), the no-search
records (``--no-search``: :func:`relay_ext.schedules.rule_designs.no_search_records`) or none (TVM
untuned: TOPI's default schedules). Every task of the model (one fused function) is built twice
and timed in interleaved rounds, as ``quantfuse bench``'s never-slower rule does
(relay_ext/schedules/task_choice.py): with its record and with TOPI's default schedule; the row
takes the time of what the model runs (the record, unless the rule drops it for being more than
5% slower than the default). Multiplied by the number of calls the model makes to the function,
that is the task's share of the model. The whole-model row is the model built with the records the
rows kept (what bench's never-slower rule builds, without timing every task again). The TVM
kernel column reads the code of what the model runs: ``AMX`` (``tdpbusd``), ``VNNI xN`` (``N``
distinct ``vpdpbusd`` accumulator registers; 1: each waits for the previous), ``vpmaddubsw`` (an
int8 multiply-add without VNNI) or ``no int8 dot``.

PyTorch side: the same quantized network as ``models.load`` builds it (same seed, eager mode, x86
engine), each leaf module timed with forward hooks over ``--rounds`` runs (median per module),
at the same thread count. Its residual adds (``QFunctional.add``, a method) are in no row.

OpenVINO side: bench's QDQ ONNX export of the same network (same seed and calibration batches,
quantized by ONNX Runtime's ``quantize_static``) compiled by OpenVINO's CPU plugin on the same
threads with its counters on (``PERF_COUNT``, :mod:`relay_ext.peers.openvino_layers`): each
executed node's median real time over ``10 x --rounds`` inferences. Its conv nodes hold the conv,
bias, requantize, ReLU and (kernel marked ``+ add``) the residual add, as TVM's conv tasks do.
The whole-model row is OpenVINO timed without counters. OpenVINO's exec type names the
instruction family only (``brgconv_avx512_I8`` with or without VNNI); the oneDNN implementation
each conv primitive was created with (``ONEDNN_VERBOSE=profile_create``, e.g.
``brg_conv_fwd:avx512_core_vnni``) is printed and written with the table.

Convolutions are matched by shape (benchmarks/layer_table.py: input channels, output channels,
kernel, stride, output height and width, the peers' channel counts padded as TVM's x86 int8
convolutions pad them); what is not a convolution is summed per side as "everything else", with
its largest parts in a second table. Timed in isolation, the per-layer sums do not add up exactly
to the whole-model latency (caches, the executor, the counters' own cost), which the last rows
give for each.
"""

from __future__ import annotations

import argparse
import collections
import functools
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
import tvm
from tvm import meta_schedule as ms
from tvm import relay

from benchmarks.layer_table import Signature, describe, other_parts, table, tvm_channels  # noqa: F401
from benchmarks.markdown_report import markdown_table, write_section
from meta_rules.base.tvm_errors import tvm_error_message
from relay_ext.cli.native_log import native_log_to
from relay_ext.frontend import models as frontend_models
from relay_ext.frontend.eager_quantization import (QUANTIZATION_BACKEND, quantization_engine,
                                                   quantize_eager, random_batches,
                                                   seeded_float_model)
from relay_ext.frontend.optional_deps import MissingDependency, require_openvino
from relay_ext.lowering.targets import check_runs_here, host_cpu_flags, normalize_target
from relay_ext.schedules.records import build_with_records
from relay_ext.schedules.records import compilable_records
from relay_ext.schedules.task_choice import best_record, has_record, never_slower_records, time_task
from relay_ext.schedules.rule_designs import no_search_records
from relay_ext.lowering.tasks import lowered_tasks
from relay_ext.measure.timing import load_average, tvm_timer, with_tvm_threads
from relay_ext.workdir.files import open_tuned_database, recorded_run

logger = logging.getLogger(__name__)


def conv_signature(task: ms.ExtractedTask) -> Optional[Signature]:
    """The signature of the task's convolution, or None when it has none; its channel counts
    as :func:`tvm_channels` pads them, so that a host where TOPI does not pad them (no int8
    layout) still matches the peers' padded ones."""
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
            # padded as TOPI pads them where it does (idempotent where it already has)
            cin, cout = tvm_channels(channels, int(node.attrs.channels), int(node.attrs.groups))
            found.append((cin, cout, int(node.attrs.kernel_size[0]), int(node.attrs.strides[0]),
                          height, width))

    relay.analysis.post_order_visit(func.body, visit)
    return found[0] if found else None


def kernel_kind(lib) -> str:
    """What int8 instructions a built module's code uses (see the module doc)."""
    asm = lib.get_lib().get_source("asm")
    if "tdpbusd" in asm:
        return "AMX"
    chains = {line.split(",")[-1].strip() for line in asm.splitlines() if "vpdpbusd" in line}
    if chains:
        return f"VNNI x{len(chains)}"
    return "vpmaddubsw" if "vpmaddubsw" in asm else "no int8 dot"


def tvm_layers(tasks, database: ms.Database, target, variant: str, rounds: int) -> List[Dict]:
    """Per task: its calls, conv signature, the time of what the model runs (the record, or
    TOPI's default where the never-slower rule drops the record) and its kernel kind."""
    rows = []
    for task in tasks:
        tuned = has_record(database, task.dispatched[0])
        kinds: Dict[str, str] = {}

        def read(record_lib, default_lib, kinds=kinds):
            kinds["record"] = kernel_kind(record_lib)
            kinds["default"] = kernel_kind(default_lib)

        try:
            timed = time_task(task, database if tuned else ms.database.MemoryDatabase(),
                              target, variant, rounds, on_built=read)
        except Exception as error:  # pylint: disable=broad-except - one row lost, not the table
            logger.warning("could not time %s: %s", task.task_name,
                           tvm_error_message(error, limit=200))
            continue
        runs_record = tuned and not timed.uses_default
        rows.append({"task": task.task_name, "calls": int(task.weight),
                     "signature": conv_signature(task), "tuned": tuned,
                     "runs_record": runs_record,
                     "record_ms": timed.record_ms if tuned else None,
                     "default_ms": timed.default_ms,
                     "used_ms": timed.record_ms if runs_record else timed.default_ms,
                     "kind": kinds.get("record" if runs_record else "default")})
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
                             int(mod.kernel_size[0]), int(mod.stride[0]), int(out[2]), int(out[3]))
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


def kept_records(database: ms.Database, tasks, rows: List[Dict]) -> ms.Database:
    """The records the rows run (the never-slower rule's choice, already timed per task)."""
    kept = ms.database.MemoryDatabase()
    running = {row["task"] for row in rows if row.get("runs_record")}
    for task in tasks:
        record = best_record(database, task.dispatched[0]) if task.task_name in running else None
        if record is not None:
            kept.commit_tuning_record(ms.database.TuningRecord(
                record.trace, kept.commit_workload(record.workload.mod), record.run_secs,
                record.target, record.args_info))
    return kept


def tvm_model_ms(loaded, tasks, database: ms.Database, rows: List[Dict], target, variant: str,
                 rounds: int) -> float:
    """The whole model built with the records ``rows`` run, median ms of ``rounds`` rounds."""
    lib = build_with_records(kept_records(database, tasks, rows), loaded.mod, loaded.params,
                             target, variant)
    _, one_round = tvm_timer(lib, loaded.inputs, 5)
    return 1e3 * statistics.median(one_round() for _ in range(rounds))


def openvino_rows(profile) -> List[Dict]:
    """An :class:`relay_ext.peers.openvino_layers.OpenVINOProfile`'s nodes as peer rows: conv
    nodes with their signature (channels as TVM pads them), every node with its kernel."""
    rows = []
    for layer in profile.layers:
        signature = None
        if layer.conv is not None:
            c = layer.conv
            signature = (*tvm_channels(c.in_channels, c.out_channels, c.groups), c.kernel,
                         c.stride, c.out_height, c.out_width)
        rows.append({"signature": signature, "ms": layer.ms, "name": layer.name,
                     "kind": layer.exec_type + (" + add" if layer.residual_add else ""),
                     "part": f"{layer.layer_type} ({layer.exec_type})"})
    return rows


def openvino_peer(model: str, image_size: int, threads: int, rounds: int) -> Tuple[Dict, Dict]:
    """OpenVINO's column (bench's QDQ export of ``model``, profiled) and what oneDNN says it ran."""
    from relay_ext.frontend.onnx_export import export_quantized  # pylint: disable=C0415
    from relay_ext.peers.openvino_layers import (kernel_family, onednn_conv_kernels,  # pylint: disable=C0415
                                                    openvino_layers)

    shape = frontend_models._model_spec(model).input_shape(1, image_size)  # pylint: disable=W0212
    example = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    with tempfile.TemporaryDirectory() as scratch:
        path = export_quantized(model, Path(scratch) / f"{model}_qdq.onnx", image_size=image_size)
        profile = openvino_layers(path, example, threads, rounds=10 * rounds, timing_rounds=rounds)
        onednn = onednn_conv_kernels(path, threads)
    rows = openvino_rows(profile)
    families = collections.Counter(kernel_family(layer.exec_type) for layer in profile.convs())
    facts = {"version": profile.version, "onednn": onednn, "families": dict(families),
             "exec_types": dict(collections.Counter(layer.exec_type for layer in profile.convs()))}
    return {"name": "OpenVINO", "rows": rows, "total": profile.model_ms}, facts


def _load(value: Optional[float]) -> str:
    return "unknown" if value is None else f"{value:.2f}"


def tvm_build(args, target) -> Tuple[str, str, Optional[ms.Database]]:
    """(what build is examined, its variant, its records: None for TVM untuned)."""
    if args.work_dir is not None and args.no_search:
        raise SystemExit("--work-dir and --no-search name two builds: pass one (or neither, for "
                         "TVM untuned)")
    if args.work_dir is None:
        return ("no-search" if args.no_search else "untuned"), "ours", None
    if not Path(args.work_dir).is_dir():
        raise SystemExit(f"--work-dir {args.work_dir}: no such directory (tune into it first, or "
                         "pass --no-search or no work dir)")
    run = recorded_run(args.work_dir) or {}
    if run.get("target") and str(normalize_target(run["target"])) != str(target):
        raise SystemExit(f"{args.work_dir} was tuned for {run['target']!r}, not {str(target)!r}; "
                         "pass --target with the tuned target")
    return "tuned", run.get("variant", "ours"), \
        compilable_records(open_tuned_database(args.work_dir)).database


def peers_of(choice: str) -> List[str]:
    """The peers ``--peer`` names; "both" leaves OpenVINO out (saying so) where it is missing."""
    wanted = ["pytorch", "openvino"] if choice == "both" else [choice]
    if "openvino" in wanted:
        try:
            require_openvino()
        except MissingDependency as error:
            if choice == "openvino":
                raise SystemExit(f"--peer openvino: {error}") from None
            print(f"OpenVINO column left out: {error}")
            wanted.remove("openvino")
    return wanted


def measure(args, label: str, variant: str, database: Optional[ms.Database], target,
            wanted: List[str]) -> Tuple[List[Dict], float, List[Dict], Dict]:
    """TVM's rows and whole model, then each peer's column (and what OpenVINO's kernels are)."""
    loaded = frontend_models.load(args.model, image_size=args.image_size)
    tasks = lowered_tasks(loaded.mod, loaded.params, target, variant)
    if database is None:
        database = (no_search_records(loaded.mod, loaded.params, target, variant, tasks).database
                    if label == "no-search" else ms.database.MemoryDatabase())
    else:  # the tuned build as bench builds it: per task its record or its no-search schedule
        designs = compilable_records(no_search_records(
            loaded.mod, loaded.params, target, variant, tasks).database).database
        database = with_tvm_threads(args.threads, lambda: never_slower_records(
            database, loaded.mod, loaded.params, target, variant, tasks,
            no_search=designs).database)
    tvm_rows = with_tvm_threads(
        args.threads, lambda: tvm_layers(tasks, database, target, variant, args.rounds))
    tvm_total = with_tvm_threads(args.threads, lambda: tvm_model_ms(
        loaded, tasks, database, tvm_rows, target, variant, args.rounds))
    peers, facts = [], {}
    if "pytorch" in wanted:
        torch_rows, torch_total = pytorch_layers(args.model, args.image_size, args.threads,
                                                 args.rounds)
        peers.append({"name": "PyTorch", "total": torch_total,
                      "rows": [{**row, "part": row["kind"]} for row in torch_rows]})
    if "openvino" in wanted:
        openvino, facts = openvino_peer(args.model, args.image_size, args.threads, args.rounds)
        peers.append(openvino)
    return tvm_rows, tvm_total, peers, facts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="a tuned work dir (else --no-search, else TVM untuned)")
    parser.add_argument("--no-search", action="store_true",
                        help="examine the no-search build (issue 29) instead of a tuned one")
    parser.add_argument("--peer", choices=["both", "pytorch", "openvino"], default="both",
                        help="the peer columns (both: PyTorch int8 and OpenVINO int8, OpenVINO "
                        "left out with a line where it is not installed)")
    parser.add_argument("--target", default="host")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--section", default=None,
                        help="docs/BENCHMARKS.md section to write (default where_time_goes_<model>, "
                        "with _no_search / _untuned for those builds)")
    parser.add_argument("--note", default="", help="a sentence on the build or the machine")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ alone")
    args = parser.parse_args()
    target = normalize_target(args.target)
    check_runs_here(target)  # before anything is built: code this CPU lacks dies with SIGILL
    label, variant, database = tvm_build(args, target)
    wanted = peers_of(args.peer)
    load_before = load_average()
    with native_log_to(Path(tempfile.gettempdir()) / "where_time_goes_tvm.log") as native:
        tvm_rows, tvm_total, peers, facts = measure(args, label, variant, database, target, wanted)
    if native.summary():
        print(native.summary())
    load_after = load_average()
    header, rows = table(tvm_rows, tvm_total, peers, label)
    text = markdown_table(header, rows)
    parts = markdown_table(*other_parts(tvm_rows, peers))
    flags = sorted((host_cpu_flags() or frozenset()) &
                   {"avx2", "avx512f", "avx512_vnni", "amx_int8", "amx_tile"})
    records = sum(1 for row in tvm_rows if row["runs_record"])
    said = (f"Host flags {', '.join(flags)}; target `{target}`; {args.threads} threads for every "
            f"side; load average {_load(load_before)} before, {_load(load_after)} after. TVM {label}: "
            f"{records} of {len(tvm_rows)} tasks run a record"
            + (" (the no-search design where the never-slower rule keeps it)"
               if label == "no-search" else "") + ".")
    if facts:
        said += (f" OpenVINO {facts['version']}: conv nodes' exec types "
                 + ", ".join(f"{k} x{n}" for k, n in facts["exec_types"].items())
                 + "; oneDNN's conv implementations (ONEDNN_VERBOSE=profile_create): "
                 + (", ".join(f"{k} x{n}" for k, n in facts["onednn"].items())
                    or "none printed") + ".")
    print(said + "\n\n" + text + "\n\nEverything else, largest parts:\n\n" + parts)
    if not args.no_write:
        peer_names = " and ".join(f"{p['name']} int8" for p in peers)
        suffix = "" if label == "tuned" else "_" + label.replace("-", "_")
        write_section(
            args.section or f"where_time_goes_{args.model}{suffix}",
            f"Where the time goes: int8 {args.model} {args.image_size}, TVM {label} vs "
            f"{peer_names}, layer by layer",
            f"{said} {args.note} Random weights, calibrated on random data. TVM: each fused "
            f"function timed alone (median of {args.rounds} interleaved rounds, record vs TOPI's "
            "default schedule; the model uses the faster), times the calls the model makes; "
            f"PyTorch: each leaf module of the eager quantized network timed with forward hooks "
            f"(median of {args.rounds} runs; its residual adds are in no row); OpenVINO: each "
            f"executed node of its compiled graph, PERF_COUNT real time (median of "
            f"{10 * args.rounds} inferences; a conv node also runs its bias, requantize, ReLU and, "
            "where its kernel says `+ add`, the residual add). Convs matched by shape (channels as "
            "TVM pads them, kernel/stride, output size); rows sorted by the gap to the fastest "
            "peer, largest first. TVM kernel: AMX, VNNI xN (N vpdpbusd accumulator registers) or "
            "neither, read from the code the model runs; see benchmarks/where_time_goes.py.\n\n"
            + text + "\n\nEverything else, largest parts:\n\n" + parts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
