"""A compiled Relay module (``relay.build``'s result) run on numpy inputs with the graph executor."""

from __future__ import annotations
from typing import List, Mapping, Optional
import numpy as np
import tvm
from tvm.contrib import graph_executor


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
