"""Small helpers shared by the tuning flow and the accuracy checks: copy a Relay module, run a build."""

from __future__ import annotations

from typing import List, Mapping, Optional

import numpy as np
import tvm
from tvm.contrib import graph_executor


def copy_module(mod: tvm.IRModule) -> tvm.IRModule:
    """A deep copy of a Relay module (attributes included), through TVM's JSON serialization.

    Relay's QNN canonicalization writes the default ``rounding`` and ``compute_dtype`` into the
    attributes of every ``qnn.requantize`` it lowers (a ``const_cast`` in TVM's requantize.cc), which
    changes the caller's module; every build and extraction here works on a copy.
    """
    return tvm.ir.load_json(tvm.ir.save_json(mod))


def graph_module(
    lib: tvm.runtime.Module,
    inputs: Mapping[str, np.ndarray],
    device: Optional[tvm.runtime.Device] = None,
) -> graph_executor.GraphModule:
    """A graph executor for a compiled module (``relay.build``'s result), inputs already set."""
    module = graph_executor.GraphModule(lib["default"](device or tvm.cpu()))
    for name, value in inputs.items():
        module.set_input(name, value)
    return module


def run_module(
    lib: tvm.runtime.Module,
    inputs: Mapping[str, np.ndarray],
    device: Optional[tvm.runtime.Device] = None,
) -> List[np.ndarray]:
    """Run a compiled graph module (``relay.build``'s result) once on numpy inputs; every output."""
    module = graph_module(lib, inputs, device)
    module.run()
    return [module.get_output(i).numpy() for i in range(module.get_num_outputs())]
