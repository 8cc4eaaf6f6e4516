"""A command that dies of a fatal signal says so: one line naming the step, the model and the
Python stack, not a silent exit 139.

A segmentation fault or an abort inside native code (one of TVM's C++ passes, a peer runtime)
ends the process before Python can print anything. So the ``quantfuse`` console script runs each
command in a child process, the same interpreter and the same arguments, with stdin, stdout and
stderr inherited (progress bars and Ctrl-C behave as before), and waits. The parent imports
nothing but the standard library: it costs one extra interpreter start. When the child dies of
SIGSEGV, SIGABRT, SIGBUS, SIGFPE or SIGILL the parent prints::

    quantfuse: crashed (segmentation fault, SIGSEGV) in TVM's native code (called from
    relay_ext/frontend/qnn_passes.py line 57) while importing model enc.onnx: this is a bug,
    please report it with the command line; the Python stack is in
    /tmp/quantfuse-crash-x/python-stack.txt

and exits with 128 + the signal's number (139 for a segmentation fault), what a shell reports
for such a death. A child killed by SIGKILL (most often the kernel's out-of-memory killer) gets
a line too, and exit code 137.

The child writes the step it is in to a small status file the parent reads after a crash:
commands enter :func:`step` ("importing", "tuning" ...), and Python's :mod:`faulthandler` writes
the stack of every thread to a file beside it. Signals sent to the parent alone (``kill -INT``,
``kill -TERM``) are passed on to the child; a terminal's Ctrl-C reaches both already and is not
passed on twice. A child that ends by another signal (SIGINT, SIGTERM, SIGHUP) ends the parent
by the same signal.

:func:`relay_ext.cli.main` called with an argument list runs the command in the calling process,
with :func:`step` marks kept in memory and nothing written.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

# the child's status dir and the parent's pid; set by the parent, removed from the child's
# environment at its start
WATCH_ENV = "QUANTFUSE_WATCH_DIR"
PARENT_ENV = "QUANTFUSE_WATCH_PARENT"
_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies
STATUS_FILE = "status.json"
STACK_FILE = "python-stack.txt"
CRASH_SIGNALS: Dict[int, str] = {
    signal.SIGSEGV: "segmentation fault", signal.SIGABRT: "abort", signal.SIGBUS: "bus error",
    signal.SIGFPE: "floating-point exception", signal.SIGILL: "illegal instruction"}
# passed on to the child when they were sent to the parent alone
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_SI_KERNEL = 0x80  # si_code of a signal the kernel sent: a terminal's Ctrl-C or hangup
# the child: same interpreter, same sys.path[0] as this process (not the directory it runs in)
_CHILD_CODE = ("import sys; sys.path[0] = {path!r}; from relay_ext.cli import main; "
               "sys.exit(main())")
# where native code was called from, by the top frame's package
_OWNERS = (("tvm", "TVM's"), ("torch", "PyTorch's"), ("onnxruntime", "ONNX Runtime's"),
           ("openvino", "OpenVINO's"), ("onnx", "ONNX's"), ("numpy", "NumPy's"))
_OURS = ("relay_ext", "meta_rules")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')

_steps: List[Tuple[str, Optional[str]]] = []
_status: Dict[str, object] = {}
_status_dir: Optional[Path] = None
_stack_file = None  # kept open: faulthandler writes to its descriptor


def can_watch() -> bool:
    """Whether this process should run the command in a watched child: not already the child,
    and a POSIX system with what the parent needs."""
    return (WATCH_ENV not in os.environ and hasattr(signal, "sigwaitinfo")
            and hasattr(os, "posix_spawn"))


# --- the child -------------------------------------------------------------------------------


def enter_child() -> None:
    """In the watched child (a no-op elsewhere): Python's stack goes to the status dir on a fatal
    signal, and :func:`step` marks are written there; the child dies with its parent (a
    ``kill -9`` of ``quantfuse`` ends the command, as it did in one process)."""
    global _status_dir, _stack_file  # pylint: disable=global-statement
    directory = os.environ.pop(WATCH_ENV, None)
    parent = os.environ.pop(PARENT_ENV, "")
    if not directory or not Path(directory).is_dir():
        return
    _die_with(int(parent) if parent.isdigit() else None)
    try:
        _stack_file = open(Path(directory) / STACK_FILE, "w", encoding="utf-8")  # noqa: SIM115
    except OSError:  # the command runs all the same; a crash is still reported, without stack
        pass
    else:
        faulthandler.enable(file=_stack_file, all_threads=True)
    _status_dir = Path(directory)
    _write_status()


def _die_with(parent: Optional[int]) -> None:
    """SIGKILL this process when its parent dies (Linux; elsewhere nothing), and now if
    ``parent`` is gone already."""
    import ctypes  # pylint: disable=import-outside-toplevel

    try:
        if ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
            return
    except (OSError, AttributeError):  # not Linux
        return
    if parent is not None and os.getppid() != parent:  # it died before prctl
        os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def step(name: str, model: Optional[str] = None) -> Iterator[None]:
    """The command is at step ``name`` ("importing", "tuning" ...), on ``model`` (a built-in name
    or a file; default: the enclosing step's) while the block runs."""
    if model is None and _steps:
        model = _steps[-1][1]
    _steps.append((name, None if model is None else str(model)))
    _write_status()
    try:
        yield
    finally:
        _steps.pop()
        _write_status()


def current_step() -> Optional[Tuple[str, Optional[str]]]:
    """(step, model) of the innermost :func:`step` block running, or None."""
    return _steps[-1] if _steps else None


def note(**facts: str) -> None:
    """Facts a crash line names besides the step: ``native_log=PATH`` (where TVM's native lines
    go while the command runs)."""
    _status.update({key: str(value) for key, value in facts.items()})
    _write_status()


def _write_status() -> None:
    if _status_dir is None:
        return
    status = dict(_status, step=list(_steps[-1]) if _steps else None)
    partial = _status_dir / f".{STATUS_FILE}.partial"
    try:
        partial.write_text(json.dumps(status), encoding="utf-8")
        os.replace(partial, _status_dir / STATUS_FILE)
    except OSError:  # the status dir is only read after a crash; never fail a command for it
        pass


# --- the parent ------------------------------------------------------------------------------


def watched(argv: Sequence[str]) -> Optional[int]:
    """Run ``quantfuse argv`` in a child process and wait for it; its exit code, or for a death
    by a fatal signal one line on stderr and 128 + the signal's number. None when the child
    cannot be started (no temporary directory, no interpreter to start): the caller runs the
    command itself."""
    pid = None
    try:
        status_dir = Path(tempfile.mkdtemp(prefix="quantfuse-crash-"))
    except OSError:
        return None
    env = dict(os.environ, **{WATCH_ENV: str(status_dir), PARENT_ENV: str(os.getpid())})
    command = [sys.executable, "-c", _CHILD_CODE.format(path=sys.path[0]), *argv]
    waited = {*FORWARDED, signal.SIGCHLD}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    try:
        with contextlib.suppress(OSError):
            pid = os.posix_spawn(sys.executable, command, env, setsigmask=old_mask)
        if pid is not None:
            wait_status = _wait(pid, waited)
            while signal.sigtimedwait(waited, 0) is not None:  # what came with the child's end
                pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    if pid is None:
        shutil.rmtree(status_dir, ignore_errors=True)
        return None
    if os.WIFEXITED(wait_status):
        shutil.rmtree(status_dir, ignore_errors=True)
        return os.WEXITSTATUS(wait_status)
    signum = os.WTERMSIG(wait_status)
    if signum in CRASH_SIGNALS or signum == signal.SIGKILL:
        print(crash_line(signum, status_dir), file=sys.stderr, flush=True)
        if signum == signal.SIGKILL:
            shutil.rmtree(status_dir, ignore_errors=True)
        return 128 + signum
    shutil.rmtree(status_dir, ignore_errors=True)
    return _end_by(signum)


def _wait(pid: int, waited: set) -> int:
    """Wait for child ``pid`` to end, passing on the signals sent to this process alone; its
    wait status."""
    while True:
        info = signal.sigwaitinfo(waited)
        if info.si_signo == signal.SIGCHLD:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return wait_status
        elif info.si_code != _SI_KERNEL:  # the terminal's signals reached the child already
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, info.si_signo)


