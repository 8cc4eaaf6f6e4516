"""A command that dies of a fatal signal in native code ends with one line naming the step, the
model and the Python stack (exit 128 + the signal); normal errors, Ctrl-C and SIGTERM end as
before, through the real entry point (``python -m relay_ext.cli``, the console script)."""

import os
import pty
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from relay_ext import cli
from relay_ext.cli import crash_report, entry_point, inputs
from relay_ext.cli.crash_report import WATCH_ENV, current_step, step

# What the watched child's command does instead of its own, by QF_TEST_DO (the command itself is
# never imported: 'models' imports TVM, seconds per test).
# A sitecustomize module runs at every interpreter start on PYTHONPATH; only the child (the
# process the watch dir is passed to) is changed.
SITECUSTOMIZE = textwrap.dedent(f"""
    import os
    if os.environ.get({WATCH_ENV!r}):
        import ctypes, signal, sys, time
        from relay_ext.cli import entry_point
        from relay_ext.cli.crash_report import step
        from relay_ext.cli.parser import BadInput

        def crash_in_a_step(args):
            with step("importing", model="crash_me.onnx"):
                what = os.environ["QF_TEST_DO"]
                if what == "segv":
                    ctypes.string_at(0)
                elif what == "abort":
                    os.abort()
                elif what == "bad input":
                    raise BadInput("--model crash_me.onnx: no such file")
                elif what == "exit 3":
                    return 3
                elif what == "wait":
                    print("waiting", os.getpid(), flush=True)
                    time.sleep(600)
                elif what == "count":  # how many SIGINTs one interruption delivers
                    count = []
                    signal.signal(signal.SIGINT, lambda *_: count.append(1))
                    print("waiting", os.getpid(), flush=True)
                    while not count:
                        time.sleep(0.05)
                    time.sleep(1.0)  # room for a second one, which would be counted
                    print(f"SIGINT x{{len(count)}}", flush=True)
                    return 130
            return 0

        entry_point.command_function = lambda name: crash_in_a_step
""")
HANG_GUARD_S = 120  # a bound on waits for things that happen within seconds (not a timing)


