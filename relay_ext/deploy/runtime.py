"""An exported model, loaded and run through TVM's runtime alone.

    model = load("model.so")           # reads model.json beside it, checks it names this file
    (out,) = model(x)                  # numpy in, numpy out; x checked against model.json
    model.time(repeat=20)              # seconds per run, one per repeat

This module imports ``tvm.runtime``, numpy, json and the standard library, nothing else of TVM
(no Relay, no MetaSchedule) and nothing of PyTorch: what it does, a deploy machine with TVM's
runtime library alone does too (``docs/deploy.md`` shows the same in C++). The one piece of
quantfuse it uses, :mod:`relay_ext.lowering.x86.amx_permission`, makes two system calls with ctypes.

``model.json`` (written by :func:`relay_ext.deploy.export.export`) holds the library's SHA-256:
a library and a description of another export (a copy of one without the other) are refused.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import tvm.runtime

from relay_ext.lowering.x86.amx_permission import AMX_INT8_FLAGS, request_tile_data

PathLike = Union[str, Path]
FORMAT = "quantfuse-deploy/1"  # model.json's "format"


class DeployError(ValueError):
    """A library, description or input that cannot be used as asked; one line saying what is
    wrong and how to fix it."""


def manifest_path(library: PathLike) -> Path:
    """Where the description of ``library`` lies: ``model.so`` -> ``model.json``."""
    return Path(library).with_suffix(".json")


def file_digest(path: PathLike) -> str:
    """The SHA-256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(library: PathLike) -> Dict[str, Any]:
    """``library``'s model.json, checked: the library exists, the description exists, is JSON
    of this format and names this very library (its SHA-256)."""
    library = Path(library)
    if not library.is_file():
        raise DeployError(f"library not found: {library}; pass the .so that 'quantfuse export' "
                          "wrote")
    path = manifest_path(library)
    if not path.is_file():
        raise DeployError(f"{path} is missing: {library} needs the model.json that 'quantfuse "
                          "export' wrote beside it (same name, .json)")
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError):
        raise DeployError(f"{path} is not JSON; export the model again") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DeployError(f"{path} is not a description 'quantfuse export' wrote (no \"format\": "
                          f"\"{FORMAT}\"); export the model again")
    if manifest.get("library", {}).get("sha256") != file_digest(library):
        raise DeployError(f"{library} is not the library {path.name} describes (its SHA-256 "
                          "differs); keep the .so and .json of one export together")
    return manifest


def check_inputs(manifest: Mapping[str, Any],
                 arrays: Union[Sequence[np.ndarray], Mapping[str, np.ndarray]]
                 ) -> Dict[str, np.ndarray]:
    """The arrays keyed by input name, each of the shape and dtype model.json gives it
    (positional arrays in model.json's order); DeployError naming the first that is not."""
    wanted = manifest["inputs"]
    names = [entry["name"] for entry in wanted]
    if isinstance(arrays, Mapping):
        unknown = sorted(set(arrays) - set(names))
        missing = [name for name in names if name not in arrays]
        if unknown or missing:
            raise DeployError(f"the model takes inputs {names}; got {sorted(arrays)}")
        given = dict(arrays)
    else:
        if len(arrays) != len(names):
            raise DeployError(f"the model takes {len(names)} input(s) {names}; got {len(arrays)}")
        given = dict(zip(names, arrays))
    checked = {}
    for entry in wanted:
        value = np.asarray(given[entry["name"]])
        shape, dtype = tuple(entry["shape"]), np.dtype(entry["dtype"])
        if value.shape != shape or value.dtype != dtype:
            raise DeployError(
                f"input {entry['name']!r} is {_describe(value.shape, value.dtype)}; the model "
                f"takes {_describe(shape, dtype)} (model.json)")
        checked[entry["name"]] = np.ascontiguousarray(value)
    return checked


def _describe(shape, dtype) -> str:
    return f"{'x'.join(map(str, shape)) or 'a scalar'} {np.dtype(dtype).name}"