def _end_by(signum: int) -> int:
    """End this process by ``signum``, as the child ended; 128 + signum if it survives."""
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)
    return 128 + signum


def crash_line(signum: int, status_dir: Path) -> str:
    """The line for a child that died of ``signum``, from what it left in ``status_dir``."""
    status = _read_status(status_dir)
    where = ""
    if status.get("step"):
        name, model = status["step"]
        where = f" while {name}" + (f" model {model}" if model else "")
    native = _native_output(Path(str(status["native_log"]))) if status.get("native_log") else ""
    if signum == signal.SIGKILL:
        return (f"quantfuse: killed (SIGKILL){where}: when nobody sent it, the kernel's "
                f"out-of-memory killer did (see 'dmesg'); rerun with a smaller model or more "
                f"free memory{native}")
    stack = status_dir / STACK_FILE
    caller = _native_caller(stack)
    text = f"quantfuse: crashed ({CRASH_SIGNALS[signum]}, {signal.Signals(signum).name}) in "
    if caller is None:
        text += "native code"
    else:
        owner, frame = caller
        text += f"{owner + ' ' if owner else ''}native code (called from {frame})"
    text += f"{where}: this is a bug, please report it with the command line"
    if stack.is_file() and stack.stat().st_size:
        text += f"; the Python stack is in {stack}"
    return text + native


