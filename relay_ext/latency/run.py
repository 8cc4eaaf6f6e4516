"""CPU latency of a quantized model: TVM's builds against its peer runtimes on this host.

    result = relay_ext.bench("resnet18", records="work")   # a BenchResult (relay_ext.latency.result)
    print(result.summary_line())

:func:`bench` is the library call behind ``quantfuse bench``: it loads the model when given a
name or a file, opens the tuned records, makes a built-in model's ONNX export for the ONNX Runtime
and OpenVINO rows, measures (:func:`measure_latency`) and writes ``report.md`` and the chart into
the work dir (:mod:`.report`). :func:`measure_latency` builds TVM's rows, prepares every peer
(:mod:`relay_ext.peers`) and times them all in interleaved rounds on the same input with the same
thread count. The timing toolkit is :mod:`relay_ext.measure.timing`.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
from tvm import meta_schedule as ms

from meta_rules.rule_sets import TargetLike, check_variant

from relay_ext.latency.report import write_report
from relay_ext.latency.result import NO_SEARCH, TUNED, UNTUNED, BenchResult, PeerRow
from relay_ext.report.layout_transforms import layout_transforms_of_graph_json
from relay_ext.frontend.loader import load_model
from relay_ext.frontend.models import LoadedModel
from relay_ext.lowering.targets import check_runs_here, normalize_target
from relay_ext.build import compile  # pylint: disable=redefined-builtin
from relay_ext.measure.timing import (Timing, TVMThread, cpu_ticks, interleaved_rounds, load_average,
                                     stolen_share)
from relay_ext.peers.base import PeerModel, PeerUnavailable
from relay_ext.peers.registry import bench_peers
from relay_ext.report.accuracy import step_error
from relay_ext.report.tables import machine_description
from relay_ext.workdir.files import TASK_TIMINGS_FILE, onnx_export_file, open_tuned_database

logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]


@dataclasses.dataclass
class PeerTimers:
    """The peers prepared for one bench: their timers (label -> one round), the versions of those
    timed, the model-checked steps of the model's own runtimes (``runtime_steps``) and the
    optional peers' rows (None when they were not asked for)."""

    timers: Dict[str, Callable[[], float]] = dataclasses.field(default_factory=dict)
    versions: Dict[str, Optional[str]] = dataclasses.field(default_factory=dict)
    runtime_steps: Dict[str, float] = dataclasses.field(default_factory=dict)
    rows: Optional[List[PeerRow]] = None


def peer_timers(model: PeerModel, number: int, threads: int, optional: bool = True) -> PeerTimers:
    """Every peer of :func:`relay_ext.peers.registry.bench_peers` that runs ``model``, prepared in
    table order (each compiled once and run once; one round: the mean of ``number`` runs after one
    untimed run). A model's own runtime that does not apply is left out; an optional peer
    (``optional`` False: none) gets a :class:`PeerRow` with its check or why it did not run. Call
    with PyTorch's threads set to ``threads`` (PyTorch's and Inductor's kernels use them)."""
    found = PeerTimers(rows=[] if optional else None)
    for peer in bench_peers():
        if peer.optional and not optional:
            continue
        label = peer.label(model)
        ok, reason = peer.available()
        prepared = None
        if ok:
            try:
                prepared = peer.prepare(model, number, threads)
            except PeerUnavailable as error:
                reason = str(error)
        if peer.optional:
            row = PeerRow(label, peer.version, reason)
            if prepared is not None:
                row.reference, row.max_steps = prepared.reference, prepared.max_steps
            found.rows.append(row)
            logger.info("%s", row.line())
        if prepared is None:
            continue
        found.timers[label] = prepared.timer
        found.versions[label] = peer.version
        if not peer.optional and prepared.max_steps is not None:
            found.runtime_steps[label] = prepared.max_steps
    return found


