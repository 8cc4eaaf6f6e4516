"""The optional packages of the ONNX path (``pip install 'quantfuse[onnx]'``), imported on demand.

``onnx`` and ``onnxruntime`` are not dependencies of quantfuse itself: a TorchScript user needs
neither. Every ONNX function imports them through :func:`require_onnx` /
:func:`require_onnxruntime`, which turn a missing or unusable package into one
:class:`MissingDependency` with the pip command that fixes it.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

# The versions pyproject.toml's "onnx" extra pins (see there for why onnx is held at 1.16).
ONNX_VERSION = "1.16.2"
ONNXRUNTIME_VERSION = "1.32.0"
INSTALL_HINT = f"pip install 'quantfuse[onnx]' (onnx=={ONNX_VERSION}, onnxruntime=={ONNXRUNTIME_VERSION})"


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


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise MissingDependency(f"the ONNX path needs the {name.split('.')[0]} package: {INSTALL_HINT}") from error