def _native_output(native_log: Path) -> str:
    """"; native output before it in PATH" when the command's capture of descriptor 2 holds
    lines; an empty capture is removed."""
    try:
        if native_log.stat().st_size:
            return f"; native output before it in {native_log}"
        native_log.unlink()
        native_log.parent.rmdir()  # the capture's own temporary directory, when empty now
    except OSError:
        pass
    return ""


def _read_status(status_dir: Path) -> dict:
    try:
        status = json.loads((status_dir / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return status if isinstance(status, dict) else {}


def _native_caller(stack: Path) -> Optional[Tuple[Optional[str], str]]:
    """(whose code crashed, where quantfuse called it) from the Python stack faulthandler wrote:
    the innermost frame of the thread that crashed ("Current thread", else the first listed)
    names the package ("TVM's"; None for another), and the innermost frame of quantfuse's own
    code the place ("relay_ext/frontend/qnn_passes.py line 57"; the innermost frame where
    quantfuse's code is not on the stack). None without a frame."""
    try:
        lines = stack.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    current = [i for i, line in enumerate(lines) if line.startswith("Current thread")]
    frames = []
    for line in lines[current[0] if current else 0:]:
        match = _FRAME.match(line)
        if match:
            frames.append((Path(match.group("file")).parts, match.group("line")))
        elif frames:  # the end of the thread's stack
            break
    if not frames:
        return None
    parts, _ = frames[0]
    installed = [i for i, part in enumerate(parts) if part in ("site-packages", "dist-packages")]
    package = parts[installed[-1] + 1] if installed and len(parts) > installed[-1] + 2 else None
    owner = next((words for name, words in _OWNERS if name == package), None)
    for parts, line in frames:
        ours = [i for i, part in enumerate(parts[:-1]) if part in _OURS]
        if ours:
            return owner, f"{'/'.join(parts[ours[-1]:])} line {line}"
    parts, line = frames[0]
    return owner, f"{'/'.join(parts[installed[-1] + 1:] if installed else parts[-2:])} line {line}"