def measure_latency(loaded: LoadedModel, database: Optional[ms.Database],
                    target: TargetLike = "llvm",
                    variant: str = "ours", repeats: int = 10, number: int = 10,
                    threads: Optional[int] = None,
                    onnx_model: Optional[PathLike] = None,
                    choose_per_task: bool = True, peers: bool = True,
                    timing_cache: Optional[PathLike] = None) -> BenchResult:
    """Compile ``loaded`` with ``database``'s records and with TVM's defaults, check the builds'
    outputs against the model's reference runtime (PyTorch, or ONNX Runtime for an ONNX model)
    in output quantization steps, and time them beside the model's own runtimes on the same input
    with the same thread count: median of ``repeats`` interleaved rounds, each round timing every
    configuration once as the mean of ``number`` runs.

    ``database`` None: the main row is the no-search build (label :data:`NO_SEARCH`) instead of
    the tuned one. With a database, the no-search build is timed too, beside the tuned one, which
    takes for each task the faster of its tuned record and its no-search schedule.

    ``timing_cache``: the per-task choice's timing cache
    (:data:`relay_ext.workdir.files.TASK_TIMINGS_FILE` in the work dir): a second bench with
    the same records, target and threads times no task again.

    ``choose_per_task``: each task is compiled with the fastest, timed here with ``threads``
    threads, of its best record, its no-search schedule and TVM's default schedule
    (:mod:`relay_ext.schedules.task_choice`); the result's ``tasks_vs_default`` lists them all.

    ``onnx_model``: a QDQ ONNX file of the same network (a built-in model's export) for ONNX
    Runtime and OpenVINO; a model loaded from an ``.onnx`` file runs its own. ``peers``: also time
    the optional peers, OpenVINO and PyTorch Inductor (:func:`peer_timers`)."""
    if loaded.output_scale is None:
        raise ValueError(f"model {loaded.name!r} is not quantized (no output scale)")
    target, variant = normalize_target(target), check_variant(variant)
    check_runs_here(target)  # timing code this CPU cannot execute would kill the process
    threads = int(threads or os.cpu_count() or 1)
    load = load_average()  # before our own compile adds to it
    main = TUNED if database is not None else NO_SEARCH
    # One extraction, one generation of the rule designs and one set of timings for both builds:
    # with a work dir the tuned row takes, task by task, the faster of the tuned record and the
    # no-search schedule (relay_ext.build.whole_model).
    built = compile(loaded, target=target, records=database, variant=variant, threads=threads,
                    choose_per_task=choose_per_task, timing_cache=timing_cache, with_no_search=True)
    comparisons = built.choices
    libs = {TUNED: built.lib} if database is not None else {}
    libs[NO_SEARCH] = (built.no_search or built).lib
    libs[UNTUNED] = compile(loaded, target=target, schedule="default").lib

    old_torch_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with TVMThread(threads) as tvm_thread:
            outputs, timers = {}, {}
            for label, lib in libs.items():
                outputs[label], timers[label] = tvm_thread.tvm_timer(lib, loaded.inputs, number)
            others = peer_timers(PeerModel(loaded, onnx_model), number, threads, optional=peers)
            timers.update(others.timers)
            ticks = cpu_ticks()
            samples = interleaved_rounds(timers, repeats)
            stolen = stolen_share(ticks, cpu_ticks())
        expected = loaded.run_reference()
    finally:
        torch.set_num_threads(old_torch_threads)
    error = step_error(outputs[main], expected, loaded.output_scale)
    return BenchResult(
        model=loaded.name, input_shape=tuple(loaded.input_shape), target=str(target),
        variant=variant, threads=threads, repeats=repeats, number=number,
        timings={label: Timing(seconds) for label, seconds in samples.items()},
        reference=loaded.reference_name, max_steps=error.max_steps,
        mean_steps=error.mean_steps, fraction_equal=error.fraction_equal,
        untuned_max_steps=step_error(outputs[UNTUNED], expected, loaded.output_scale).max_steps,
        no_search_max_steps=(step_error(outputs[NO_SEARCH], expected, loaded.output_scale).max_steps
                             if main != NO_SEARCH else None),
        runtime_steps=others.runtime_steps,
        tasks_vs_default=comparisons, peers=others.rows, whole_model=built.whole_model,
        layout_transforms=layout_transforms_of_graph_json(libs[main].get_graph_json()),
        versions={label: others.versions[label] for label in samples if label in others.versions},
        machine=machine_description(), load_average=load, stolen_share=stolen,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))


