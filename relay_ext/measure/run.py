"""A compiled Relay model run on numpy inputs with the graph executor.

    outputs = run_module(relay_ext.compile(loaded), loaded.inputs)   # every output, numpy
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional

import numpy as np
import tvm
from tvm.contrib import graph_executor
from tvm.relay.backend.executor_factory import ExecutorFactoryModule


def executor_factory(built: Any) -> Any:
    """The graph executor factory of ``built``: ``relay.build``'s result or a loaded library as
    given, ``relay_ext.compile``'s result (:class:`relay_ext.build.Compiled`) its ``lib``."""
    if isinstance(built, (ExecutorFactoryModule, tvm.runtime.Module)):
        return built
    return built.lib


def graph_module(
    lib: Any,
    inputs: Mapping[str, np.ndarray],
    device: Optional[tvm.runtime.Device] = None,
) -> graph_executor.GraphModule:
    """A graph executor for a compiled model (``relay.build``'s or ``relay_ext.compile``'s
    result), inputs already set."""
    module = graph_executor.GraphModule(executor_factory(lib)["default"](device or tvm.cpu()))
    for name, value in inputs.items():
        module.set_input(name, value)
    return module


def run_module(
    lib: Any,
    inputs: Mapping[str, np.ndarray],
    device: Optional[tvm.runtime.Device] = None,
) -> List[np.ndarray]:
    """Run a compiled model (``relay_ext.compile``'s result, or ``relay.build``'s) once on numpy
    inputs; every output."""
    module = graph_module(lib, inputs, device)
    module.run()
    return [module.get_output(i).numpy() for i in range(module.get_num_outputs())]
