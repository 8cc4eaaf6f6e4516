"""What ``quantfuse bench`` measured: :class:`BenchResult` (one :class:`Timing` per row, the
output checks, the per-task choices, the peers' rows), as the CLI prints it and ``--json``
serialises it (:meth:`BenchResult.to_dict`), and the row labels."""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

from relay_ext.build.whole_model import WholeModel
from relay_ext.lowering.targets import host_cpu_flags, vector_flags
from relay_ext.measure.timing import Timing
from relay_ext.peers.registry import saturation_note
from relay_ext.report.layout_transforms import LayoutTransformCount
from relay_ext.schedules.task_choice import TaskVsDefault

TUNED, UNTUNED = "TVM tuned", "TVM untuned"
NO_SEARCH = "TVM no-search"  # bench without a work dir: relay_ext.schedules.rule_designs's build
TVM_ROWS = (TUNED, NO_SEARCH, UNTUNED)

# busy_warning's thresholds (docs/bench.md): a hypervisor stealing more than this share of the
# busy CPU time while the rounds ran, and one configuration's rounds more than this many times
# apart, both well beyond what quiet machines show.
STOLEN_WARNING = 0.05
SPREAD_WARNING = 2.0


@dataclasses.dataclass
class PeerRow:
    """One optional peer runtime in bench: its version, and either how far its output is from its
    own reference (``max_steps``, in that reference's output quantization steps) or why it did not
    run (``reason``, one line)."""

    label: str
    version: Optional[str] = None
    reason: Optional[str] = None
    reference: Optional[str] = None
    max_steps: Optional[float] = None

    @property
    def ran(self) -> bool:
        return self.reason is None

    def line(self) -> str:
        """For people: the check of a peer that ran (with why, where it is more than rounding
        because the peer's int8 kernels saturate on this CPU), or why it did not run."""
        if not self.ran:
            return f"{self.label}: not run: {self.reason}"
        note = (None if self.max_steps is None
                else saturation_note(self.label, self.max_steps, host_cpu_flags()))
        return (f"{self.label} ({self.version}) vs {self.reference}: max {self.max_steps:.2f} "
                "output quantization steps" + (f" ({note})" if note else ""))

    def to_dict(self) -> Dict[str, object]:
        return dataclasses.asdict(self)


def fastest(medians: Dict[str, float]) -> Optional[Tuple[str, float]]:
    """(label, median ms) of the fastest of ``medians``, None when empty."""
    if not medians:
        return None
    label = min(medians, key=medians.__getitem__)
    return label, medians[label]


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
    # The per-task choice (relay_ext.schedules.task_choice): every task with a record (tuned or
    # no-search), its record's time, its no-search schedule's beside a tuned record, and TVM's
    # default schedule's, timed here; each task compiled with the fastest (the default only when
    # it beat both by more than the choice's margin). None: the choice was not made.
    tasks_vs_default: Optional[List[TaskVsDefault]] = None
    # The whole-model check of the tuned build against the no-search build (relay_ext.build.whole_model:
    # the per-task choices, or the no-search build where they ran slower as a whole); None when
    # it was not made (no work dir, --keep-slower-records).
    whole_model: Optional[WholeModel] = None
    # The peer runtimes (OpenVINO, PyTorch Inductor): version, output check or why not run. None:
    # not tried (bench --no-peers).
    peers: Optional[List[PeerRow]] = None
    versions: Dict[str, Optional[str]] = dataclasses.field(default_factory=dict)  # label -> version
    # The main row's build: its layout_transform kernels between two convs, at the input and at
    # the output (relay_ext.report.layout_transforms); None: not counted.
    layout_transforms: Optional[LayoutTransformCount] = None
    # Lines for people about rows left out before timing ("(no ONNX Runtime row: ...)"); not in
    # to_dict.
    notes: List[str] = dataclasses.field(default_factory=list)

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
        """What the per-task choice did, for people (empty when it was not made)."""
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
            note = saturation_note(label, steps, host_cpu_flags())
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
            "layout_transforms": (None if self.layout_transforms is None
                                  else self.layout_transforms.to_dict()),
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
