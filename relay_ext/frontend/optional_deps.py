"""The optional packages of the ONNX path (``pip install 'quantfuse[onnx]'``), of the PT2E path
(``pip install 'quantfuse[pt2e]'``) and of bench's peer runtimes (``pip install 'quantfuse[peers]'``:
OpenVINO), imported on demand.

``onnx``, ``onnxruntime`` and ``torchao`` are not dependencies of quantfuse itself: a TorchScript
user needs none of them. Every ONNX function imports them through :func:`require_onnx` /
:func:`require_onnxruntime`, every PT2E one through :func:`require_torchao`, which turn a missing
or unusable package into one :class:`MissingDependency` with the pip command that fixes it.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from types import ModuleType

# The versions pyproject.toml's "onnx" extra pins (see there for why onnx is held at 1.16).
ONNX_VERSION = "1.16.2"
ONNXRUNTIME_VERSION = "1.32.0"
INSTALL_HINT = f"pip install 'quantfuse[onnx]' (onnx=={ONNX_VERSION}, onnxruntime=={ONNXRUNTIME_VERSION})"
# The version pyproject.toml's "pt2e" extra pins.
TORCHAO_VERSION = "0.18.0"
PT2E_INSTALL_HINT = f"pip install 'quantfuse[pt2e]' (torchao=={TORCHAO_VERSION})"
# The version pyproject.toml's "peers" extra pins.
OPENVINO_VERSION = "2026.4.1"
PEERS_INSTALL_HINT = f"pip install 'quantfuse[peers]' (openvino=={OPENVINO_VERSION})"


class MissingDependency(ImportError, ValueError):
    """An optional package is missing or unusable. An ImportError, and a ValueError so that the
    CLI's handling of bad input (one line, exit 2) covers it."""


def require_onnx() -> ModuleType:
    """The ``onnx`` module, usable by TVM 0.19's ONNX frontend, or :class:`MissingDependency`.

    TVM 0.19's frontend imports ``onnx.mapping``, which onnx 1.17 removed.
    """
    onnx = _import("onnx")
    if importlib.util.find_spec("onnx.mapping") is None:
        raise MissingDependency(
            f"onnx {onnx.__version__} is installed, but TVM 0.19's ONNX frontend needs onnx < 1.17 "
            f"(it imports onnx.mapping): {INSTALL_HINT}"
        )
    return onnx


def require_onnxruntime() -> ModuleType:
    """The ``onnxruntime`` module, or :class:`MissingDependency`."""
    return _import("onnxruntime")


def require_onnxruntime_quantization() -> ModuleType:
    """``onnxruntime.quantization`` (it needs onnx too), or :class:`MissingDependency`."""
    require_onnx()
    require_onnxruntime()
    return _import("onnxruntime.quantization")


def require_torchao() -> ModuleType:
    """``torchao.quantization.pt2e.quantize_pt2e`` (``prepare_pt2e``, ``convert_pt2e``), or
    :class:`MissingDependency`. Importing it also registers the ops torchao's quantized programs
    may call, so a saved program loads.

    torchao's first import logs warnings (optional native kernels that do not load for this torch
    build, torch's deprecation of an Enum registration); PT2E quantization uses none of what they
    are about, so those lines are kept out of the user's output.
    """
    quiet = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [quieted.level for quieted in quiet]
    for quieted in quiet:
        quieted.setLevel(logging.ERROR)
    try:
        return importlib.import_module("torchao.quantization.pt2e.quantize_pt2e")
    except ImportError as error:
        raise MissingDependency(
            f"PT2E models (.pt2 files, torch.export + torchao quantization) need the torchao package: "
            f"{PT2E_INSTALL_HINT}"
        ) from error
    finally:
        for quieted, level in zip(quiet, levels):
            quieted.setLevel(level)


def require_openvino() -> ModuleType:
    """The ``openvino`` module (bench's OpenVINO row), or :class:`MissingDependency`."""
    try:
        return importlib.import_module("openvino")
    except ImportError as error:
        raise MissingDependency(f"the OpenVINO row needs the openvino package: {PEERS_INSTALL_HINT}") from error


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise MissingDependency(f"the ONNX path needs the {name.split('.')[0]} package: {INSTALL_HINT}") from error
