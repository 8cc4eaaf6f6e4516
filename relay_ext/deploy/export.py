"""``relay_ext.export``: a build bench times, as one library a user ships, described beside it.

    result = export("out/model.so", loaded, target="host", records="work")   # bench's tuned row
    result = export("out/model.so", loaded, schedule="default")              # TVM's defaults
    result.library, result.manifest_path                                     # model.so, model.json

It takes :func:`relay_ext.compile`'s arguments and builds through it.

``model.so`` is written by TVM's ``export_library`` (graph, parameters and code in one shared
library that TVM's runtime loads: :mod:`relay_ext.deploy.runtime`, or C++). ``model.json``::

    {"format": "quantfuse-deploy/1",
     "library": {"file": "model.so", "sha256": "..."},
     "inputs":  [{"name": "input", "shape": [1, 3, 224, 224], "dtype": "float32"}],
     "outputs": [{"shape": [1, 1000], "dtype": "float32", "scale": 0.0087, "zero_point": 56}],
     "target": "llvm -keys=cpu -mcpu=...", "amx": false, "build": "tuned", "variant": "ours",
     "threads": 2, "quantfuse": "0.1.0", "tvm": "0.19.0", "model": "resnet18",
     "records": {"count": 486, "digest": "sha256 of the records", "defaults": [...],
                 "no_search": [...]}}

``scale``/``zero_point``: the output's quantization (the ``qnn.dequantize`` that ends the graph;
null when it has none). ``build``: "tuned", "no-search" or "untuned" (schedule "default").
``records.defaults``: the tasks the per-task choice compiled with TVM's default schedule;
``records.no_search``: those compiled with their rule design (no tuned record, or one slower
here than it). ``never_slower``: whether that choice was made (timed with ``threads``).

Both files are written to temporary names in the same directory and moved into place with
``os.replace`` only once both are complete, the library first: a failed or interrupted export
leaves no half-written file (an earlier export at the path stays whole, and the loader refuses a
library whose description names another library's SHA-256).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Union

import tvm
from tvm import meta_schedule as ms
from tvm import relay

from meta_rules.cpu.amx_conv import target_has_amx
from meta_rules.rule_sets import TargetLike

from relay_ext.lowering.targets import check_runs_here, normalize_target, resolve_target
from relay_ext.lowering.relay_build import copy_module
from relay_ext.build.entry import Compiled, compile  # pylint: disable=redefined-builtin
from relay_ext.deploy.runtime import FORMAT, file_digest, manifest_path
from relay_ext.workdir.files import open_tuned_database
from relay_ext.lowering.toolchain import require_c_compiler

if TYPE_CHECKING:
    from relay_ext.frontend.models import LoadedModel

logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]


class ExportError(ValueError):
    """An export that cannot be made as asked (target, output path); one line."""


@dataclasses.dataclass
class ExportResult:
    """What :func:`export` wrote: the library, its description, and the description's content."""

    library: Path
    manifest_path: Path
    manifest: Dict[str, Any]


def check_export_kind(target: TargetLike) -> None:
    """ExportError unless ``target`` is an llvm target (export builds what bench times, on this
    CPU); a target TVM cannot build for in this wheel (CUDA without a CUDA build) says so. Cheap:
    nothing is normalised, nothing logged."""
    try:
        kind = resolve_target(target).kind.name
    except ValueError as error:
        raise ExportError(str(error)) from None
    if kind != "llvm":
        can_build = tvm.get_global_func(f"target.build.{kind}", allow_missing=True) is not None
        why = ("" if can_build else
               f"; this TVM build cannot compile for {kind} (no target.build.{kind})")
        raise ExportError(f"export builds what 'quantfuse bench' times, on this CPU: the target "
                          f"must be llvm (host, 'llvm -mcpu=...'), got {kind!r}{why}")


def check_export_target(target: TargetLike) -> tvm.target.Target:
    """The target normalised; ExportError unless it is an llvm target (:func:`check_export_kind`),
    :class:`~relay_ext.lowering.targets.TargetNotRunnable` (a ValueError) unless this machine
    runs its code (the per-task choice times it here)."""
    check_export_kind(target)
    target = normalize_target(target)
    check_runs_here(target)
    return target


def check_output_path(path: PathLike) -> Path:
    """``path`` as the library to write: a ``.so`` name in a directory that exists and is
    writable (ExportError otherwise)."""
    path = Path(path)
    if path.suffix != ".so":
        raise ExportError(f"the library's name must end in .so (its description goes beside it "
                          f"as .json), got {str(path)!r}")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ExportError(f"cannot write {str(path)!r}: its directory is missing or not "
                          "writable")
    if path.is_dir():
        raise ExportError(f"{str(path)!r} is a directory; pass a file name such as model.so")
    return path


def export(path: PathLike, model: Union["LoadedModel", tvm.IRModule],
           params: Optional[Mapping[str, tvm.nd.NDArray]] = None, target: TargetLike = "host", *,
           schedule: str = "tuned", records: Union[ms.Database, PathLike, None] = None,
           variant: str = "ours", threads: Optional[int] = None, choose_per_task: bool = True,
           timing_cache: Optional[PathLike] = None,
           model_name: Optional[str] = None) -> ExportResult:
    """``model`` built by :func:`relay_ext.compile` with the same arguments (``schedule``,
    ``records``, ``variant``, ``threads``, ``choose_per_task``, ``timing_cache``: an export after
    a bench of the same work dir times nothing again) and written as ``path`` (a ``.so``) with its
    ``.json`` description beside it, atomically (module doc). ``model_name``: the description's
    "model" (default: a loaded model's name). ExportError (a ValueError) for a target this
    machine cannot build for or run, or a path it cannot write, before anything is built."""
    target = check_export_target(target)
    path = check_output_path(path)
    require_c_compiler()  # TVM links the shared library with it
    if records is not None and not isinstance(records, ms.Database):
        records = open_tuned_database(records)
    built = compile(model, params, target, schedule=schedule, records=records, variant=variant,
                    threads=threads, choose_per_task=choose_per_task, timing_cache=timing_cache)
    mod, params = (model, params) if isinstance(model, tvm.IRModule) else (model.mod, model.params)
    if model_name is None and not isinstance(model, tvm.IRModule):
        model_name = model.name
    manifest = describe(mod, params, records if built.schedule == "tuned" else None, built,
                        model_name)
    manifest = write_atomically(path, built.lib, manifest)
    logger.info("wrote %s and %s", path, manifest_path(path))
    return ExportResult(path, manifest_path(path), manifest)


