"""Tuning progress for people: a bar redrawn in place on a terminal, one line per batch otherwise."""

from __future__ import annotations

from typing import TextIO

from relay_ext.tuning.progress import ProgressSnapshot, progress_bar


class ProgressPrinter:
    """Shows each :class:`ProgressSnapshot` of a tune on ``stream``."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.interactive = hasattr(stream, "isatty") and stream.isatty()
        self.drawn = False

    def show(self, snapshot: ProgressSnapshot) -> None:
        line = progress_bar(snapshot)
        if self.interactive:
            self.stream.write("\r" + line.ljust(100)[:160])
            self.drawn = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False
