"""TVM's native log lines, kept out of the terminal: file descriptor 2 goes to a file for a while.

TVM's C++ ``LOG(WARNING)`` (and LLVM's own messages) write straight to the process's file
descriptor 2, beside everything Python prints to ``sys.stderr``: a tune prints dozens of
``apply_custom_rule.cc: Warning: Unknown schedule rule ...`` lines around the CLI's own. While
:func:`native_log_to` is active, descriptor 2 (inherited by MetaSchedule's builder and runner
processes) goes to a file, and Python's ``sys.stderr`` and the logging handlers that wrote to it
go on writing to the terminal through a copy of the original descriptor.

    with native_log_to(Path("w/logs/tvm.log")) as log:
        ...                                  # TVM work
    log.summary()  # "41 TVM warnings, in w/logs/tvm.log" (None when nothing was written)
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import sys
from pathlib import Path
from typing import Iterator, List, Optional, TextIO

# TVM's log prefix: "[12:34:56] /path/to/file.cc:123: Warning: ..."
_TVM_LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] \S+:\d+: (?:(\w+): )?")


@dataclasses.dataclass
class NativeLog:
    """What was captured: the file, and counts of the lines written to it during the capture."""

    path: Path
    warnings: int = 0
    other_tvm: int = 0
    other_lines: int = 0

    def count(self, text: str) -> None:
        """Count TVM's messages (an indented line continues the message above it) and the rest."""
        in_message = False
        for line in text.splitlines():
            match = _TVM_LINE.match(line)
            if match:
                in_message = True
                if (match.group(1) or "").lower() == "warning":
                    self.warnings += 1
                else:
                    self.other_tvm += 1
            elif in_message and line[:1].isspace():
                continue
            elif line.strip():
                in_message = False
                self.other_lines += 1

    def summary(self) -> Optional[str]:
        """One line for people, or None when nothing was written."""
        parts = []
        if self.warnings:
            parts.append(f"{self.warnings} TVM warning{'s' if self.warnings != 1 else ''}")
        if self.other_tvm:
            parts.append(f"{self.other_tvm} other TVM message{'s' if self.other_tvm != 1 else ''}")
        if self.other_lines:
            parts.append(f"{self.other_lines} other line{'s' if self.other_lines != 1 else ''} of "
                         "native output")
        if not parts:
            return None
        return f"{', '.join(parts)}, in {self.path}"


@contextlib.contextmanager
def native_log_to(path: Path) -> Iterator[NativeLog]:
    """Send file descriptor 2 to ``path`` (appended) while the block runs; ``sys.stderr`` and the
    logging handlers writing to it keep the terminal. Yields a :class:`NativeLog` whose counts
    are filled in when the block ends."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    log = NativeLog(path)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    start = path.stat().st_size if path.exists() else 0
    saved_fd = os.dup(2)
    terminal = _python_stderr_on_fd2(saved_fd)
    moved = _move_handlers(terminal) if terminal is not None else []
    sink = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(sink, 2)
    os.close(sink)
    try:
        yield log
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os.dup2(saved_fd, 2)
        os.close(saved_fd)
        if terminal is not None:
            _restore(terminal, moved)
        with open(path, "rb") as written:
            written.seek(start)
            log.count(written.read().decode(errors="replace"))


@dataclasses.dataclass
class _Terminal:
    original: TextIO
    replacement: TextIO


def _python_stderr_on_fd2(saved_fd: int) -> Optional[_Terminal]:
    """When ``sys.stderr`` writes to descriptor 2, point it at a copy of the original one."""
    try:
        if sys.stderr.fileno() != 2:
            return None
    except (AttributeError, OSError, ValueError):  # replaced already (pytest's capsys, a StringIO)
        return None
    replacement = open(os.dup(saved_fd), "w", buffering=1,  # noqa: SIM115 - closed in _restore
                       encoding=sys.stderr.encoding or "utf-8", errors="backslashreplace")
    terminal = _Terminal(sys.stderr, replacement)
    sys.stderr = replacement
    return terminal


def _move_handlers(terminal: _Terminal) -> List[logging.StreamHandler]:
    moved = []
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is terminal.original:
            handler.setStream(terminal.replacement)
            moved.append(handler)
    return moved


def _restore(terminal: _Terminal, moved: List[logging.StreamHandler]) -> None:
    for handler in moved:
        handler.setStream(terminal.original)
    sys.stderr = terminal.original
    terminal.replacement.close()