# model.json's "build" for each schedule of relay_ext.compile
BUILD_NAMES = {"tuned": "tuned", "no-search": "no-search", "default": "untuned"}


def describe(mod: tvm.IRModule, params: Optional[Mapping[str, tvm.nd.NDArray]],
             database: Optional[ms.Database], built: Compiled,
             model_name: Optional[str]) -> Dict[str, Any]:
    """model.json's content, less the library's file name and digest (known once written);
    ``database``: the records of a tuned build."""
    main = relay.transform.InferType()(copy_module(mod))["main"]
    bound = set(params or {})
    inputs = [{"name": p.name_hint, "shape": [int(d) for d in p.checked_type.shape],
               "dtype": str(p.checked_type.dtype)} for p in main.params if p.name_hint not in bound]
    records: Dict[str, Any] = {"count": 0, "digest": None, "defaults": built.default_tasks,
                               "no_search": built.rule_design_tasks}
    if database is not None:
        records.update(count=len(database), digest=records_digest(database))
    return {
        "format": FORMAT, "model": model_name, "inputs": inputs, "outputs": outputs_of(main),
        "target": str(built.target), "amx": bool(target_has_amx(built.target)),
        "build": BUILD_NAMES[built.schedule], "variant": built.variant,
        "never_slower": built.threads is not None, "threads": built.threads,
        "quantfuse": quantfuse_version(), "tvm": tvm.__version__, "records": records,
    }


def outputs_of(main: relay.Function) -> List[Dict[str, Any]]:
    """Shape, dtype and quantization (scale, zero point of a final ``qnn.dequantize`` with
    constant arguments; None otherwise) of each output of a type-checked ``main``."""
    ret = main.checked_type.ret_type
    types = list(ret.fields) if isinstance(ret, relay.TupleType) else [ret]
    bodies = list(main.body.fields) if isinstance(main.body, relay.Tuple) else [main.body]
    if len(bodies) != len(types):
        bodies = [None] * len(types)
    return [{"shape": [int(d) for d in ty.shape], "dtype": str(ty.dtype),
             **_dequantize_of(body)} for ty, body in zip(types, bodies)]


def _dequantize_of(body) -> Dict[str, Any]:
    none = {"scale": None, "zero_point": None}
    if not (isinstance(body, relay.Call) and isinstance(body.op, tvm.ir.Op)
            and body.op.name == "qnn.dequantize"):
        return none
    scale, zero_point = body.args[1], body.args[2]
    if not (isinstance(scale, relay.Constant) and isinstance(zero_point, relay.Constant)):
        return none
    return {"scale": scale.data.numpy().tolist(), "zero_point": zero_point.data.numpy().tolist()}


def records_digest(database: ms.Database) -> str:
    """SHA-256 over the database's records (workload hash, trace, run times, target), in a
    fixed order: two exports from the same records have the same digest."""
    # TuningRecord.as_json's Python conversion fails on traces with an IndexMap (a layout
    # transform); the FFI's own JSON object serialises through TVM's save_json
    as_json = ms._ffi_api.TuningRecordAsJSON  # pylint: disable=protected-access
    lines = sorted(
        f"{tvm.ir.structural_hash(record.workload.mod)} {tvm.ir.save_json(as_json(record))}"
        for record in database.get_all_tuning_records())
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def quantfuse_version() -> str:
    """The installed quantfuse's version ("unknown" in a checkout pip never installed)."""
    try:
        return metadata.version("quantfuse")
    except metadata.PackageNotFoundError:
        return "unknown"


def write_atomically(path: Path, lib: tvm.runtime.Module,
                     manifest: Dict[str, Any]) -> Dict[str, Any]:
    """``lib`` as ``path`` and ``manifest`` (with the library's name and SHA-256 added: the
    description returned) as its .json: both written under temporary names beside them, then
    moved into place; on any failure (or Ctrl-C) the temporary files are removed and nothing at
    ``path`` changed."""
    folder = path.parent if str(path.parent) else Path(".")
    temporary: List[Path] = []
    try:
        handle, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".partial.so",
                                        dir=folder)
        os.close(handle)
        temporary.append(Path(name))
        lib.export_library(name)
        manifest = {**manifest, "library": {"file": path.name, "sha256": file_digest(name)}}
        with tempfile.NamedTemporaryFile("w", prefix=f".{path.stem}.", suffix=".partial.json",
                                         dir=folder, delete=False) as file:
            temporary.append(Path(file.name))
            json.dump(manifest, file, indent=2)
            file.flush()
            os.fsync(file.fileno())
        for written in temporary:  # mkstemp made them private; a library is for others too
            os.chmod(written, 0o644)
        os.replace(temporary[0], path)
        os.replace(temporary[1], manifest_path(path))
        return manifest
    finally:
        for leftover in temporary:
            leftover.unlink(missing_ok=True)
