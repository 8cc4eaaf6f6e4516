"""A :class:`~relay_ext.latency.profile_result.Profile` for people: the table ``quantfuse profile``
prints (:func:`profile_text`) and its bar chart (:func:`write_profile_chart`, a PNG)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Union

from relay_ext.latency.profile_result import BETWEEN_KERNELS, Profile
from relay_ext.report.tables import text_table

PROFILE_CHART_FILE = "profile.png"  # in the work dir, unless a path is given
NAME_WIDTH = 60  # a fused op's name is cut to this in the printed table (the JSON has it whole)
CHART_BARS = 24  # the slowest fused ops drawn; the rest are one bar


def short_name(name: str, width: int = NAME_WIDTH) -> str:
    """``name`` cut in the middle to ``width`` characters: its start says what it fuses, its end
    tells apart ops of the same start (``..._1``, ``..._2``)."""
    if len(name) <= width:
        return name
    tail = (width - 3) // 2
    return name[:width - 3 - tail] + "..." + name[-tail:]


def chart_label(row) -> str:
    """A bar's label: the convolution a fused op runs (with its calls), else its name."""
    if row.layer:
        return row.layer + (f" (x{row.calls})" if row.calls > 1 else "")
    return short_name(row.name, 44)


def _ms(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def profile_header(profile: Profile) -> List[str]:
    header = ["fused op", "calls", "ms", "share", "layer", "schedule", "kernel"]
    if profile.vnni_peak_gmacs is not None:
        header.append("of VNNI peak")
    if profile.openvino is not None:
        header += ["OpenVINO ms", "OpenVINO kernel"]
    return header


def profile_rows(profile: Profile) -> List[List[str]]:
    """One line per fused op, slowest first, then the executor's share and the totals."""
    with_openvino = profile.openvino is not None
    with_peak = profile.vnni_peak_gmacs is not None
    lines = []
    for row in profile.rows:
        line = [short_name(row.name), str(row.calls), _ms(row.ms), f"{100 * row.share:.1f}%",
                row.layer or "-", row.schedule or "-",
                row.kernel + (f" ({row.design})" if row.design else "") if row.kernel else
                (row.design or "-")]
        if with_peak:
            share = profile.peak_share(row)
            line.append("-" if share is None else f"{100 * share:.0f}%")
        if with_openvino:
            line += [_ms(row.openvino_ms), row.openvino_kernel or "-"]
        lines.append(line)
    run = profile.run_ms or 1.0

    def total(name, ms, share="", openvino_ms="", openvino_text=""):
        return ([name, "", ms, share, "", "", ""] + ([""] if with_peak else [])
                + ([openvino_ms, openvino_text] if with_openvino else []))

    between = profile.between_kernels_ms
    lines.append(total(BETWEEN_KERNELS, _ms(between), f"{100 * between / run:.1f}%"))
    side = profile.openvino
    if side is not None:
        lines.append(total("OpenVINO layers paired with no fused op", "", "",
                           _ms(sum(layer.ms for layer in side.unpaired)),
                           f"{len(side.unpaired)} layers"))
    lines.append(total("sum of the fused ops", _ms(profile.layers_ms),
                       f"{100 * profile.layers_ms / run:.1f}%",
                       _ms(side.layers_ms) if side else "", "sum of its layers" if side else ""))
    lines.append(total("one profiled run (debug executor)", _ms(profile.run_ms), "100.0%"))
    lines.append(total("whole model, no profiler (as bench)", _ms(profile.model_ms), "",
                       _ms(side.model_ms) if side else "", "no counters" if side else ""))
    return lines


def peak_line(profile: Profile) -> str:
    """One line: this host's measured VNNI peak, the VNNI convs' multiply-adds, the least time
    they take at the peak and the time they took; or why there is no peak."""
    if profile.vnni_peak_gmacs is None:
        return f"no VNNI peak: {profile.vnni_peak_note}"
    line = (f"VNNI peak of this host, measured: {profile.vnni_peak_gmacs:.0f} G int8 "
            f"multiply-adds/s on {profile.threads} threads")
    convs = profile.vnni_convs()
    took = sum(row.ms for row in convs)
    if took <= 0:
        return line + "; no VNNI conv timed"
    floor = profile.vnni_floor_ms() or 0.0
    line = (f"{line}; the {len(convs)} VNNI convs' {sum(row.macs for row in convs) / 1e9:.3f} G "
            f"multiply-adds (channels as TVM pads them) take {floor:.3f} ms at it, they took "
            f"{took:.3f} ms ({100 * floor / took:.0f}% of the peak)")
    above = [row for row in convs if (profile.peak_share(row) or 0.0) > 1.0]
    if above:  # no kernel outruns the instruction: a timing that cannot be right
        line += (f"; {len(above)} ran above the peak: timed while the host was busy, or too "
                 "short (a few microseconds) to time closely")
    return line


def profile_text(profile: Profile) -> str:
    """What ``quantfuse profile`` prints: what was profiled, the table, OpenVINO's side (or why
    it is absent) and where the chart went (or why there is none)."""
    shape = "x".join(map(str, profile.input_shape))
    lines = [f"{profile.model} {shape} on {profile.target}, {profile.threads} threads, TVM "
             f"{profile.schedule} build ({profile.variant}); median of {profile.rounds} profiled "
             "runs (TVM's debug executor)"]
    if profile.openvino is not None:
        lines.append(f"OpenVINO {profile.openvino.version} on {profile.openvino.onnx_file}: its own "
                     "per-layer counters (PERF_COUNT), convolutions paired by shape")
    else:
        lines.append(f"no OpenVINO column: {profile.openvino_note}")
    lines += ["", text_table(profile_header(profile), profile_rows(profile))]
    if profile.openvino is not None and profile.openvino.unpaired:
        largest = sorted(profile.openvino.unpaired, key=lambda layer: -layer.ms)[:5]
        lines += ["", "OpenVINO layers paired with no fused op, largest: " + "; ".join(
            f"{short_name(layer.name, 40)} {layer.part} {layer.ms:.3f} ms" for layer in largest)]
    lines += ["", peak_line(profile)]
    slowed = profile.slowed_by()
    if slowed is not None:
        lines += ["", f"the fused ops' times add up to {slowed:.2f}x the whole model's latency "
                  f"without the profiler ({profile.layers_ms:.3f} against {profile.model_ms:.3f} "
                  "ms): the profiled runs were slowed (another process, or the host's noise); "
                  "read the rows against each other, or profile again on a quiet host"]
    if profile.chart_note:
        lines += ["", profile.chart_note]
    return "\n".join(lines)


def write_profile_chart(profile: Profile, path: Union[str, os.PathLike]) -> Path:
    """A horizontal bar chart of the slowest fused ops' times inside the model (OpenVINO's paired
    layers beside them where the profile has them) as a PNG at ``path``; ImportError without
    matplotlib."""
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # pylint: disable=import-outside-toplevel

    rows = profile.rows[:CHART_BARS]
    labels = [chart_label(row) for row in rows]
    tvm_ms = [row.ms for row in rows]
    rest = profile.rows[CHART_BARS:]
    if rest:
        labels.append(f"{len(rest)} other fused ops")
        tvm_ms.append(sum(row.ms for row in rest))
    labels.append(BETWEEN_KERNELS)
    tvm_ms.append(profile.between_kernels_ms)
    positions = list(range(len(labels)))
    with_openvino = profile.openvino is not None
    height = 0.4 if with_openvino else 0.8
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.32 * len(labels)))
    ax.barh([p - height / 2 if with_openvino else p for p in positions], tvm_ms, height=height,
            color="#2a7", label=f"TVM {profile.schedule}")
    if with_openvino:
        openvino_ms = [row.openvino_ms or 0.0 for row in rows] + ([0.0] if rest else []) + [0.0]
        ax.barh([p + height / 2 for p in positions], openvino_ms, height=height, color="#36c",
                label="OpenVINO, paired layers")
        ax.legend(loc="lower right")
    ax.set_yticks(positions, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms per run of the model (median)")
    ax.set_title(f"{profile.model} {'x'.join(map(str, profile.input_shape))}, {profile.threads} "
                 f"threads: {profile.layers_ms:.3f} ms in TVM's kernels, "
                 f"{profile.run_ms:.3f} ms per profiled run", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
