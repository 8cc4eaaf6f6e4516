"""The entry point: parse, run the command with TVM's native log lines kept in a file, map what
went wrong to one line and an exit code (2 bad input, 1 failure, 130 interrupted). A TVM failure
that no input explains says "this is a quantfuse bug" and, when it was wrapped as a
:class:`~meta_rules.base.tvm_errors.QuantfuseBug`, the op, task or step it struck. The command runs
inside a :func:`~relay_ext.cli.crash_report.step` naming it, for the line a crash in native code
prints."""

from __future__ import annotations

import importlib
import logging
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Optional, Sequence

from relay_ext.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED
from relay_ext.cli.crash_report import note, step
from relay_ext.cli.parser import BadInput, build_parser
from relay_ext.lowering.toolchain import MissingCCompiler  # stdlib only: 'run' stays light

# command -> (module of relay_ext.cli, function): imported when the command runs, so that 'run'
# (deploy_commands) never imports the tuning flow that commands.py and demo.py import
COMMANDS = {"models": ("commands", "cmd_models"), "fusion": ("commands", "cmd_fusion"),
            "tune": ("commands", "cmd_tune"), "bench": ("commands", "cmd_bench"),
            "demo": ("demo", "cmd_demo"), "export": ("deploy_commands", "cmd_export"),
            "run": ("deploy_commands", "cmd_run"), "profile": ("commands", "cmd_profile")}
# commands whose TVM log lines are not kept in a file: 'run' needs TVM's runtime alone
NO_NATIVE_LOG = ("models", "run")
# what a command does, for the line a crash prints ("... while tuning model resnet18"); loading
# the model is its own step, "importing" (relay_ext.cli.inputs.load_model)
COMMAND_STEPS = {"models": "listing the built-in models", "fusion": "reporting the fusion of",
                 "tune": "tuning", "bench": "benchmarking", "demo": "running the demo",
                 "export": "exporting", "run": "running", "profile": "profiling"}


def command_function(name: str):
    """The function that runs command ``name``."""
    module, function = COMMANDS[name]
    return getattr(importlib.import_module(f"{__package__}.{module}"), function)


def run(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command in ``argv`` (default ``sys.argv[1:]``); the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("quantfuse: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    try:
        args = build_parser().parse_args(argv)
        if args.command == "demo" and args.work_dir is None:
            args.work_dir = tempfile.mkdtemp(prefix="quantfuse-demo-")
        command = command_function(args.command)
        with step(COMMAND_STEPS.get(args.command, f"running {args.command}"),
                  model=getattr(args, "model", None) or getattr(args, "lib", None)):
            if verbose or args.command in NO_NATIVE_LOG:
                return command(args)
            return _with_native_log(args, command)
    except SystemExit as exit_:  # --help
        return exit_.code if isinstance(exit_.code, int) else 0
    except (BadInput, MissingCCompiler) as error:  # what the user's machine or input lacks
        if verbose:
            traceback.print_exc()
        print(f"quantfuse: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("quantfuse: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as error:  # noqa: BLE001 - one line unless --verbose
        if verbose:
            traceback.print_exc()
        print(f"quantfuse: failed: {_error_message(error)} (rerun with --verbose for the "
              "traceback)", file=sys.stderr)
        return EXIT_FAILED
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def _error_message(error: BaseException) -> str:
    """The one line for an unexpected failure (:func:`meta_rules.base.tvm_errors.bug_line`: TVM's
    words, and "this is a quantfuse bug" where no input explains a TVM failure); the error's last
    line where meta_rules cannot be imported (a 'run' process has TVM's runtime alone)."""
    try:
        from meta_rules.base.tvm_errors import bug_line
    except Exception:  # noqa: BLE001 pylint: disable=broad-except
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        return (lines or [type(error).__name__])[-1][:300]
    return bug_line(error)


def _with_native_log(args, command) -> int:
    """Run ``command`` with TVM's native log lines in a file, not on the terminal: the work dir's
    ``logs/tvm.log`` when the command has a work dir that exists at the end, else a temporary
    file. One summary line goes to stderr (not after bad input: that stays one error line)."""
    from relay_ext.workdir.files import TVM_LOG_FILE

    from relay_ext.cli.native_log import native_log_to

    captured = Path(tempfile.mkdtemp(prefix="quantfuse-log-")) / TVM_LOG_FILE
    note(native_log=captured)  # a crash leaves TVM's lines there
    bad_input = False
    try:
        with native_log_to(captured) as log:
            return command(args)
    except (BadInput, MissingCCompiler):
        bad_input = True
        raise
    finally:
        log.path = _keep_native_log(captured, getattr(args, "work_dir", None))
        line = None if bad_input else log.summary()
        if line:
            print(f"quantfuse: {line}", file=sys.stderr)


def _keep_native_log(captured: Path, work_dir: Optional[str]) -> Path:
    """Append the captured lines to ``work_dir/logs/tvm.log`` when the work dir exists (else keep
    the temporary file); an empty capture is removed. Returns where the lines are."""
    from relay_ext.workdir.files import LOG_DIR

    if not captured.exists() or captured.stat().st_size == 0:
        captured.unlink(missing_ok=True)
        captured.parent.rmdir()
        return captured
    if work_dir is None or not Path(work_dir).is_dir():
        return captured
    kept = Path(work_dir) / LOG_DIR / captured.name
    try:
        kept.parent.mkdir(exist_ok=True)
        with open(kept, "ab") as out:
            out.write(captured.read_bytes())
    except OSError:
        return captured
    captured.unlink()
    captured.parent.rmdir()
    return kept
