"""A :class:`~relay_ext.latency.result.BenchResult` for people: the text ``quantfuse bench``
prints (:func:`text_report`), and the ``report.md`` and latency chart it writes into the work dir
(:func:`write_report`)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

from relay_ext.latency.result import BenchResult
from relay_ext.peers.onnx_runtime import ONNX_RUNTIME
from relay_ext.report.tables import markdown_table, text_table
from relay_ext.workdir.files import CHART_FILE, REPORT_FILE


COLORS = ["#2a7", "#999", "#d63", "#36c", "#a5c", "#c93", "#5aa"]


def text_report(result: BenchResult) -> str:
    """What ``quantfuse bench`` prints: what was timed, the output checks, the peers' lines, the
    per-task choices, the table, the fastest peer and any warning that the machine was busy."""
    lines = [
        f"{result.model} {'x'.join(map(str, result.input_shape))} on {result.target}, "
        f"{result.threads} threads, median of {result.repeats} repeats x {result.number} runs",
        f"{result.main} vs {result.reference}: max {result.max_steps:.2f} output quantization "
        f"steps apart (mean {result.mean_steps:.3f}, {100 * result.fraction_equal:.1f}% equal); "
        f"untuned: {result.untuned_max_steps:.2f}",
        *result.runtime_lines(), *result.peer_lines(), *result.default_lines(),
        "",
        text_table(result.header, result.rows()),
    ]
    if result.summary_line():
        lines += ["", result.summary_line()]
    if result.busy_warning:
        lines += ["", result.busy_warning]
    return "\n".join(lines)


def write_chart(result: BenchResult, path: Path) -> Path:
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # pylint: disable=import-outside-toplevel

    labels = [row[0] for row in result.rows()]
    timings = list(result.timings.values())
    fig, ax = plt.subplots(figsize=(1.5 + 1.5 * len(labels), 3.5))
    bars = ax.bar(labels, [t.median_ms for t in timings],
                  color=(COLORS * len(labels))[:len(labels)],
                  yerr=[[t.median_ms - 1e3 * min(t.seconds) for t in timings],
                        [1e3 * max(t.seconds) - t.median_ms for t in timings]], capsize=4)
    ax.bar_label(bars, fmt="%.3f ms", padding=2)
    ax.set_ylabel("latency, ms (median; bars: min-max)")
    ax.set_title(f"{result.model} {'x'.join(map(str, result.input_shape))}, "
                 f"{result.threads} threads")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report_markdown(result: BenchResult) -> str:
    rows = result.rows()
    runtimes = " and ".join(["TVM", *[r.replace(" int8", "") for r in result.references]])
    lines = [
        f"# quantfuse bench: {result.model}", "",
        f"- Input shape {'x'.join(map(str, result.input_shape))}, batch 1; target `{result.target}`; "
        f"rule set `{result.variant}`.",
        f"- {result.threads} threads for {runtimes}; median of {result.repeats} repeats, "
        f"each the mean of {result.number} runs (TVM: `time_evaluator`), timed in interleaved "
        "rounds.",
        f"- Machine: {result.machine}. Date: {result.date}. Load average before the bench: "
        f"{'unknown' if result.load_average is None else f'{result.load_average:.2f}'}.",
        "- A built-in model's weights are random (fixed seed) and it was calibrated on random "
        "data: the numbers measure speed and agreement, not accuracy on a dataset.",
        f"- {result.main} vs {result.reference}: max {result.max_steps:.2f} output quantization steps "
        f"apart (mean {result.mean_steps:.3f}, {100 * result.fraction_equal:.1f}% of outputs "
        f"equal); TVM untuned: max {result.untuned_max_steps:.2f} steps.",
        *[f"- {line}." for line in result.runtime_lines() + result.peer_lines()],
        *[f"- {line}" if not line.startswith("  ") else f"  - {line.strip()}"
          for line in result.default_lines()],
        "",
        markdown_table(result.header, rows),
    ]
    if result.summary_line():
        lines += ["", f"**{result.summary_line()[0].upper()}{result.summary_line()[1:]}.**"]
    if result.busy_warning:
        lines += ["", f"**{result.busy_warning}**"]
    if ONNX_RUNTIME in result.timings and ONNX_RUNTIME not in result.runtime_steps:
        lines += ["", "ONNX Runtime runs an export of the same float network quantized by ONNX "
                  "Runtime's own `quantize_static`: another quantization, so its outputs are not "
                  "compared in steps with TVM's (OpenVINO, which reads the same file, is compared "
                  "with ONNX Runtime running it as written)."]
    lines += ["", "Ratios are median / median: above 1 is slower than the column's reference.", "",
              f"![latency]({CHART_FILE})", ""]
    return "\n".join(lines)


def write_report(result: BenchResult, work_dir) -> Dict[str, Path]:
    """``report.md`` and the PNG chart in ``work_dir``; returns their paths."""
    work_dir = Path(work_dir)
    chart = write_chart(result, work_dir / CHART_FILE)
    report = work_dir / REPORT_FILE
    report.write_text(report_markdown(result))
    return {"report": report, "chart": chart}
