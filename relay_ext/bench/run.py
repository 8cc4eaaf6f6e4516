"""CPU latency of a tuned quantized model: TVM tuned and untuned against its peers -- PyTorch's
int8 module, ONNX Runtime, OpenVINO and PyTorch Inductor (:mod:`.peers`).

:func:`measure_latency` returns the numbers (a :class:`BenchResult`); ``quantfuse bench`` prints
them as a table, and :func:`write_report` writes ``report.md`` and a PNG bar chart. The timing
toolkit is :mod:`relay_ext.measure.timing`.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from tvm import meta_schedule as ms

from meta_rules.rule_sets import TargetLike, check_variant

from relay_ext.frontend.models import LoadedModel
from relay_ext.frontend.onnx_reference import saturation_note
from relay_ext.lowering.targets import check_runs_here, host_cpu_flags, normalize_target, vector_flags
from relay_ext.build.whole_model import WholeModel, compile_builds
from relay_ext.schedules.task_choice import TaskVsDefault
# The timing toolkit lives in relay_ext.measure.timing (tuning times with it too); its names are
# also reachable here, where bench's callers and the benchmarks first found them.
from relay_ext.measure.timing import (Timing, TVMThread, cpu_ticks, interleaved_rounds, load_average,
                             stolen_share, torch_timer, with_tvm_threads)
from relay_ext.report.accuracy import step_error
from relay_ext.build.default import build_default
from relay_ext.peers.rows import PeerRow, fastest, peer_timers
from relay_ext.report.tables import machine_description

# busy_warning's thresholds: a hypervisor stealing more than this share of the busy CPU time
# while the rounds ran (a noisy Intel VM, 2026-12-03: 3-7% of the machine's time during a tune,
# 56% of its busy time over a bench's rounds, rounds up to 65x apart), and one configuration's
# rounds more than this many times apart (the widest in the quiet AMD VM's cpu_vs_peers runs of
# 2026-12-02: 1.70x)
STOLEN_WARNING = 0.05
SPREAD_WARNING = 2.0


@dataclasses.dataclass
class BenchResult:
    """What ``quantfuse bench`` measured: one :class:`Timing` per configuration (table order),
    and how far TVM's outputs are from the reference runtime's, in output quantization steps."""

    model: str
    input_shape: tuple
    target: str
    variant: str
    threads: int
    repeats: int
    number: int
    # label -> timing; TUNED (or NO_SEARCH without a work dir) and UNTUNED first, then the
    # references
    timings: Dict[str, Timing]
    reference: str              # the runtime TVM's outputs are compared with ("PyTorch int8")
    max_steps: float            # TVM's main row (tuned, else no-search) vs the reference
    mean_steps: float
    fraction_equal: float
    untuned_max_steps: float
    machine: str
    date: str
    load_average: Optional[float] = None  # 1-minute load before the bench compiled anything
    # The share of the machine's busy time a hypervisor stole while the rounds ran (/proc/stat's
    # steal); None where the OS does not tell.
    stolen_share: Optional[float] = None
    # Max output steps from the reference of the other runtimes that run the model itself (ONNX
    # Runtime int8 for an ONNX model, whose reference is its QDQ graph as written).
    runtime_steps: Dict[str, float] = dataclasses.field(default_factory=dict)
    # The no-search row's max steps when the main row is the tuned one (None otherwise).
    no_search_max_steps: Optional[float] = None
    # Issue 18's never-slower rule: every task with a record (tuned or no-search), its record's
    # time, its no-search schedule's beside a tuned record, and TVM's default schedule's, timed
    # here; each task compiled with the fastest (the default only when it beat both by more than
    # never_slower.MARGIN). None: the rule was not applied.
    tasks_vs_default: Optional[List[TaskVsDefault]] = None
    # The whole-model check of the tuned build against the no-search build (relay_ext.build.whole_model:
    # the per-task choices, or the no-search build where they ran slower as a whole); None when
    # it was not made (no work dir, --keep-slower-records).
    whole_model: Optional[WholeModel] = None
    # The peer runtimes (OpenVINO, PyTorch Inductor): version, output check or why not run. None:
    # not tried (bench --no-peers).
    peers: Optional[List[PeerRow]] = None
    versions: Dict[str, Optional[str]] = dataclasses.field(default_factory=dict)  # label -> version

    @property
    def main(self) -> str:
        """The TVM row ratios and the summary use: TUNED, or NO_SEARCH when bench had no work dir
        (no tuned row)."""
        return TUNED if TUNED in self.timings else NO_SEARCH

    @property
    def fastest_peer(self) -> Optional[Tuple[str, float]]:
        """(label, median ms) of the fastest runtime timed beside TVM, None when none was."""
        return fastest({label: self.timings[label].median_ms for label in self.references})

    def summary_line(self) -> Optional[str]:
        """TVM tuned (else no-search) against the fastest peer, for people."""
        best = self.fastest_peer
        if best is None:
            return None
        ratio = self.ratio(self.main, best[0])
        verdict = "faster than" if ratio < 1 else "slower than" if ratio > 1 else "as fast as"
        return (f"fastest peer: {best[0]} ({best[1]:.3f} ms); {self.main} is {ratio:.2f}x its time "
                f"({verdict} it)")

    def peer_lines(self) -> List[str]:
        """One line per peer: its output check, or why it did not run."""
        return [row.line() for row in self.peers or []]

    def default_lines(self) -> List[str]:
        """What the never-slower rule did, for people (empty when it was not applied)."""
        if self.tasks_vs_default is None:
            return []
        slower = [c for c in self.tasks_vs_default if c.uses_default]
        line = (f"never slower than TVM's default: {len(slower)} of {len(self.tasks_vs_default)} "
                "tasks with a record compiled with TVM's default schedule instead (their best "
                "record ran slower here)")
        lines = [line, *[f"  {c}" for c in slower]]
        if self.whole_model is not None and self.whole_model.uses_no_search:
            lines.append(str(self.whole_model))
        elif self.main == TUNED:
            filled = [c for c in self.tasks_vs_default
                      if c.record_source == "no-search" and not c.uses_default]
            beaten = [c for c in self.tasks_vs_default
                      if c.record_source == "tuned" and c.uses_no_search]
            lines.append(f"no-search schedule in the tuned build: {len(filled)} task(s) without a "
                         f"tuned record, {len(beaten)} whose tuned record it outran here")
            lines += [f"  {c}" for c in beaten]
            if self.whole_model is not None:
                lines.append(str(self.whole_model))
        return lines

    def runtime_lines(self) -> List[str]:
        """One sentence per entry of ``runtime_steps``, with why when it is more than rounding."""
        lines = []
        for label, steps in self.runtime_steps.items():
            note = saturation_note(steps, host_cpu_flags()) if label == ONNX_RUNTIME else None
            lines.append(f"{label} vs {self.reference}: max {steps:.2f} output quantization steps"
                         + (f" ({note})" if note else ""))
        return lines

    @property
    def busy_warning(self) -> Optional[str]:
        """A warning when the CPU was not ours alone: other processes competing for it (load
        above the threads), a hypervisor giving it to other guests (steal above
        STOLEN_WARNING), or rounds of one configuration more than SPREAD_WARNING times apart."""
        why = []
        if self.load_average is not None and self.load_average > self.threads:
            why.append(f"the load average was {self.load_average:.2f} before timing, above the "
                       f"{self.threads} thread(s) timed: other processes compete for the CPU")
        if self.stolen_share is not None and self.stolen_share > STOLEN_WARNING:
            why.append(f"the hypervisor gave {100 * self.stolen_share:.0f}% of this VM's busy CPU "
                       "time to other guests while the rounds ran (steal in /proc/stat)")
        wide = [label for label, timing in self.timings.items()
                if min(timing.seconds) > 0
                and max(timing.seconds) > SPREAD_WARNING * min(timing.seconds)]
        if wide:
            why.append(f"rounds of {', '.join(wide)} were more than {SPREAD_WARNING:g}x apart")
        if not why:
            return None
        return ("WARNING: " + "; ".join(why) + ". These figures are not trustworthy; rerun on a "
                "quiet machine")

    def ratio(self, label: str, reference: str) -> float:
        """median(label) / median(reference): > 1 means ``label`` is slower."""
        return self.timings[label].median_ms / self.timings[reference].median_ms

    @property
    def references(self) -> List[str]:
        """The labels of the runtimes TVM is compared with (PyTorch int8, ONNX Runtime int8, the
        peers that ran)."""
        return [label for label in self.timings if label not in TVM_ROWS]

    @property
    def header(self) -> List[str]:
        return ["", "median ms", "spread ms", f"/ {self.main}",
                *[f"/ {label.replace(' int8', '')}" for label in self.references]]

    def label(self, label: str) -> str:
        """A configuration's name as the table prints it ("TVM tuned (ours)", "PyTorch int8")."""
        return f"{label} ({self.variant})" if label in (TUNED, NO_SEARCH) else label

    def to_dict(self) -> Dict[str, object]:
        """The result as ``quantfuse bench --json`` prints it: ``model``, ``target``, ``threads``,
        ``host_flags`` (the vector/VNNI/AMX flags this host's OS enables), ``rows`` (one per
        configuration, named as in the table, with ``median_ms``, ``min_ms``, ``max_ms``),
        ``max_steps`` (TVM tuned, else no-search, vs ``reference``), ``main`` (that row's
        label) and the rest of the result."""
        return {
            "model": self.model, "input_shape": list(self.input_shape), "target": self.target,
            "variant": self.variant, "threads": self.threads, "host_flags": vector_flags(),
            "repeats": self.repeats, "number": self.number,
            "rows": [*[{"configuration": self.label(label),
                        "median_ms": timing.median_ms,
                        "min_ms": 1e3 * min(timing.seconds), "max_ms": 1e3 * max(timing.seconds),
                        **({"version": self.versions[label]} if label in self.versions else {})}
                       for label, timing in self.timings.items()],
                     *[{"configuration": row.label, "median_ms": None, "version": row.version,
                        "reason": row.reason} for row in self.peers or [] if not row.ran]],
            "peers": None if self.peers is None else [row.to_dict() for row in self.peers],
            "fastest_peer": self._fastest_peer_dict(), "main": self.label(self.main),
            "reference": self.reference, "max_steps": self.max_steps,
            "mean_steps": self.mean_steps, "fraction_equal": self.fraction_equal,
            "untuned_max_steps": self.untuned_max_steps,
            "no_search_max_steps": self.no_search_max_steps,
            "runtime_steps": dict(self.runtime_steps),
            "machine": self.machine, "date": self.date, "load_average": self.load_average,
            "stolen_share": self.stolen_share,
            "busy_warning": self.busy_warning,
            "tasks_vs_default": (None if self.tasks_vs_default is None
                                 else [c.to_dict() for c in self.tasks_vs_default]),
            "whole_model": None if self.whole_model is None else self.whole_model.to_dict(),
        }

    def _fastest_peer_dict(self) -> Optional[Dict[str, object]]:
        best = self.fastest_peer
        if best is None:
            return None
        # "tvm_tuned_ratio": the main row's (no-search without a work dir), the key kept for the
        # readers of earlier results
        return {"configuration": best[0], "median_ms": best[1],
                "tvm_tuned_ratio": self.ratio(self.main, best[0])}

    def rows(self) -> List[List[str]]:
        """Table rows: configuration, median ms, spread, vs the main TVM row, vs each
        reference."""
        return [[self.label(label),
                 f"{timing.median_ms:.3f}", f"{timing.spread_ms:.3f}",
                 f"{self.ratio(label, self.main):.2f}x",
                 *[f"{self.ratio(label, ref):.2f}x" for ref in self.references]]
                for label, timing in self.timings.items()]


