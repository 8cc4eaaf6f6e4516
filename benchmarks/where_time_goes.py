"""Where an int8 model's time goes, layer by layer: TVM against PyTorch int8 and OpenVINO.

    python -m benchmarks.where_time_goes --model resnet18 --work-dir W [--target host]
        [--image-size 224] [--threads 2] [--rounds 7] [--peer both|pytorch|openvino] [--section NAME]
    python -m benchmarks.where_time_goes --model resnet18 --no-search ...   # no tuning: the rule designs
    python -m benchmarks.where_time_goes --model resnet18 ...               # no work dir: TVM untuned

TVM side: the build examined is the work dir's tuned build (``--work-dir``: as bench builds it,
each task its tuned record or its rule design, whichever ran faster here, a task without a record
its rule design: :func:`relay_ext.schedules.task_choice.choose_per_task`), the rule designs
(``--no-search``: :func:`relay_ext.schedules.rule_designs.rule_design_records`) or none (TVM
untuned: TOPI's default schedules). Every task of the model (one fused function) is built twice
and timed in interleaved rounds, as bench's per-task choice does: with its record and with TOPI's
default schedule; the row takes the time of what the model runs (the record, unless the choice
drops it for being more than 5% slower than the default). Multiplied by the number of calls the
model makes to the function, that is the task's share of the model. The whole-model row is
bench's build of the same schedules (:func:`relay_ext.compile`: "tuned" with the work dir's
records, "no-search" or "default"). The TVM kernel column reads the code of what the model runs:
``AMX`` (``tdpbusd``), ``VNNI xN`` (``N`` distinct ``vpdpbusd`` accumulator registers; 1: each
waits for the previous), ``vpmaddubsw`` (an int8 multiply-add without VNNI) or ``no int8 dot``.

PyTorch side: the same quantized network as :func:`relay_ext.load_model` builds it (same seed,
eager mode, x86 engine), each leaf module timed with forward hooks over ``--rounds`` runs (median
per module), at the same thread count. Its residual adds (``QFunctional.add``, a method) are in no
row.

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
kernel, stride, output height and width, the peers' channel counts as TVM's x86 int8 convolutions
run them: padded, and doubled on a target without VNNI, where TVM computes a conv over its input
read twice so that ``vpmaddubsw`` cannot saturate); what is not a convolution is summed per side as "everything else", with
its largest parts in a second table. Timed in isolation, the per-layer sums do not add up exactly
to the whole-model latency (caches, the executor, the counters' own cost), which the last rows
give for each. The per-layer timing of each side: benchmarks/layer_timing.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from tvm import meta_schedule as ms

import relay_ext
from benchmarks.layer_table import other_parts, table
from benchmarks.layer_timing import openvino_column, pytorch_layers, tvm_layers
from benchmarks.markdown_report import markdown_table, write_section
from relay_ext.frontend.optional_deps import MissingDependency, require_openvino
from relay_ext.lowering.targets import check_runs_here, host_cpu_flags, normalize_target
from relay_ext.lowering.tasks import lowered_tasks
from relay_ext.measure.timing import load_average, tvm_timer, with_tvm_threads
from relay_ext.schedules.records import compilable_records
from relay_ext.schedules.rule_designs import rule_design_records
from relay_ext.schedules.task_choice import choose_per_task
from relay_ext.workdir.files import open_tuned_database, recorded_run


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


def whole_model_ms(loaded, label: str, records: Optional[ms.Database], target, variant: str,
                   threads: int, rounds: int) -> float:
    """Bench's build of the schedules examined (:func:`relay_ext.compile`), median ms of
    ``rounds`` rounds of 5 runs on ``threads`` threads of TVM's pool."""
    schedule = {"tuned": "tuned", "no-search": "no-search", "untuned": "default"}[label]
    compiled = relay_ext.compile(loaded, target=target, schedule=schedule, records=records,
                                 variant=variant, threads=threads)

    def timed() -> float:
        _, one_round = tvm_timer(compiled.lib, loaded.inputs, 5)
        return 1e3 * statistics.median(one_round() for _ in range(rounds))

    return with_tvm_threads(threads, timed)


def measure(args, label: str, variant: str, records: Optional[ms.Database], target,
            wanted: List[str]) -> Tuple[List[Dict], float, List[Dict], Dict]:
    """TVM's rows and whole model, then each peer's column (and what OpenVINO's kernels are)."""
    loaded = relay_ext.load_model(args.model, image_size=args.image_size)
    tasks = lowered_tasks(loaded.mod, loaded.params, target, variant)
    if records is None:
        database = (rule_design_records(loaded.mod, loaded.params, target, variant, tasks).database
                    if label == "no-search" else ms.database.MemoryDatabase())
    else:  # the tuned build as bench builds it: per task its record or its rule design
        designs = compilable_records(rule_design_records(
            loaded.mod, loaded.params, target, variant, tasks).database).database
        database = with_tvm_threads(args.threads, lambda: choose_per_task(
            records, loaded.mod, loaded.params, target, variant, tasks, designs=designs).database)
    tvm_rows = with_tvm_threads(
        args.threads, lambda: tvm_layers(tasks, database, target, variant, args.rounds))
    tvm_total = whole_model_ms(loaded, label, records, target, variant, args.threads, args.rounds)
    peers, facts = [], {}
    if "pytorch" in wanted:
        torch_rows, torch_total = pytorch_layers(args.model, args.image_size, args.threads,
                                                 args.rounds)
        peers.append({"name": "PyTorch", "total": torch_total,
                      "rows": [{**row, "part": row["kind"]} for row in torch_rows]})
    if "openvino" in wanted:
        openvino, facts = openvino_column(args.model, args.image_size, args.threads, args.rounds)
        peers.append(openvino)
    return tvm_rows, tvm_total, peers, facts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="a tuned work dir (else --no-search, else TVM untuned)")
    parser.add_argument("--no-search", action="store_true",
                        help="examine the rule designs' build (no tuning) instead of a tuned one")
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
    tvm_rows, tvm_total, peers, facts = measure(args, label, variant, database, target, wanted)
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
            "TVM runs them: padded, and the input twice over where the target has no VNNI, TVM's "
            "saturation-free form; kernel/stride, output size); rows sorted by the gap to the "
            "fastest peer, largest first. TVM kernel: AMX, VNNI xN (N vpdpbusd accumulator registers) or "
            "neither, read from the code the model runs; see benchmarks/where_time_goes.py.\n\n"
            + text + "\n\nEverything else, largest parts:\n\n" + parts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
