"""The one table writer of quantfuse (text for terminals, Markdown for reports) and the machine
description every report carries."""

from __future__ import annotations

import os
import platform
from typing import Sequence


def text_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell, a rule under the header."""
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(str(c) for c in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine_description() -> str:
    """The CPU model, core count, memory, OS and Python of this machine, for reports."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            fields = dict(ln.split(":", 1) for ln in f.read().split("\n\n")[0].splitlines()
                          if ":" in ln)
        fields = {key.strip(): value.strip() for key, value in fields.items()}
        if fields.get("model name"):
            cpu = fields["model name"]
        if fields.get("cpu family") and fields.get("model"):
            # VMs often name only the vendor ("Intel(R) Xeon(R) Processor"): the family and
            # model number tell the generations apart (6/143 Sapphire Rapids, 6/207 Emerald Rapids)
            cpu += f" (family {fields['cpu family']} model {fields['model']})"
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{cpu}, {os.cpu_count()} logical CPUs, {mem_gib:.0f} GiB, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}")