@pytest.fixture
def child_env(tmp_path):
    """The environment for a quantfuse process whose watched child runs SITECUSTOMIZE; temporary
    files (the crash dir) go under ``tmp_path / "tmp"``."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (tmp_path / "tmp").mkdir()
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, TMPDIR=str(tmp_path / "tmp"), TOPHUB_LOCATION="NONE")


def _quantfuse(how: str):
    if how == "console script":
        return [str(Path(sys.executable).with_name("quantfuse"))]
    return [sys.executable, "-m", "relay_ext.cli"]


def _run(env, what: str, *args: str, how: str = "-m") -> subprocess.CompletedProcess:
    return subprocess.run([*_quantfuse(how), *(args or ["models"])], check=False,
                          env=dict(env, QF_TEST_DO=what), capture_output=True, text=True,
                          timeout=HANG_GUARD_S)


@pytest.mark.parametrize("what, signum, words", [
    ("segv", signal.SIGSEGV, "segmentation fault, SIGSEGV"),
    ("abort", signal.SIGABRT, "abort, SIGABRT")])
def test_a_native_crash_is_one_line_naming_the_step_the_model_and_the_stack(child_env, tmp_path,
                                                                            what, signum, words):
    done = _run(child_env, what)
    assert done.returncode == 128 + signum, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith(f"quantfuse: crashed ({words}) in native code"), line
    assert "while importing model crash_me.onnx" in line, line
    assert "this is a bug, please report it with the command line" in line, line
    stack = Path(line.rsplit("the Python stack is in ", 1)[1])
    assert stack.is_relative_to(tmp_path / "tmp") and stack.is_file(), line
    assert "crash_in_a_step" in stack.read_text()  # the frame that crashed


def test_the_console_script_is_watched_too(child_env):
    done = _run(child_env, "segv", how="console script")
    assert done.returncode == 139, done
    assert "quantfuse: crashed (segmentation fault, SIGSEGV)" in done.stderr, done.stderr
    assert "while importing model crash_me.onnx" in done.stderr, done.stderr


def test_errors_keep_their_line_and_exit_code_and_leave_no_crash_dir(child_env, tmp_path):
    bad = _run(child_env, "bad input")
    assert bad.returncode == cli.EXIT_BAD_INPUT, bad
    assert bad.stderr == "quantfuse: error: --model crash_me.onnx: no such file\n"
    unknown = _run(child_env, "bad input", "no-such-command")
    assert unknown.returncode == cli.EXIT_BAD_INPUT, unknown
    assert unknown.stderr.startswith("quantfuse: error: argument COMMAND: invalid choice")
    assert _run(child_env, "exit 3").returncode == 3
    assert _run(child_env, "segv", "--help").returncode == 0
    assert not list((tmp_path / "tmp").glob("quantfuse-crash-*"))


def _started(env, what: str) -> subprocess.Popen:
    """A quantfuse process whose child prints "waiting <pid>" and waits in its step."""
    return subprocess.Popen([*_quantfuse("-m"), "models"], env=dict(env, QF_TEST_DO=what),
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_ctrl_c_sent_to_quantfuse_reaches_the_command_once(child_env):
    process = _started(child_env, "count")
    try:
        assert process.stdout.readline().startswith("waiting"), process.stderr.read()
        process.send_signal(signal.SIGINT)  # kill -INT to quantfuse's pid: passed on
        out, err = process.communicate(timeout=HANG_GUARD_S)
    finally:
        process.kill()
    assert process.returncode == cli.EXIT_INTERRUPTED, err
    assert "SIGINT x1" in out, (out, err)


def test_a_terminals_ctrl_c_reaches_the_command_once_and_ends_it_with_130(child_env):
    """Ctrl-C at a terminal signals the whole foreground process group, quantfuse and the command
    both: the command is interrupted once and quantfuse ends with its exit code. (Two SIGINTs
    sent at once mostly merge into one; which signals quantfuse passes on is checked below.)"""
    master, slave = pty.openpty()
    # quantfuse leads a session whose controlling terminal is the pty, as a shell would start it
    in_the_terminal = ("import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
                       "os.execv(sys.executable, sys.argv[1:])")
    process = subprocess.Popen([sys.executable, "-c", in_the_terminal, *_quantfuse("-m"), "models"],
                               env=dict(child_env, QF_TEST_DO="count"), stdin=slave, stdout=slave,
                               stderr=slave, start_new_session=True)
    os.close(slave)
    output = b""
    try:
        while b"waiting" not in output:
            output += os.read(master, 1024)
        os.write(master, b"\x03")  # the terminal's interrupt character
        process.wait(timeout=HANG_GUARD_S)
        while True:
            try:
                chunk = os.read(master, 1024)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            output += chunk
    finally:
        process.kill()
        os.close(master)
    assert process.returncode == cli.EXIT_INTERRUPTED, output
    assert b"SIGINT x1" in output, output


def test_sigterm_ends_the_command_and_quantfuse_by_sigterm(child_env):
    process = _started(child_env, "wait")
    try:
        child = int(process.stdout.readline().split()[1])
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=HANG_GUARD_S)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGTERM
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # the command ended (and was reaped) with it


def test_a_killed_quantfuse_takes_the_command_with_it(child_env):
    process = _started(child_env, "wait")
    try:
        child = int(process.stdout.readline().split()[1])
        process.kill()  # SIGKILL: quantfuse passes nothing on
        process.communicate(timeout=HANG_GUARD_S)
        for _ in range(HANG_GUARD_S * 10):  # gone, or a zombie nobody reaps yet
            try:
                if "\nState:\tZ" in Path(f"/proc/{child}/status").read_text():
                    break
            except FileNotFoundError:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the command outlived quantfuse")
    finally:
        process.kill()


# --- in this process: the steps the line names ---------------------------------------------------


def test_steps_nest_and_inherit_the_model():
    assert current_step() is None
    with step("tuning", model="resnet18"):
        with step("building"):
            assert current_step() == ("building", "resnet18")
        assert current_step() == ("tuning", "resnet18")
    assert current_step() is None


def test_the_command_runs_in_its_step_and_the_model_loads_in_importing(monkeypatch):
    from relay_ext.frontend import loader

    seen = []
    monkeypatch.setattr(loader, "load_model", lambda *a, **k: seen.append(current_step()))

    def fusion(args):
        seen.append(current_step())
        inputs.load_model(args)
        return 0

    monkeypatch.setattr(entry_point, "command_function", lambda name: fusion)
    assert cli.main(["fusion", "--model", "tiny_resnet", "--target", "llvm", "--verbose"]) == 0
    assert seen == [("reporting the fusion of", "tiny_resnet"), ("importing", "tiny_resnet")]


def test_the_line_names_whose_native_code_and_where_quantfuse_called_it(tmp_path):
    site = "/venv/lib/python3.11/site-packages"
    (tmp_path / crash_report.STACK_FILE).write_text(textwrap.dedent(f"""\
        Fatal Python error: Segmentation fault

        Thread 0x00007f0000000001 (most recent call first):
          File "{site}/torch/utils/x.py", line 3 in wait

        Current thread 0x00007f0000000000 (most recent call first):
          File "{site}/tvm/_ffi/_ctypes/packed_func.py", line 239 in __call__
          File "{site}/tvm/ir/transform.py", line 238 in __call__
          File "/src/relay_ext/frontend/qnn_passes.py", line 57 in integer_ops
          File "/src/relay_ext/frontend/loader.py", line 90 in load_model
        """))
    (tmp_path / crash_report.STATUS_FILE).write_text('{"step": ["importing", "enc.onnx"]}')
    line = crash_report.crash_line(signal.SIGSEGV, tmp_path)
    assert line.startswith("quantfuse: crashed (segmentation fault, SIGSEGV) in TVM's native code "
                           "(called from relay_ext/frontend/qnn_passes.py line 57) while "
                           "importing model enc.onnx: this is a bug"), line
    killed = crash_report.crash_line(signal.SIGKILL, tmp_path)
    assert killed.startswith("quantfuse: killed (SIGKILL) while importing model enc.onnx"), killed
    assert "out-of-memory" in killed


def test_only_signals_sent_to_quantfuse_alone_are_passed_on(monkeypatch):
    """A terminal's signal (the kernel sent it to the whole foreground group, child included) is
    not passed on; one sent to quantfuse's pid is; the wait ends when the child has ended."""
    user, kernel = 0, 0x80  # si_code of kill(2), of the terminal
    arrivals = iter([(signal.SIGINT, kernel), (signal.SIGINT, user), (signal.SIGTERM, user),
                     (signal.SIGHUP, kernel), (signal.SIGCHLD, 1), (signal.SIGCHLD, 1)])
    sent, exits = [], iter([(0, 0), (1234, 130 << 8)])  # stopped first, then ended

    def arrive(_):
        signo, code = next(arrivals)
        return type("Info", (), {"si_signo": signo, "si_code": code})()

    monkeypatch.setattr(crash_report.signal, "sigwaitinfo", arrive)
    monkeypatch.setattr(crash_report.os, "kill", lambda pid, signo: sent.append((pid, signo)))
    monkeypatch.setattr(crash_report.os, "waitpid", lambda pid, options: next(exits))
    wait = crash_report._wait  # pylint: disable=protected-access
    assert os.WEXITSTATUS(wait(1234, set())) == 130
    assert sent == [(1234, signal.SIGINT), (1234, signal.SIGTERM)]
