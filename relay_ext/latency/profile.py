"""Where a model's time goes inside TVM's build, fused op by fused op, beside OpenVINO's own
per-layer counters: what ``quantfuse profile`` prints, as a library call.

    result = relay_ext.profile("resnet18", target="host", work_dir="work")   # a Profile
    for row in result.rows:                       # slowest first
        print(row.name, row.calls, row.ms, row.share, row.layer, row.openvino_ms)
    result.to_json()                              # what 'quantfuse profile --json' prints

TVM's side: the model is built as bench builds its main row (:func:`relay_ext.compile`: the
records of a work dir that holds them, each task under the per-task choice; else the no-search
build) and run ``rounds`` times in TVM's debug graph executor
(:func:`relay_ext.measure.in_model.profiled_runs`), which times every kernel call of a run. A
fused op's time is the median over the runs of its calls' total in one run, so a kernel the
model calls three times counts three times; its share is of the run's total as the debug
executor reports it, which also holds the executor's own work between kernels (and the
profiler's). The model's latency without the profiler, timed as bench times it, is given beside.
Each side is timed after a pause that lets the threads of the work before it go idle
(:func:`relay_ext.measure.timing.settle`): TVM's pool workers spin for a while after a run, and
counters read while they spin run up to twice as long.
Inside the model a kernel finds its weights cold and its input just written by the op before:
these times, not those of each task timed alone, add up to the model.
Where a conv's kernel computes with AVX-512 VNNI, the host's VNNI peak is measured on the same
threads (:mod:`relay_ext.measure.dot_peak`) and each such conv's multiply-adds per second are
given as a share of it: the ceiling a faster kernel cannot pass.

OpenVINO's side, where OpenVINO is installed and can read the model: a model loaded from an
``.onnx`` file is read as it is; a built-in model is exported as bench exports it (a QDQ ONNX
file quantized by ONNX Runtime, kept in the work dir). Its CPU plugin runs it on the same threads
with its counters on (:mod:`relay_ext.peers.openvino_layers`); each TVM conv call is paired with
the next OpenVINO convolution of the same shape, in the network's order
(:func:`relay_ext.latency.layer_pairing.pair_calls`). An OpenVINO conv node also runs its bias,
requantize, ReLU and (kernel ``+ add``) the residual add, as TVM's fused conv does.
"""

from __future__ import annotations

import collections
import datetime
import logging
import os
import statistics
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

from tvm import meta_schedule as ms

from meta_rules.rule_sets import TargetLike, check_variant

from relay_ext.build.entry import Compiled, compile  # pylint: disable=redefined-builtin
from relay_ext.frontend.loader import load_model
from relay_ext.frontend.models import LoadedModel
from relay_ext.frontend.optional_deps import MissingDependency
from relay_ext.latency.layer_pairing import (Signature, conv_macs, conv_signature, describe,
                                             function_kernel_kinds, openvino_rows, pair_calls)
from relay_ext.latency.profile_report import PROFILE_CHART_FILE, write_profile_chart
from relay_ext.latency.profile_result import OpenVINOLayer, OpenVINOSide, Profile, ProfileRow
from relay_ext.latency.run import builtin_onnx_export
from relay_ext.lowering.targets import check_runs_here, normalize_target
from relay_ext.lowering.tasks import lowered_tasks
from relay_ext.measure.dot_peak import vnni_peak_or_reason
from relay_ext.measure.in_model import PREFIX, kernel_name, kernel_tasks, profiled_runs
from relay_ext.measure.timing import load_average, settle, tvm_timer, with_tvm_threads
from relay_ext.peers.base import PeerModel, first_line
from relay_ext.report.tables import machine_description
from relay_ext.workdir.files import RECORD_FILE, TASK_TIMINGS_FILE, open_tuned_database

logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]
ROUNDS = 10  # profiled runs of TVM's build; OpenVINO's counters are read over twice as many
NUMBER = 10  # runs per round of the whole model's latency without the profiler
Call = Tuple[str, Optional[Signature]]  # a kernel call: its name, its task's conv signature
NO_KERNEL = "__nop"  # the graph executor's name of a node that runs no code (a reshape)