def builtin_onnx_export(loaded: LoadedModel, directory: Path) -> Tuple[Optional[Path], Optional[str]]:
    """A built-in model's ONNX export, quantized by ONNX Runtime, for the ONNX Runtime and
    OpenVINO rows: kept in ``directory`` (a second bench reuses it). (None, why) when onnx or
    onnxruntime is not installed; (None, None) for a model file."""
    from relay_ext.frontend.onnx_export import export_quantized
    from relay_ext.frontend.optional_deps import MissingDependency

    made = loaded.builtin
    if made is None:
        return None, None
    path = directory / onnx_export_file(made.name, made.image_size, made.batch_size, made.seed)
    if path.exists():
        return path, None
    try:
        return export_quantized(made.name, path, batch_size=made.batch_size,
                                image_size=made.image_size, seed=made.seed), None
    except MissingDependency as error:
        return None, f"(no ONNX Runtime row: {error})"


def bench(model: Union[LoadedModel, PathLike], *, target: TargetLike = "host",
          records: Union[ms.Database, PathLike, None] = None,
          work_dir: Optional[PathLike] = None, variant: str = "ours", repeats: int = 10,
          number: int = 10, threads: Optional[int] = None, choose_per_task: bool = True,
          peers: bool = True) -> BenchResult:
    """``quantfuse bench`` as a library call: TVM's builds of ``model`` against every peer runtime
    on this CPU; the :class:`~relay_ext.latency.result.BenchResult` the CLI prints.

    ``model``: a :class:`~relay_ext.frontend.models.LoadedModel`, or what
    :func:`relay_ext.load_model` takes (a built-in name or a model file, loaded with its
    defaults). ``target``: an llvm target this CPU runs ("host": its best). ``records``: a tuned
    work dir or a MetaSchedule database (the "TVM tuned" row); None: the main row is the
    no-search build. ``work_dir``: where bench writes (``report.md``, ``latency.png``, the
    per-task timings a second bench reuses, a built-in model's ONNX export); default: ``records``
    when it is a work dir; None writes nothing. ``threads``: for TVM and every peer (default: all
    CPUs). ``choose_per_task``: a task whose best record runs slower than TVM's default schedule
    is compiled with the default. ``peers``: also compile and time OpenVINO and PyTorch Inductor.

    Raises ValueError for a model that is not quantized or a target that is not llvm,
    :class:`relay_ext.workdir.files.WorkDirError` for a work dir without records."""
    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    target = normalize_target(target)
    if target.kind.name != "llvm":
        raise ValueError(f"bench runs on this CPU: the target must be llvm, got {str(target)!r}")
    if isinstance(records, (str, os.PathLike)):
        work_dir = records if work_dir is None else work_dir
        records = open_tuned_database(records)
    work_dir = None if work_dir is None else Path(work_dir)
    with tempfile.TemporaryDirectory(prefix="quantfuse-bench-") as scratch:
        onnx_file, note = builtin_onnx_export(loaded, work_dir or Path(scratch))
        result = measure_latency(loaded, records, target, variant, repeats, number, threads,
                                 onnx_file, choose_per_task, peers,
                                 timing_cache=None if work_dir is None else work_dir / TASK_TIMINGS_FILE)
    result.notes = [note] if note else []
    if work_dir is not None:
        write_report(result, work_dir)
    return result
