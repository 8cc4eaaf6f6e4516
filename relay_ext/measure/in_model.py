"""Each task's kernel timed inside the whole model: what the per-task schedule choice compares.

    times = profile_in_model({"record": lib_a, "rule design": lib_b, "default": lib_c}, inputs)
    times["record"]["fused_nn_contrib_conv2d_..."]    # ms per call, median of the rounds

Why not each task alone: a task's function built and run by itself, again and again (what
MetaSchedule's runner and :func:`relay_ext.schedules.task_choice.time_task` do), finds its weights
and its input warm in the caches. Inside the model its weights come cold and its input from the
layer before, and a schedule faster alone can be slower there (docs/BENCHMARKS.md, "Tasks timed
alone and inside the model").

How: the builds compared are whole models of the same Relay graph (the same fused functions,
by name; only their schedules differ). Each runs in TVM's debug graph executor, which times
every kernel call of one run of the model (``profile``); the builds take turns, ``rounds`` times,
so that a change of load hits them alike, and each function's time per call is the median over
the rounds of its calls' total divided by their number. The debug executor times kernel calls
only, on the calling thread's TVM pool (call it where the pool has the model's threads).
"""

from __future__ import annotations

import collections
import logging
import statistics
import tempfile
from typing import Dict, List, Mapping

import numpy as np
import tvm

logger = logging.getLogger(__name__)

ROUNDS = 7
PREFIX = "tvmgen_default_"  # Relay's name for a model's kernels: this prefix + the fused function


def kernel_name(name: str) -> str:
    """A profiled kernel's name as MetaSchedule's task extraction names its task."""
    return name[len(PREFIX):] if name.startswith(PREFIX) else name


def _debug_module(lib: tvm.runtime.Module, inputs: Mapping[str, np.ndarray], dump_root: str):
    from tvm.contrib import graph_executor  # pylint: disable=import-outside-toplevel
    from tvm.contrib.debugger import debug_executor  # pylint: disable=import-outside-toplevel

    module = debug_executor.create(lib.get_graph_json(), lib.get_lib(), tvm.cpu(),
                                   dump_root=dump_root)
    module.set_input(**lib.get_params())
    for name, value in inputs.items():
        module.set_input(name, value)
    # warm-up, page in the code and the weights once: the plain graph executor's run (the debug
    # executor's own run() prints a table of every node to stdout)
    graph_executor.GraphModule.run(module)
    return module


def _one_run(module) -> Dict[str, float]:
    """Total ms and number of calls per kernel name in one profiled run of the model."""
    totals: Dict[str, float] = collections.defaultdict(float)
    calls: Dict[str, int] = collections.defaultdict(int)
    for call in module.profile().calls:
        name = kernel_name(str(call["Name"]))
        totals[name] += call["Duration (us)"].microseconds / 1e3
        calls[name] += 1
    return {name: totals[name] / calls[name] for name in totals}


def profiled_runs(lib: tvm.runtime.Module, inputs: Mapping[str, np.ndarray], rounds: int = ROUNDS) -> List:
    """``rounds`` profiled runs of one build in the debug executor (after a warm-up run): each
    run's ``tvm.runtime.profiling.Report``, every kernel call timed and the run's total."""
    with tempfile.TemporaryDirectory(prefix="quantfuse-profile-") as dump_root:
        module = _debug_module(lib, inputs, dump_root)
        return [module.profile() for _ in range(rounds)]


def profile_in_model(libs: Mapping[str, tvm.runtime.Module], inputs: Mapping[str, np.ndarray],
                     rounds: int = ROUNDS) -> Dict[str, Dict[str, float]]:
    """Per build (label -> graph executor factory of the same graph), per kernel (the task name),
    its milliseconds per call inside the model: the median of ``rounds`` interleaved profiled
    runs (see the module doc)."""
    with tempfile.TemporaryDirectory(prefix="quantfuse-profile-") as dump_root:
        modules = {label: _debug_module(lib, inputs, dump_root) for label, lib in libs.items()}
        runs: Dict[str, list] = {label: [] for label in libs}
        for _ in range(rounds):
            for label, module in modules.items():
                runs[label].append(_one_run(module))
    medians = {}
    for label, samples in runs.items():
        names = set().union(*samples)
        medians[label] = {name: statistics.median(s.get(name, 0.0) for s in samples)
                          for name in names}
    return medians
