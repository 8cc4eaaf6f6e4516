"""relay_ext: the Relay/TE side of quantfuse -- converter hook, models, tuning flow, CLI.

Importing the package registers the ``inline_constants`` TE->TIR converter and nothing heavier.
The public names below (``relay_ext.tune``, ``relay_ext.frontend.models`` ...) load on first use: the
tuning flow imports TVM's tensor intrinsics and the models import PyTorch, 15-20 s together,
and every MetaSchedule builder worker (a fresh process per batch of candidates) imports this
package to unpickle :func:`relay_ext.lowering.config.build_candidate`, so an eager import cost every
tuning round that much.
"""

import importlib as _importlib
import os as _os

# Relay's AutoTVM fallback would try to download TopHub logs; quantfuse never uses the network.
_os.environ.setdefault("TOPHUB_LOCATION", "NONE")

from .lowering import tir_converter  # registers relay.backend.tir_converter.inline_constants
from .lowering.config import pass_config

# public name -> (module, attribute in it; None for the module itself)
_LAZY = {
    "accuracy": ("relay_ext.report.accuracy", None),  # TVM-vs-PyTorch step error
    "models": ("relay_ext.frontend.models", None),  # quantized PyTorch models: relay_ext.frontend.models.load
    "compile": ("relay_ext.tuning", "compile_model"),  # the name: relay_ext.compile
    "extract_tasks": ("relay_ext.tuning", "extract_tasks"),
    "run_module": ("relay_ext.tuning", "run_module"),
    "tune": ("relay_ext.tuning", "tune"),
}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'relay_ext' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = _importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