TUNED, UNTUNED, PYTORCH, ONNX_RUNTIME = ("TVM tuned", "TVM untuned", "PyTorch int8",
                                       "ONNX Runtime int8")
NO_SEARCH = "TVM no-search"  # bench without a work dir: relay_ext.schedules.rule_designs's build
TVM_ROWS = (TUNED, NO_SEARCH, UNTUNED)
EAGER = "eager"  # a PT2E program's eager row is "<its reference name>, eager"
PathLike = Union[str, os.PathLike]


def eager_label(loaded: LoadedModel) -> str:
    """The table's label of a PT2E program run eagerly ("PyTorch PT2E int8, eager")."""
    return f"{loaded.reference_name}, {EAGER}"


def versions(labels: List[str], peers: Optional[List[PeerRow]]) -> Dict[str, Optional[str]]:
    """The version of each reference runtime timed (label -> version)."""
    import importlib.metadata  # pylint: disable=import-outside-toplevel

    found: Dict[str, Optional[str]] = {row.label: row.version for row in peers or []}
    for label in labels:
        if label == ONNX_RUNTIME:
            try:
                found[label] = importlib.metadata.version("onnxruntime")
            except importlib.metadata.PackageNotFoundError:
                found[label] = None
        elif label not in found and label not in TVM_ROWS:
            found[label] = f"torch {torch.__version__}"
    return {label: found[label] for label in labels if label in found}


