"""relay_ext: the Relay/TE side of quantfuse -- models in, converter hook, tuning, build, bench,
deploy, CLI.

    model = relay_ext.load_model("tiny_resnet")            # or a .pt / .onnx / .pt2 file
    database = relay_ext.tune(model.mod, model.params, "host", work_dir="work", max_trials=64)
    compiled = relay_ext.compile(model, records=database)   # what bench's "TVM tuned" row times
    outputs = relay_ext.run_module(compiled, model.inputs)
    result = relay_ext.bench(model, records="work")        # TVM against every peer runtime

Importing the package imports nothing of TVM: every public name below (``relay_ext.tune``,
``relay_ext.load_model``, ``relay_ext.load`` ...) loads on first use. The tuning flow imports
TVM's tensor intrinsics and the models import PyTorch, 15-20 s together; every MetaSchedule
builder worker (a fresh process per batch of candidates) imports this package to unpickle
:func:`relay_ext.lowering.config.build_candidate`; and ``quantfuse run`` loads an exported
library with TVM's runtime alone (no Relay, no PyTorch), which an eager import here would defeat.
The ``inline_constants`` TE->TIR converter is registered when :mod:`relay_ext.lowering.config`
(``pass_config``, which every extraction, tune and build of quantfuse uses) is imported.
"""

import importlib as _importlib
import os as _os

# Relay's AutoTVM fallback would try to download TopHub logs; quantfuse never uses the network.
_os.environ.setdefault("TOPHUB_LOCATION", "NONE")

# public name -> (module, attribute in it; None for the module itself)
_LAZY = {
    "accuracy": ("relay_ext.report.accuracy", None),  # TVM-vs-PyTorch step error
    # a built-in model or a model file (TorchScript, QDQ ONNX, PT2E) -> LoadedModel
    "load_model": ("relay_ext.frontend.loader", "load_model"),
    # TVM's builds against the peer runtimes -> BenchResult (what `quantfuse bench` prints)
    "bench": ("relay_ext.latency.run", "bench"),
    # the one build entry point: bench's rows as its ``schedule`` ("tuned", "no-search", "default")
    "compile": ("relay_ext.build.entry", "compile"),
    "export": ("relay_ext.deploy.export", "export"),  # model.so + model.json, what bench timed
    "load": ("relay_ext.deploy.runtime", "load"),  # an exported model.so, TVM's runtime only
    "pass_config": ("relay_ext.lowering.config", "pass_config"),  # registers the converter
    "profile": ("relay_ext.latency.profile", "profile"),  # each fused op's time inside the model
    "extract_tasks": ("relay_ext.tuning", "extract_tasks"),
    "run_module": ("relay_ext.measure.run", "run_module"),  # a compiled model on numpy inputs
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