def profile(model: Union[LoadedModel, PathLike], *, target: TargetLike = "host",
            work_dir: Optional[PathLike] = None,
            records: Union[ms.Database, PathLike, None] = None, threads: Optional[int] = None,
            rounds: int = ROUNDS, variant: str = "ours", choose_per_task: bool = True,
            openvino: bool = True, png: Optional[PathLike] = None) -> Profile:
    """Each fused op's time inside ``model`` built by TVM for ``target`` (an llvm target this CPU
    runs), against OpenVINO's per-layer counters where it can read the model (see the module
    doc); a :class:`~relay_ext.latency.profile_result.Profile`, slowest op first.

    ``model``: a :class:`~relay_ext.frontend.models.LoadedModel`, or what
    :func:`relay_ext.load_model` takes. ``work_dir``: a work dir that holds tuned records builds
    the tuned model (else the no-search build); the chart (``profile.png``), a built-in model's
    ONNX export and the per-task choice's timings go there; None writes nothing but ``png``.
    ``records``: the tuned records instead (a database, or a work dir), as bench takes them.
    ``png``: where the chart goes instead. ``threads``: TVM's and OpenVINO's (default: all
    CPUs). ``choose_per_task=False``: no task timed against TVM's default schedule before the
    build (as ``bench --keep-slower-records``). ``openvino=False``: TVM's side only.

    Raises ValueError for a model that is not quantized, a target that is not llvm or rounds
    below 1; :class:`~relay_ext.lowering.targets.TargetNotRunnable` for a target this CPU cannot
    run; :class:`~relay_ext.workdir.files.WorkDirError` for a work dir whose records are broken."""
    if int(rounds) < 1:
        raise ValueError(f"rounds must be a positive number, got {rounds!r}")
    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    if loaded.output_scale is None:
        raise ValueError(f"model {loaded.name!r} is not quantized; profile compares int8 models")
    target, variant = normalize_target(target), check_variant(variant)
    if target.kind.name != "llvm":
        raise ValueError(f"profile runs on this CPU: the target must be llvm, got {str(target)!r}")
    check_runs_here(target)
    threads = int(threads or os.cpu_count() or 1)
    work_dir = None if work_dir is None else Path(work_dir)
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
    if records is None and has_records(work_dir):
        records = work_dir
    if isinstance(records, (str, os.PathLike)):
        records = open_tuned_database(records)
    load = load_average()
    built = compile(loaded, target=target, records=records, variant=variant, threads=threads,
                    choose_per_task=choose_per_task,
                    timing_cache=None if work_dir is None else work_dir / TASK_TIMINGS_FILE)
    # the tasks the build's rule designs came from, else (TVM's default build) extracted here
    tasks = (built.designs.tasks if built.designs is not None
             else lowered_tasks(loaded.mod, loaded.params, target, variant))
    rows, calls, run_ms, model_ms = _tvm_side(built, loaded, threads, int(rounds), tasks)
    peak, peak_note = (vnni_peak_or_reason(threads) if any(row.is_vnni_conv for row in rows)
                       else (None, "no conv of this build uses VNNI"))
    if openvino:
        settle()  # TVM's pool workers spin a while after its last run: not into OpenVINO's time
    side, note = (None, "not asked for") if not openvino else _openvino_side(
        loaded, work_dir, threads, int(rounds), target, rows, calls)
    result = Profile(
        model=loaded.name, input_shape=list(loaded.input_shape), target=str(target),
        schedule=built.schedule, variant=variant, threads=threads, rounds=int(rounds), rows=rows,
        layers_ms=sum(row.ms for row in rows), run_ms=run_ms, model_ms=model_ms, openvino=side,
        openvino_note=note, machine=machine_description(),
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        load_average=load, vnni_peak_gmacs=None if peak is None else peak.gmacs,
        vnni_peak_note=peak_note)
    attach_chart(result, Path(png) if png is not None else (
        None if work_dir is None else work_dir / PROFILE_CHART_FILE))
    return result


def attach_chart(result: Profile, path: Optional[Path]) -> None:
    """Write ``result``'s bar chart at ``path`` and name it in ``result.chart``; where there is
    none (no path, or no matplotlib) ``result.chart_note`` says why in one line."""
    if path is None:
        result.chart_note = "no chart: it goes to the work dir or to a PNG path (--png)"
        return
    try:
        result.chart = str(write_profile_chart(result, path))
    except ImportError:
        result.chart_note = "no chart: matplotlib is not installed (pip install matplotlib)"


def has_records(work_dir: Optional[Path]) -> bool:
    """Whether ``work_dir`` holds a tuning database with records (then its tuned build is
    profiled)."""
    path = None if work_dir is None else work_dir / RECORD_FILE
    return path is not None and path.is_file() and path.stat().st_size > 0


def _schedules(built: Compiled) -> Tuple[Dict[str, str], Dict[str, str]]:
    """Per task: what built it ("tuned", "no-search", "default") and its rule design's kind."""
    designs = {design.task: design for design in (built.designs.designs if built.designs else [])}
    # a no-search build has no tuned record: its choices kept rule designs
    kept = "no-search" if built.schedule == "no-search" else "tuned"
    chosen = {choice.task: kept if choice.choice == "tuned" else choice.choice
              for choice in built.choices or []}
    for name, design in designs.items():  # untimed: a design builds its task, else TOPI's default
        chosen.setdefault(name, "no-search" if design.has_record else "default")
    kinds = {name: design.design for name, design in designs.items() if design.has_record}
    return chosen, kinds


