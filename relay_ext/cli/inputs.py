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

from relay_ext.cli.parser import BadInput

logger = logging.getLogger("quantfuse")

EXAMPLE_TARGETS = "examples: host, llvm -mcpu=core-avx2, nvidia/nvidia-a100"


def resolve_target(text: str, variant: str = "ours", quiet: bool = False):
    """--target, parsed and checked (an -mcpu LLVM does not know, a target without MetaSchedule
    defaults: BadInput); an llvm target gets its -num-cores; ``host`` is this machine's best
    target, printed (not when ``quiet``: stdout is JSON), and one whose code could use AMX is
    mapped to one without it (a warning line)."""
    import meta_rules
    from relay_ext.lowering.targets import is_host, normalize_target, short_text

    try:
        target = normalize_target(text)
        meta_rules.schedule_rules(target, variant)  # a target MetaSchedule has no defaults for
    except ValueError as error:
        examples = "" if "for this machine" in str(error) else f"; {EXAMPLE_TARGETS}"
        raise BadInput(f"{error}{examples}") from None
    if is_host(text) and not quiet:
        print(f"--target host: {short_text(target)} (from the CPU flags the OS enables)")
    return target


def check_runs_here(target) -> None:
    """Measuring here: refuse a target whose code this machine cannot execute."""
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


# --- the model ------------------------------------------------------------------------------------


TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript")


def parse_shape(text: Optional[str]) -> Tuple[int, ...]:
    if not text:
        raise BadInput("a TorchScript model needs its input shape: add --input-shape 1,3,224,224")
    try:
        shape = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise BadInput(f"--input-shape {text!r} is not a list of positive integers, e.g. 1,3,224,224")
    return shape


def is_model_file(text: str) -> bool:
    return (os.sep in text or text.endswith((*TORCHSCRIPT_SUFFIXES, ".onnx", ".pt2"))
            or os.path.exists(text))


def is_onnx(text: str) -> bool:
    return text.lower().endswith(".onnx")


def is_pt2e(text: str) -> bool:
    """A program saved with torch.export.save (PT2E-quantized): it names its own input shape."""
    return text.lower().endswith(".pt2")


def check_model(args) -> None:
    """The cheap checks of --model, before anything slow runs: a built-in name, or an existing
    file (a TorchScript file needs --input-shape; an ONNX file and a .pt2 program name their own
    input)."""
    from relay_ext.frontend import models

    if not is_model_file(args.model):
        if args.model not in models.MODELS:
            raise BadInput(f"unknown model {args.model!r}; built-in models: "
                           f"{', '.join(models.available_models())} (or a TorchScript, ONNX or .pt2 file)")
        return
    if os.path.isdir(args.model):
        raise BadInput(f"--model {args.model} is a directory; pass a TorchScript (.pt), ONNX (.onnx) "
                       f"or PT2E (.pt2) file, or a built-in model ({', '.join(models.available_models())})")
    if not os.path.isfile(args.model):  # before the shape: a mistyped path is the problem
        raise BadInput(f"model file not found: {args.model}; pass a built-in model "
                       f"({', '.join(models.available_models())}) or an existing file")
    if not (is_onnx(args.model) or is_pt2e(args.model)) or args.input_shape:
        parse_shape(args.input_shape)


def load_model(args):
    """The model --model names (checked by :func:`check_model` first), as a LoadedModel. An ONNX
    model that is not quantized, whose input is dynamic without --input-shape, or that needs the
    missing onnx/onnxruntime packages is BadInput; so is a .pt2 program without torchao, or with an
    op the PT2E import does not convert."""
    from relay_ext.frontend import models

    check_model(args)
    try:
        if is_onnx(args.model):
            from relay_ext.frontend.onnx_import import from_onnx

            shape = parse_shape(args.input_shape) if args.input_shape else None
            return from_onnx(args.model, input_shape=shape, layout=args.layout)
        if is_pt2e(args.model):
            return _pt2e_model(args)
        if is_model_file(args.model):
            return models.from_torchscript(
                args.model, {models.DEFAULT_INPUT_NAME: parse_shape(args.input_shape)},
                layout=args.layout)
        return models.load(args.model, image_size=args.image_size, layout=args.layout)
    except (ValueError, FileNotFoundError) as error:
        from meta_rules.base.tvm_errors import QuantfuseBug, check_failure

        failed = check_failure(error)  # a TVM check failure under the frontend's ValueError: ours
        if failed is not None:
            raise QuantfuseBug(f"importing {args.model}", failed) from error
        raise BadInput(str(error).splitlines()[0]) from None
    except Exception as error:  # a TVM check failure past the checks of the input: ours
        from meta_rules.base.tvm_errors import QuantfuseBug, is_tvm_failure

        if is_tvm_failure(error):
            raise QuantfuseBug(f"importing {args.model}", error) from error
        raise


def _pt2e_model(args):
    """A .pt2 program: its input shape is its own; an --input-shape must agree with it."""
    from relay_ext.frontend.pt2e_import import from_exported_program

    loaded = from_exported_program(args.model, layout=args.layout)
    if args.input_shape and parse_shape(args.input_shape) != tuple(loaded.input_shape):
        raise BadInput(f"--input-shape {args.input_shape} does not match the program's input "
                       f"{','.join(map(str, loaded.input_shape))} (a .pt2 program fixes its shape; "
                       "leave --input-shape out)")
    return loaded


def run_description(args, target):
    """What --model, --input-shape, --image-size, --layout, --target and --variant describe."""
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
