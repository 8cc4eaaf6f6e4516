"""The fusion report as a table: one row per task, a TOTAL row, and TVM's reasons for the tasks
whose design spaces could not be generated or measured (a failed cell points at its reason:
``failed [1]``).

    print(text_table(FUSION_HEADER(report), fusion_rows(report)))
    Path("fusion.md").write_text(fusion_markdown(report, "resnet50 (NCHW)"))
    layout_line(report)   # "layout_transform: 0 between convs, 1 at the input, 1 at the output"
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from relay_ext.report.fusion import DESIGN_SPACE, FusionReport, VariantResult
from relay_ext.report.tables import markdown_table
from relay_ext.schedules.topi_only import TOPI_SCHEDULE


def fusion_header(report: FusionReport) -> List[str]:
    return ["task", "anchor", *report.variants]


def human_bytes(n: float) -> str:
    """``2048`` -> ``"2.0 KiB"``."""
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def failure_reasons(report: FusionReport) -> List[Tuple[str, str]]:
    """``(where, TVM's reason)`` for the tasks that failed, each once, in table order; ``where`` is
    :data:`~relay_ext.report.fusion.DESIGN_SPACE` or :data:`~relay_ext.report.fusion.MEASURE`."""
    reasons = [_failure(task.variants[v]) for task in report.tasks for v in report.variants]
    return list(dict.fromkeys(r for r in reasons if r is not None))


def failure_notes(report: FusionReport) -> List[str]:
    """``[n] <why>`` for each of :func:`failure_reasons`, naming the tasks it struck."""
    notes = []
    for n, (where, reason) in enumerate(failure_reasons(report), 1):
        tasks = list(dict.fromkeys(task.name for task in report.tasks for v in report.variants
                                   if _failure(task.variants[v]) == (where, reason)))
        if where == DESIGN_SPACE:
            notes.append(f"[{n}] TVM could not generate design spaces (tried other random states "
                         f"and without the failing rule): {reason}")
        else:
            notes.append(f"[{n}] the fusion measure failed on task {', '.join(tasks)} (this is a "
                         f"quantfuse bug; rerun with --verbose for the traceback): {reason}")
    return notes


def _failure(result: VariantResult):
    return None if result.failed is None else (result.failed_in or DESIGN_SPACE, result.failed)


def fusion_rows(report: FusionReport) -> List[List[str]]:
    """Per task: name, anchor op and per variant ``intermediates (bytes)`` (or why there is none);
    then the TOTAL row (failed tasks and those that keep TOPI's schedule counted apart)."""
    reasons = failure_reasons(report)

    def cell(result: VariantResult) -> str:
        if result.failed is not None:
            return f"failed [{reasons.index(_failure(result)) + 1}]"
        if result.generation == TOPI_SCHEDULE:
            return TOPI_SCHEDULE
        return f"{result.intermediates} ({human_bytes(result.bytes)})"

    rows = [[task.name if len(task.name) <= 60 else task.name[:57] + "...", task.anchor]
            + [cell(task.variants[v]) for v in report.variants] for task in report.tasks]
    totals = report.totals
    rows.append(["TOTAL", f"{len(report.tasks)} tasks"]
                + [f"{totals[v]['intermediates']} ({human_bytes(totals[v]['bytes'])}) in "
                   f"{totals[v]['tasks_with_intermediates']} tasks"
                   + (f"; {totals[v]['tasks_failed']} failed" if totals[v]["tasks_failed"] else "")
                   + (f"; {totals[v]['tasks_topi_schedule']} keep {TOPI_SCHEDULE}"
                      if totals[v]["tasks_topi_schedule"] else "")
                   for v in report.variants])
    return rows


def layout_line(report: FusionReport) -> Optional[str]:
    """The graph's ``layout_transform`` kernel runs per inference, between two convs (named), at
    the input and at the output; None when the report did not count them."""
    return None if report.layout_transforms is None else report.layout_transforms.line()


def fusion_markdown(report: FusionReport, title: str) -> str:
    """The whole report as a Markdown document."""
    lines = [f"# Fusion report: {title}", "", f"Target: `{report.target}`", "",
             "Global-memory intermediates of each task's worst design space, and the bytes of "
             "global traffic they cost (write + read).", "",
             markdown_table(fusion_header(report), fusion_rows(report))]
    notes = failure_notes(report)
    if notes:
        lines += ["", *[f"- {note}" for note in notes]]
    layout = layout_line(report)
    if layout is not None:
        lines += ["", f"Layout copies (kernel runs per inference): {layout}"]
    return "\n".join(lines) + "\n"
