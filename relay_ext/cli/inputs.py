"""The command line's input, checked once where it comes in: every check that can fail on what
the user typed raises :class:`~relay_ext.cli.parser.BadInput` (one line, exit code 2), before
anything slow runs. What passes is resolved into the objects the library trusts: a normalised
Target, a :class:`~relay_ext.workdir.files.RunDescription`, a loaded model."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Iterator, Optional, Tuple

from relay_ext.cli.crash_report import step
from relay_ext.cli.parser import BadInput

logger = logging.getLogger("quantfuse")

EXAMPLE_TARGETS = "examples: host, llvm -mcpu=core-avx2, nvidia/nvidia-a100"


def resolve_target(text: str, variant: str = "ours", quiet: bool = False):
    """--target as the library checks it (:func:`relay_ext.lowering.targets.tunable_target`), its
    ValueError as BadInput; ``host`` is printed as the target it became (not when ``quiet``:
    stdout is JSON)."""
    from relay_ext.lowering.targets import is_host, short_text, tunable_target

    try:
        target = tunable_target(text, variant)
    except ValueError as error:
        examples = "" if "for this machine" in str(error) else f"; {EXAMPLE_TARGETS}"
        raise BadInput(f"{error}{examples}") from None
    if is_host(text) and not quiet:
        print(f"--target host: {short_text(target)} (from the CPU flags the OS enables)")
    return target


def check_runs_here(target) -> None:
    """:func:`relay_ext.lowering.targets.check_runs_here` (measuring here: a target whose code
    this machine cannot execute is refused), its TargetNotRunnable as BadInput."""
    from relay_ext.lowering.targets import TargetNotRunnable, check_runs_here as check

    try:
        check(target)
    except TargetNotRunnable as error:
        raise BadInput(str(error)) from None


def warn_if_generic_llvm(text: str, target) -> None:
    """Plain llvm builds for generic x86-64: say so, once every input check has passed."""
    from relay_ext.lowering.targets import host_target_text, is_generic_x86

    if is_generic_x86(target):
        logger.warning("--target %r has no -mcpu: TVM compiles for generic x86-64 (no AVX2 or "
                       "AVX-512), and int8 code is ~25x slower; for this machine use --target "
                       "'%s'", text, host_target_text())


def checked_variant(text: str) -> str:
    from meta_rules.rule_sets import check_variant

    try:
        return check_variant(text)
    except ValueError as error:
        raise BadInput(f"--variant: {error}") from None


# --- the model ---------------------------------------------------------------------------------


def parse_shape(text: Optional[str]) -> Tuple[int, ...]:
    """--input-shape ("1,3,224,224" or "1x3x224x224") as a tuple; BadInput when it is not one."""
    if not text:
        raise BadInput("a TorchScript model needs its input shape: add --input-shape 1,3,224,224")
    try:
        shape = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise BadInput(f"--input-shape {text!r} is not a list of positive integers, e.g. 1,3,224,224")
    return shape


def _model_options(args) -> dict:
    """:func:`relay_ext.load_model`'s options from --input-shape (a model file's), --image-size
    (a built-in model's) and --layout."""
    from relay_ext.frontend.loader import is_model_file

    file = is_model_file(args.model)
    shape = parse_shape(args.input_shape) if file and args.input_shape else None
    return {"input_shape": shape, "image_size": args.image_size, "layout": args.layout}


def check_model(args) -> None:
    """The cheap checks of --model, before anything slow runs
    (:func:`relay_ext.frontend.loader.check_source`), as BadInput."""
    from relay_ext.frontend.loader import ModelSourceError, check_source

    try:
        check_source(args.model, _model_options(args)["input_shape"])
    except ModelSourceError as error:
        raise BadInput(str(error)) from None


def load_model(args):
    """The model --model names, loaded by :func:`relay_ext.load_model`; what it cannot load from
    the input (ValueError: unknown model, missing file or package, a float model, an op the import
    lacks ...) is BadInput, its first line."""
    from relay_ext.frontend.loader import load_model as load

    options = _model_options(args)
    try:
        with step("importing", model=args.model):  # named by the line a crash prints
            return load(args.model, **options)
    except (ValueError, FileNotFoundError) as error:
        raise BadInput(str(error).splitlines()[0]) from None


def run_description(args, target):
    """What --model, --input-shape, --image-size, --layout, --target and --variant describe."""
    from relay_ext.frontend.loader import is_model_file
    from relay_ext.workdir.files import RunDescription

    model_file = is_model_file(args.model)
    shape = ",".join(map(str, parse_shape(args.input_shape))) if model_file and args.input_shape \
        else None
    return RunDescription(os.path.abspath(args.model) if model_file else args.model, shape,
                          None if model_file else args.image_size, args.layout, target,
                          checked_variant(args.variant))


# --- the work dir ---------------------------------------------------------------------------------


def writable_dir(path: str) -> Path:
    work_dir = Path(path)
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=work_dir, prefix=".quantfuse-write-test"):
            pass
    except OSError as error:
        raise BadInput(f"cannot write to work dir {path!r} ({error.strerror or error}); "
                       "pass a --work-dir you can write to") from None
    return work_dir


def work_dir_checked(check, *args):
    """``check(*args)``, a work-dir check of the library, with its WorkDirError as BadInput."""
    from relay_ext.workdir.files import NotADatabaseError, WorkDirError

    try:
        return check(*args)
    except NotADatabaseError as error:
        raise BadInput(f"{error}; move it away or pick another --work-dir") from None
    except WorkDirError as error:
        raise BadInput(str(error)) from None


@contextlib.contextmanager
def work_dir_locked(work_dir: Path) -> Iterator[None]:
    """The work dir's tuning lock held for the block; another tune holding it is BadInput."""
    from relay_ext.workdir.files import WorkDirBusy, tuning_lock

    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(tuning_lock(work_dir))
        except WorkDirBusy as error:
            raise BadInput(str(error)) from None
        yield


@contextlib.contextmanager
def closed_after(runner) -> Iterator[None]:
    """``runner.close()`` after the block, however it ends (a runner that has one)."""
    try:
        yield
    finally:
        if hasattr(runner, "close"):
            runner.close()


def rpc_runner(rpc: Optional[str], target=None):
    """'local', or for --rpc once the tracker answered a runner measuring on its servers
    (rpc_tracker.WatchedRPCRunner: a server that dies never hangs the tune). For a ``target``
    with AMX a server must also hold the kernel's permission for AMX tile data."""
    from meta_rules.cpu.amx_tiles import target_has_amx
    from relay_ext.measure import rpc_tracker

    if rpc is None:
        return "local"
    try:
        address = rpc_tracker.parse_rpc_address(rpc)
        servers = rpc_tracker.check_tracker(address)
        if target is not None and target_has_amx(target):
            rpc_tracker.check_servers_run_amx(address)
    except (ValueError, rpc_tracker.TrackerError) as error:
        raise BadInput(f"--rpc: {error}") from None
    print(f"measuring on {servers} RPC server(s) with key {address.key!r} at "
          f"{address.host}:{address.port}")
    return rpc_tracker.rpc_runner(address, max_workers=servers)
