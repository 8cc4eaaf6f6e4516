"""``quantfuse export`` and ``quantfuse run``: check the input, call :mod:`relay_ext.deploy`, print.

``run`` loads TVM's runtime library alone before anything imports TVM
(:mod:`relay_ext.deploy.runtime_only`), and this module imports nothing heavy at its top, so a
``quantfuse run`` process never imports PyTorch, Relay or the tuning flow.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator, Optional

from relay_ext.cli.inputs import (
    check_model,
    check_runs_here,
    checked_variant,
    load_model,
    resolve_target,
    run_description,
    warn_if_generic_llvm,
    work_dir_checked,
)
from relay_ext.cli.parser import BadInput
from relay_ext.lowering.toolchain import require_c_compiler  # standard library only


def cmd_export(args) -> int:
    from relay_ext.deploy.export import check_export_kind, check_output_path, export

    check_model(args)
    variant = checked_variant(args.variant)
    try:  # before any work: a target this wheel cannot build for, an --out it cannot write
        check_export_kind(args.target)
        out = check_output_path(args.out)
    except ValueError as error:
        raise BadInput(str(error)) from None
    target = resolve_target(args.target, variant)
    check_runs_here(target)  # nor one whose code this CPU cannot run
    require_c_compiler()  # the shared library is linked with it: refuse before the model loads
    database = cache_path = None
    if args.work_dir is not None:
        from relay_ext.workdir.files import TASK_TIMINGS_FILE, open_tuned_database

        cache_path = Path(args.work_dir) / TASK_TIMINGS_FILE  # bench's timings, kept there
        database = work_dir_checked(open_tuned_database, Path(args.work_dir))
        work_dir_checked(run_description(args, target).check_tuned_for, Path(args.work_dir))
    loaded = load_model(args)
    warn_if_generic_llvm(args.target, target)
    result = export(out, loaded, target=target,
                    schedule="default" if database is None else "tuned", records=database,
                    variant=variant, threads=args.threads,
                    choose_per_task=not args.keep_slower_records, timing_cache=cache_path)
    manifest = result.manifest
    records = manifest["records"]
    if database is None:
        built = "TVM's untuned build (no --work-dir)"
    else:
        built = f"tuned build, {records['count']} records (sha256 {records['digest'][:12]})"
        if manifest["never_slower"]:
            built += (f", per-task choice timed with {manifest['threads']} threads: "
                      f"{len(records['defaults'])} task(s) with TVM's default schedule")
    size_kib = result.library.stat().st_size / 1024
    print(f"{loaded.name} on {manifest['target']}: {built}")
    print(f"wrote {result.library} ({size_kib:.0f} KiB) and {result.manifest_path}")
    return 0


def cmd_run(args) -> int:
    from relay_ext.deploy.runtime_only import load_tvm_runtime_only

    load_tvm_runtime_only()  # before anything imports TVM: a deploy machine's TVM
    import numpy as np

    from relay_ext.deploy.runtime import DeployError, load, read_manifest

    if args.out and not _writable_parent(args.out):
        raise BadInput(f"cannot write --out {args.out!r}: its directory is missing or not "
                       "writable")
    data = _read_npy(args.input)
    try:
        if args.rpc:
            from relay_ext.deploy.remote import load_remote

            model = load_remote(args.lib, args.rpc)
            where = f"RPC server ({args.rpc})"
        else:
            threads = _threads_for(read_manifest(args.lib))
            model = load(args.lib)
            where = f"this CPU, {threads} thread(s)"
        with _tvm_num_threads(None if args.rpc else threads):  # before the pool is made
            outputs = model(data)
            median_ms = model.median_ms(args.repeat) if args.repeat else None
    except DeployError as error:
        raise BadInput(str(error)) from None
    print(f"ran {args.lib} ({model.manifest.get('model') or 'model'}, "
          f"{model.manifest['build']}) on {where}")
    for index, output in enumerate(outputs):
        print(f"output {index}: {'x'.join(map(str, output.shape))} {output.dtype}, "
              f"min {output.min():.6g}, max {output.max():.6g}, "
              f"argmax {int(np.argmax(output))}")
    if args.out:
        np.save(args.out, outputs[0])
        print(f"wrote {args.out}")
    if median_ms is not None:
        print(f"median of {args.repeat} runs: {median_ms:.4f} ms")
    return 0


def _threads_for(manifest: dict) -> int:
    """Threads TVM's pool gets here: ``TVM_NUM_THREADS`` when set, else those the export's
    per-task choice timed with (at most this machine's CPUs), else every CPU (bench's
    default)."""
    if os.environ.get("TVM_NUM_THREADS"):
        return int(os.environ["TVM_NUM_THREADS"])
    cpus = os.cpu_count() or 1
    return min(int(manifest.get("threads") or cpus), cpus)


@contextlib.contextmanager
def _tvm_num_threads(threads: Optional[int]) -> Iterator[None]:
    """``TVM_NUM_THREADS`` set to ``threads`` while the model runs (TVM sizes this thread's pool
    at its first parallel run and reads the variable before each), then as it was: a caller of
    ``cli.main`` keeps its environment. None: left alone (an RPC server has its own)."""
    previous = os.environ.get("TVM_NUM_THREADS")
    if threads is not None:
        os.environ["TVM_NUM_THREADS"] = str(threads)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("TVM_NUM_THREADS", None)
        else:
            os.environ["TVM_NUM_THREADS"] = previous


def _writable_parent(path: str) -> bool:
    folder = Path(path).parent if str(Path(path).parent) else Path(".")
    return folder.is_dir() and os.access(folder, os.W_OK)


def _read_npy(path: str):
    import numpy as np

    if not os.path.isfile(path):
        raise BadInput(f"--input {path!r} not found; pass a NumPy .npy file (numpy.save)")
    try:
        data = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise BadInput(f"--input {path!r} is not a NumPy .npy array ({error}); write it with "
                       "numpy.save") from None
    if not isinstance(data, np.ndarray):  # an .npz archive
        raise BadInput(f"--input {path!r} is an .npz archive, not one .npy array; save the "
                       "input alone with numpy.save")
    return data