class DeployedModel:
    """A loaded library: call it with numpy arrays (positional, in model.json's order, or by
    name), get the list of its outputs as numpy arrays."""

    def __init__(self, library: Path, manifest: Dict[str, Any], executor: tvm.runtime.Module,
                 device: tvm.runtime.Device, remote: Any = None):
        self.library = library
        self.manifest = manifest
        self.device = device
        self._executor = executor
        self._remote = remote  # an RPC session: kept alive as long as the model

    @property
    def inputs(self) -> List[Dict[str, Any]]:
        """model.json's inputs: name, shape, dtype."""
        return self.manifest["inputs"]

    @property
    def outputs(self) -> List[Dict[str, Any]]:
        """model.json's outputs: shape, dtype, scale, zero_point."""
        return self.manifest["outputs"]

    def set_inputs(self, *arrays: np.ndarray, **named: np.ndarray) -> None:
        """Check the inputs against model.json and hand them to the executor (not run)."""
        if arrays and named:
            raise DeployError("pass the inputs either in order or by name, not both")
        for name, value in check_inputs(self.manifest, named or arrays).items():
            self._executor["set_input"](name, tvm.runtime.ndarray.array(value, self.device))

    def run(self) -> List[np.ndarray]:
        """Run on the inputs set last; every output, copied back here."""
        self._executor["run"]()
        return [self._executor["get_output"](i).numpy()
                for i in range(self._executor["get_num_outputs"]())]

    def __call__(self, *arrays: np.ndarray, **named: np.ndarray) -> List[np.ndarray]:
        self.set_inputs(*arrays, **named)
        return self.run()

    def time(self, repeat: int, number: int = 1) -> List[float]:
        """Seconds per run on the inputs set last: ``repeat`` measurements, each the mean of
        ``number`` runs (TVM's ``time_evaluator``, on the device the model runs on)."""
        evaluator = self._executor.time_evaluator("run", self.device, number=number,
                                                  repeat=repeat)
        return [float(seconds) for seconds in evaluator().results]

    def median_ms(self, repeat: int) -> float:
        """The median of :meth:`time` (``repeat`` runs), in milliseconds."""
        return 1e3 * statistics.median(self.time(repeat))


def load(path: PathLike, device: Optional[tvm.runtime.Device] = None) -> DeployedModel:
    """The library ``path`` (``quantfuse export``'s ``model.so``) loaded with its model.json, on
    ``device`` (default this CPU). DeployError for a missing or mismatched description, for a
    file that is not a TVM library, and where the library uses AMX and the kernel does not
    grant this process AMX tile data."""
    library = Path(path)
    manifest = read_manifest(library)
    if manifest.get("amx") and not request_tile_data(AMX_INT8_FLAGS):
        raise DeployError(f"{library} was built with AMX ({manifest.get('target')}) and this "
                          "process may not use AMX tile data (a CPU or a Linux older than 5.16 "
                          "without it); export for this machine's target instead")
    module = load_library(library)
    device = device or tvm.runtime.cpu(0)
    return DeployedModel(library, manifest, graph_executor_of(module, library, device), device)


def load_library(library: PathLike) -> tvm.runtime.Module:
    """``tvm.runtime.load_module``, with a file that is not a TVM library as DeployError."""
    try:
        return tvm.runtime.load_module(str(library))
    except (tvm.TVMError, OSError, ValueError) as error:
        raise DeployError(f"{library} is not a TVM library ({_first_line(error)}); pass the .so "
                          "that 'quantfuse export' wrote") from None


def graph_executor_of(module: tvm.runtime.Module, library: PathLike,
                      device: tvm.runtime.Device) -> tvm.runtime.Module:
    """The graph executor of an exported Relay build (its ``default`` factory), on ``device``."""
    try:
        factory = module["default"]
    except (AttributeError, tvm.TVMError):
        raise DeployError(f"{library} is a library but not a Relay build that 'quantfuse export' "
                          "wrote (no 'default' executor factory)") from None
    return factory(device)


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    named = [line for line in lines if "Error" in line.split(":")[0] or "failed" in line]
    return (named or lines or [type(error).__name__])[-1][:200]
