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
from typing import Optional, Tuple

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


# TVM errors that are about the user's setup, not quantfuse's code: an RPC server or tracker.
_ENVIRONMENT_ERRORS = ("RPCError", "RPCSessionTimeoutError")
_SOURCE_FILE = re.compile(r'File "[^"]*?/?(src/[^"]+)", line (\d+)')
# A Relay op's type relation in a C++ frame: "1: tvm::relay::qnn::QnnConv2DRel(...)"
_TYPE_RELATION = re.compile(r"tvm::relay::(qnn::)?(\w+?)Rel\(")


class QuantfuseBug(RuntimeError):
    """A TVM failure that nothing the user gave explains, raised where quantfuse knows what it was
    doing (``where``: the op, the task or the step). ``str()`` is one line::

        importing model.pt2 (TVM's src/relay/qnn/op/requantize.cc:75): InternalError: Check
        failed: ...: this is a quantfuse bug
    """

    def __init__(self, where: str, cause: BaseException) -> None:
        self.where = where
        self.cause = cause
        op, site = tvm_error_op(cause), tvm_error_site(cause)
        located = (f"{where}: Relay op {op[0]} (TVM's type relation {op[1]})" if op
                   else f"{where} (TVM's {site})" if site else where)
        super().__init__(f"{located}: {tvm_error_message(cause)}: this is a quantfuse bug")


def is_tvm_failure(error: BaseException) -> bool:
    """Whether ``error`` is TVM's own failure (a check failed, an internal or diagnostic error),
    not one of its RPC errors, which say the user's server or tracker is gone."""
    from tvm.error import TVMError  # pylint: disable=import-outside-toplevel

    return isinstance(error, TVMError) and type(error).__name__ not in _ENVIRONMENT_ERRORS


def check_failure(error: BaseException) -> Optional[BaseException]:
    """The TVM check failure (``InternalError`` or "Check failed") that ``error`` is or was raised
    from, else None: a frontend that wraps TVM's failure in its own ValueError stays a bug, an op
    TVM does not implement (``OpNotImplemented``) stays the user's limit."""
    from tvm.error import InternalError  # pylint: disable=import-outside-toplevel

    seen = error
    while seen is not None:
        if isinstance(seen, InternalError) or (
                is_tvm_failure(seen) or isinstance(seen, ValueError)) and "Check failed" in str(seen):
            return seen
        seen = seen.__cause__
    return None


def tvm_error_site(error: BaseException) -> str:
    """``src/<file>:<line>`` of TVM's source where ``error`` was raised (its last ``File`` line),
    or ``""`` when the error does not say."""
    found = _SOURCE_FILE.findall(str(error))
    return f"{found[-1][0]}:{found[-1][1]}" if found else ""


def tvm_error_op(error: BaseException) -> Optional[Tuple[str, str]]:
    """``("qnn.conv2d", "QnnConv2DRel")`` when ``error`` was raised in a Relay op's type relation
    (the op's type check: an argument of the wrong shape or dtype), else None."""
    found = _TYPE_RELATION.search(str(error))
    if not found:
        return None
    qnn, name = found.group(1), found.group(2)
    name = name[3:] if qnn and name.startswith("Qnn") else name
    op = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower()
    return (f"qnn.{op}" if qnn else op), found.group(0)[len("tvm::relay::"):].split("::")[-1][:-1]


def bug_line(error: BaseException) -> str:
    """The CLI's one line for an unexpected failure: a :class:`QuantfuseBug` as it says itself,
    any other TVM failure as TVM's message and "this is a quantfuse bug", else TVM's message."""
    if isinstance(error, QuantfuseBug):
        return str(error)
    if is_tvm_failure(error):
        return f"{tvm_error_message(error)}: this is a quantfuse bug"
    return tvm_error_message(error)