def reference_timers(loaded: LoadedModel, number: int, threads: int,
                     onnx_model: Optional[PathLike] = None
                     ) -> Tuple[Dict[str, Callable[[], float]], Dict[str, np.ndarray]]:
    """Timers of the runtimes TVM is compared with, one round each (the mean of ``number`` runs):
    PyTorch's int8 module when the model came from TorchScript (or the exported program of a PT2E
    model), ONNX Runtime's int8 CPU session
    (on ``threads`` intra-op threads) when it came from ONNX or when ``onnx_model`` (an ONNX export
    of the same network, such as :func:`relay_ext.frontend.onnx_export.export_quantized`) is
    given. ONNX Runtime's threads do not spin after a run here: spinning threads would take the
    cores from the configuration timed next.

    Also the outputs of the timed runtimes that run the model itself but are not its reference:
    ONNX Runtime int8 for an ONNX model, whose reference is the graph as written (an export's
    output is another quantization, and PyTorch's is the reference itself)."""
    from relay_ext.frontend.onnx_reference import OnnxRuntimeReference, onnxruntime_timer

    timers: Dict[str, Callable[[], float]] = {}
    outputs: Dict[str, np.ndarray] = {}
    if loaded.torchscript is not None:
        timers[PYTORCH] = torch_timer(loaded.torchscript, loaded.example_input, number)
    # A PT2E program (frontend.pt2e_import): PyTorch running the exported program is the reference.
    program_module = getattr(loaded.reference, "torch_module", None)
    # Labelled eager: PyTorch Inductor's row (.peers) runs the same program compiled.
    if loaded.torchscript is None and program_module is not None:
        timers[eager_label(loaded)] = torch_timer(program_module, loaded.example_input, number)
    own = isinstance(loaded.reference, OnnxRuntimeReference)
    onnx = loaded.reference if own else onnx_model
    if onnx is not None:
        output, timers[ONNX_RUNTIME] = onnxruntime_timer(onnx, loaded.inputs, number, threads,
                                                         allow_spinning=False)
        if own:
            outputs[ONNX_RUNTIME] = output
    return timers, outputs


