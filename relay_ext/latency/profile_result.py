"""What ``quantfuse profile`` found: :class:`Profile`, one :class:`ProfileRow` per fused op of
TVM's build, with the OpenVINO layers paired with it, and the totals; its JSON form
(:meth:`Profile.to_json`, :meth:`Profile.from_json`)."""

from __future__ import annotations

import dataclasses
import json
from typing import Dict, List, Optional

# The executor's own time in a profiled run: what the kernels' times leave of the run's total.
BETWEEN_KERNELS = "executor, between kernels"
# The fused ops' times, summed, over the model's latency without the profiler, above which the
# profiled runs ran slower than the model does (inside the model the kernels' sum stays near or
# below the whole: 0.87-1.08x on quiet hosts, 1.4-1.9x in runs the VM slowed).
SLOWED = 1.25


@dataclasses.dataclass
class ProfileRow:
    """One fused op (a kernel of TVM's build, named as the build names it) inside the model.

    ``ms``: its time in one run of the model, all its calls together (median over the profiled
    runs); ``share``: of the debug executor's total for the run. ``layer``: the convolution it
    runs, as TVM runs it (channels padded; None: not a conv), read from the task whose fused
    function the kernel runs, as ``schedule`` and ``design`` are. ``schedule``: what built it
    ("tuned", "no-search" or "default": TVM's own); ``design``: the rule design's kind where
    that built it ("vnni tensorized", "amx", "tiled" ...); ``kernel``: the int8 instructions in its code ("AMX",
    "VNNI xN", "vpmaddubsw", "no int8 dot"). ``openvino_layers``: the OpenVINO nodes that run the
    same convolutions (one per call), their summed time ``openvino_ms`` and their kernels.
    ``macs``: the multiply-adds of its convolution, all its calls together, as TVM runs them
    (:func:`relay_ext.latency.layer_pairing.conv_macs`; None: not a conv)."""

    name: str
    ms: float
    share: float
    calls: int
    layer: Optional[str] = None
    schedule: Optional[str] = None
    design: Optional[str] = None
    kernel: Optional[str] = None
    openvino_layers: List[str] = dataclasses.field(default_factory=list)
    openvino_ms: Optional[float] = None
    openvino_kernel: Optional[str] = None
    macs: Optional[int] = None

    @property
    def is_vnni_conv(self) -> bool:
        """Whether it runs a conv (its multiply-adds known) with VNNI's ``vpdpbusd`` (its kernel
        reads ``VNNI xN``): a row that can be set against the VNNI peak."""
        return bool(self.macs) and bool(self.kernel) and self.kernel.startswith("VNNI")

    @property
    def ms_per_call(self) -> float:
        return self.ms / self.calls if self.calls else 0.0


@dataclasses.dataclass
class OpenVINOLayer:
    """An OpenVINO node no fused op of TVM's was paired with: what it is (``part``: its layer
    type and kernel) and its median time per inference."""

    name: str
    part: str
    ms: float


@dataclasses.dataclass
class OpenVINOSide:
    """OpenVINO's own counters on the same network: its version, the ONNX file it read, the sum
    of its nodes' times, its whole-model latency without counters, and the nodes left unpaired
    (not a convolution, or a convolution of no TVM fused op's shape)."""

    version: str
    onnx_file: str
    layers_ms: float
    model_ms: float
    unpaired: List[OpenVINOLayer] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Profile:
    """Where the model's time goes inside TVM's build (``schedule``: "tuned" or "no-search"),
    fused op by fused op, slowest first.

    ``layers_ms``: the rows' sum; ``run_ms``: the debug executor's total for one run (the kernels
    and the executor's own work between them); ``model_ms``: the model's latency in the plain
    graph executor, as bench times it (no profiler). ``openvino``: OpenVINO's side, or None with
    the reason in ``openvino_note``. ``chart``: the PNG written, or None with ``chart_note``.
    ``vnni_peak_gmacs``: the int8 multiply-adds per second (in G) this host's VNNI dot product
    can do on ``threads`` threads (:mod:`relay_ext.measure.dot_peak`), measured where a conv
    uses VNNI, else None with the reason in ``vnni_peak_note``."""

    model: str
    input_shape: List[int]
    target: str
    schedule: str
    variant: str
    threads: int
    rounds: int
    rows: List[ProfileRow]
    layers_ms: float
    run_ms: float
    model_ms: float
    openvino: Optional[OpenVINOSide] = None
    openvino_note: Optional[str] = None
    chart: Optional[str] = None
    chart_note: Optional[str] = None
    machine: str = ""
    date: str = ""
    load_average: Optional[float] = None
    vnni_peak_gmacs: Optional[float] = None
    vnni_peak_note: Optional[str] = None

    def peak_share(self, row: ProfileRow) -> Optional[float]:
        """The share of the VNNI peak that ``row``'s conv ran at (its multiply-adds per second
        over the peak), or None: no peak, not a conv, or no VNNI in its code."""
        if self.vnni_peak_gmacs is None or not row.is_vnni_conv or row.ms <= 0:
            return None
        return row.macs / (row.ms * 1e6) / self.vnni_peak_gmacs

    def vnni_convs(self) -> List[ProfileRow]:
        """The rows of convs whose code uses VNNI (the rows :meth:`peak_share` rates)."""
        return [row for row in self.rows if row.is_vnni_conv]

    def vnni_floor_ms(self) -> Optional[float]:
        """The least time the VNNI convs' multiply-adds take at the peak, in ms (None: no peak)."""
        if self.vnni_peak_gmacs is None:
            return None
        return sum(row.macs for row in self.vnni_convs()) / (self.vnni_peak_gmacs * 1e6)

    @property
    def between_kernels_ms(self) -> float:
        """The executor's own time in a profiled run: the run's total less its kernels'."""
        return max(0.0, self.run_ms - self.layers_ms)

    def slowed_by(self) -> Optional[float]:
        """The fused ops' times, summed, as a multiple of the model's latency without the
        profiler where that is above :data:`SLOWED` (the profiled runs were slowed: another
        process, or the host's noise); None where the two agree."""
        if self.model_ms <= 0 or self.layers_ms <= SLOWED * self.model_ms:
            return None
        return self.layers_ms / self.model_ms

    def row(self, name: str) -> ProfileRow:
        """The row of fused op ``name``; KeyError naming the ops there are."""
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no fused op {name!r}; the profile has {[r.name for r in self.rows]}")

    def to_dict(self) -> Dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """The profile as one JSON object (what ``quantfuse profile --json`` prints)."""
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: Dict) -> "Profile":
        fields = dict(data)
        fields["rows"] = [ProfileRow(**row) for row in fields["rows"]]
        side = fields.get("openvino")
        if side is not None:
            fields["openvino"] = OpenVINOSide(**{**side, "unpaired": [
                OpenVINOLayer(**layer) for layer in side.get("unpaired", [])]})
        return cls(**fields)

    @classmethod
    def from_json(cls, text: str) -> "Profile":
        """The profile :meth:`to_json` wrote."""
        return cls.from_dict(json.loads(text))
