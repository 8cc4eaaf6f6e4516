"""TVM's own words from a TVM error: the message without its backtrace.

A TVMError's text is a C++ backtrace followed by the message, sometimes a whole IR dump too::

    Traceback (most recent call last):
      2: tvm::runtime::PackedFuncObj::Extractor<...>::Call(...)
      0: tvm::tir::ConcreteScheduleNode::ComputeInline(tvm::tir::BlockRV const&) [clone .cold]
      File "/project/tvm/src/meta_schedule/schedule_rule/multi_level_tiling_tensor_core.cc", line 212
    InternalError: Check failed: (data_ != nullptr) is false:

:func:`tvm_error_message` returns ``InternalError: Check failed: (data_ != nullptr) is false``;
for a ScheduleError the sentence after ``Error message:``. Everything quantfuse reports from a TVM
error (logs, tuning summaries, the CLI's one error line) goes through it.
"""

from __future__ import annotations

import re

# "Traceback (most recent call last):", numbered C++ frames "12: tvm::...", "File ...", "at ..."
_FRAME = re.compile(r'^(Traceback \(most recent call last\):|\d+: |File "|at )')
# A line that names what went wrong: "InternalError: ...", "ValueError: ...", "Check failed: ..."
_NAMED = re.compile(r"^(\w*(Error|Exception|Warning)\b:?|Check failed)")
_SCHEDULE_MESSAGE = "Error message:"


def tvm_error_message(error: BaseException, limit: int = 300) -> str:
    """The line of ``error`` that says what went wrong, with its error type, at most ``limit``
    characters; never the backtrace."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    kind = type(error).__name__
    for line in lines:
        if line.startswith(_SCHEDULE_MESSAGE):  # a ScheduleError after its IR dump
            return _cut(f"{kind}: {line[len(_SCHEDULE_MESSAGE):].strip()}", limit)
    named = [i for i, line in enumerate(lines) if _NAMED.match(line) and not _FRAME.match(line)]
    if named:  # the message follows the backtrace: the last such line
        return _cut(lines[named[-1]].rstrip(": ").strip(), limit)
    meaningful = [line for line in lines if not _FRAME.match(line)]
    if not meaningful:
        return kind
    return _cut(f"{kind}: {meaningful[0]}", limit)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."