def kernel_times(reports) -> Tuple[Dict[str, List[float]], Dict[str, int], List[str], List[float]]:
    """From the debug executor's reports of whole runs: per kernel (its task name) its total ms in
    each run, its calls in one run, the kernels' calls in execution order and each run's total ms
    (the debug executor's own, per device summed)."""
    per_run: Dict[str, List[float]] = collections.defaultdict(list)
    calls: Dict[str, int] = {}
    order: List[str] = []
    totals: List[float] = []
    for index, report in enumerate(reports):
        run: Dict[str, float] = collections.defaultdict(float)
        for call in report.calls:
            if str(call["Name"]) == NO_KERNEL:
                continue
            name = kernel_name(str(call["Name"]))
            run[name] += call["Duration (us)"].microseconds / 1e3
            if index == 0:
                order.append(name)
        for name, ms in run.items():
            per_run[name].append(ms)
        if index == 0:
            calls = dict(collections.Counter(order))
        totals.append(sum(metrics["Duration (us)"].microseconds / 1e3
                          for metrics in report.device_metrics.values()))
    return dict(per_run), calls, order, totals


def _tvm_side(built: Compiled, loaded: LoadedModel, threads: int, rounds: int,
              tasks: List[ms.ExtractedTask]) -> Tuple[List[ProfileRow], List[Call], float, float]:
    """The rows (slowest first; each with its task's schedule and layer), the kernel calls in
    execution order with their conv signatures, the debug executor's median total per run and
    the model's median latency without the profiler."""

    def measure():
        settle()  # the build's own timing may have left TVM's pool workers spinning
        reports = profiled_runs(built.lib, loaded.inputs, rounds)
        _, one_round = tvm_timer(built.lib, loaded.inputs, NUMBER)
        settle()
        return reports, [one_round() for _ in range(rounds)]

    reports, latency = with_tvm_threads(threads, measure)
    per_run, calls, order, totals = kernel_times(reports)
    run_ms = statistics.median(totals)
    chosen, designs = _schedules(built)
    kinds = function_kernel_kinds(built.lib, [PREFIX + name for name in calls])
    # the build names its kernels in another order than the task extraction names the tasks
    task_of = kernel_tasks(built.lib, tasks)
    signatures = {str(task.task_name): conv_signature(task) for task in tasks}
    macs = {str(task.task_name): conv_macs(task) for task in tasks}
    rows = []
    for name, times in per_run.items():
        task = task_of.get(name)
        signature = signatures.get(task)
        rows.append(ProfileRow(
            name, statistics.median(times), statistics.median(times) / run_ms, calls[name],
            schedule=chosen.get(task, built.schedule),
            design=designs.get(task) if chosen.get(task) == "no-search" else None,
            kernel=kinds.get(PREFIX + name),
            layer=describe(signature) if signature is not None else None,
            macs=None if macs.get(task) is None else macs[task] * calls[name]))
    rows.sort(key=lambda row: -row.ms)
    in_order = [(name, signatures.get(task_of.get(name))) for name in order]
    return rows, in_order, run_ms, 1e3 * statistics.median(latency)


def openvino_source(loaded: LoadedModel, directory: Path) -> Tuple[Optional[Path], Optional[str]]:
    """The QDQ ONNX file OpenVINO reads for ``loaded`` (the model's own ``.onnx``, or a built-in
    model's export written into ``directory``), or None and why there is none."""
    onnx_file, note = builtin_onnx_export(loaded, directory)
    path = PeerModel(loaded, onnx_file).qdq_file
    if path is not None:
        return Path(path), None
    return None, note or (f"OpenVINO reads ONNX models: {loaded.name!r} is not one (load the "
                          "network's QDQ .onnx file to compare with OpenVINO)")


def _openvino_side(loaded: LoadedModel, work_dir: Optional[Path], threads: int, rounds: int,
                   target, rows: List[ProfileRow],
                   calls: List[Call]) -> Tuple[Optional[OpenVINOSide], Optional[str]]:
    """OpenVINO's counters on the same network, paired into ``rows`` by the conv signatures of
    ``calls``; or None and why not."""
    from relay_ext.peers.openvino_layers import openvino_layers  # pylint: disable=import-outside-toplevel
    from relay_ext.frontend.optional_deps import require_openvino  # pylint: disable=import-outside-toplevel

    try:
        require_openvino()
    except MissingDependency as error:
        return None, str(error)
    with tempfile.TemporaryDirectory(prefix="quantfuse-profile-") as scratch:
        path, note = openvino_source(loaded, work_dir or Path(scratch))
        if path is None:
            return None, note
        try:
            counters = openvino_layers(path, loaded.example_input, threads, rounds=2 * rounds,
                                       timing_rounds=rounds)
        except Exception as error:  # pylint: disable=broad-except - OpenVINO raises RuntimeError & co
            return None, f"OpenVINO failed on {path.name}: {first_line(error, limit=300)}"
    paired, unpaired = pair_calls(calls, openvino_rows(counters))
    for row in rows:
        nodes = paired.get(row.name, [])
        if nodes:
            row.openvino_layers = [node["name"] for node in nodes]
            row.openvino_ms = sum(node["ms"] for node in nodes)
            row.openvino_kernel = ", ".join(sorted({node["kind"] for node in nodes}))
    return OpenVINOSide(counters.version, path.name, counters.layers_ms(), counters.model_ms,
                        [OpenVINOLayer(node["name"], node["part"], node["ms"])
                         for node in unpaired]), None