def measure_latency(loaded: LoadedModel, database: Optional[ms.Database],
                    target: TargetLike = "llvm",
                    variant: str = "ours", repeats: int = 10, number: int = 10,
                    threads: Optional[int] = None,
                    onnx_model: Optional[PathLike] = None,
                    never_slower: bool = True, peers: bool = True,
                    builtin_model: Optional[str] = None,
                    cache_path: Optional[PathLike] = None) -> BenchResult:
    """Compile ``loaded`` with ``database``'s records and with TVM's defaults, check both builds'
    outputs against the model's reference runtime (PyTorch, or ONNX Runtime for an ONNX model)
    in output quantization steps, and time them beside :func:`reference_timers` on the same input
    with the same thread count: median of ``repeats`` interleaved rounds, each round timing every
    configuration once as the mean of ``number`` runs.

    ``database`` None (bench without a work dir): the main row is the no-search build
    (:func:`relay_ext.build.whole_model.compile_no_search`, label :data:`NO_SEARCH`) instead of
    the tuned one. With a database, the no-search build is timed too, beside the tuned one, which
    takes for each task the faster of its tuned record and its no-search schedule
    (:func:`relay_ext.build.whole_model.compile_builds`).

    ``cache_path``: the never-slower rule's timing cache
    (:data:`relay_ext.workdir.files.NEVER_SLOWER_FILE` in the work dir): a second bench with
    the same records, target and threads times no task again.

    ``never_slower``: a task whose best record runs slower than TVM's default schedule of the
    task (both timed here with ``threads`` threads) is compiled with the default
    (:mod:`relay_ext.schedules.task_choice`); the result's ``tasks_vs_default`` lists them all.

    ``peers``: also time OpenVINO and PyTorch Inductor (:func:`.peers.peer_timers`: each compiled
    once before the rounds, its output checked against its own reference), on ``onnx_model`` or
    the model's own ONNX file and, for the built-in model ``builtin_model`` (the name
    :func:`relay_ext.frontend.models.load` took), its float network through torchao's PT2E flow
    (a ``.pt2`` model: its program)."""
    if loaded.output_scale is None:
        raise ValueError(f"model {loaded.name!r} is not quantized (no output scale)")
    target, variant = normalize_target(target), check_variant(variant)
    check_runs_here(target)  # timing code this CPU cannot execute would kill the process
    threads = int(threads or os.cpu_count() or 1)
    load = load_average()  # before our own compile adds to it
    comparisons = None
    main = TUNED if database is not None else NO_SEARCH
    # One extraction, one generation of the no-search designs and one set of timings for both
    # builds: with a work dir the tuned row takes, task by task, the faster of the tuned record
    # and the no-search schedule (relay_ext.build.whole_model).
    built = with_tvm_threads(threads, lambda: compile_builds(
        database, loaded.mod, loaded.params, target, variant, never_slower, cache_path))
    kept = built.tuned_kept if database is not None else built.no_search_kept
    comparisons = None if kept is None else kept.comparisons
    libs = {TUNED: built.tuned} if database is not None else {}
    libs[NO_SEARCH] = built.no_search
    libs[UNTUNED] = build_default(loaded.mod, loaded.params, target)

    old_torch_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with TVMThread(threads) as tvm_thread:
            outputs, timers = {}, {}
            for label, lib in libs.items():
                outputs[label], timers[label] = tvm_thread.tvm_timer(lib, loaded.inputs, number)
            reference_clocks, runtime_outputs = reference_timers(loaded, number, threads, onnx_model)
            timers.update(reference_clocks)
            peer_rows = None
            if peers:
                peer_clocks, peer_rows = peer_timers(loaded, number, threads, onnx_model,
                                                     builtin_model)
                timers.update(peer_clocks)
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
        runtime_steps={label: step_error(output, expected, loaded.output_scale).max_steps
                       for label, output in runtime_outputs.items()},
        tasks_vs_default=comparisons, peers=peer_rows, whole_model=built.whole_model,
        versions=versions(list(samples), peer_rows),
        machine=machine_description(), load_average=load, stolen_share=stolen,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
