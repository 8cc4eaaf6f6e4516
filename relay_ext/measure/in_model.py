"""Each task's kernel timed inside the whole model: what the per-task schedule choice compares.

    times = profile_in_model({"record": lib_a, "rule design": lib_b, "default": lib_c}, inputs,
                             tasks)
    times["record"]["fused_nn_contrib_conv2d_..."]    # a task's kernel: ms per call, median

Why not each task alone: a task's function built and run by itself, again and again (what
MetaSchedule's runner and :func:`relay_ext.schedules.task_choice.time_task` do), finds its weights
and its input warm in the caches. Inside the model its weights come cold and its input from the
layer before, and a schedule faster alone can be slower there (docs/BENCHMARKS.md, "Tasks timed
alone and inside the model").

How: the builds compared are whole models of the same Relay graph (the same fused functions;
only their schedules differ). A kernel is known by the task it runs (:func:`kernel_tasks`), not
by its name: Relay's build names its kernels in the order it lowers them and MetaSchedule's task
extraction names its tasks in another, so one name can be two different functions (14 of
MobileNetV2's 50 tasks on the AMX target). Each runs in TVM's debug graph executor, which times
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
from typing import Dict, List, Mapping, NamedTuple, Sequence, Tuple

import numpy as np
import tvm
from tvm import meta_schedule as ms

logger = logging.getLogger(__name__)

ROUNDS = 7
PREFIX = "tvmgen_default_"  # Relay's name for a model's kernels: this prefix + the fused function


def kernel_name(name: str) -> str:
    """A profiled kernel's name as MetaSchedule's task extraction names its task."""
    return name[len(PREFIX):] if name.startswith(PREFIX) else name


def _untyped(func: tvm.relay.Function) -> tvm.relay.Function:
    """``func`` with parameters of no type: what is left when a build rewrote a weight's layout
    (MetaSchedule's layout rewrite gives a dense's weight parameter another shape)."""
    fresh = [tvm.relay.var(param.name_hint) for param in func.params]
    return tvm.relay.Function(fresh, tvm.relay.bind(func.body, dict(zip(func.params, fresh))))


class _Function(NamedTuple):
    """A fused Relay function as :func:`kernel_tasks` compares it."""

    typed: tvm.relay.Function  # parameters and body, no attributes
    untyped: tvm.relay.Function
    result: tvm.ir.Type

    @classmethod
    def of(cls, func: tvm.relay.Function) -> "_Function":
        return cls(tvm.relay.Function(list(func.params), func.body), _untyped(func), func.ret_type)

    def key(self) -> int:
        return tvm.ir.structural_hash(self.untyped, map_free_vars=True)

    def alike(self, other: "_Function") -> bool:
        """The same ops, with the same result type, on parameters of the same types but one (a
        weight whose layout the build rewrote)."""
        if not (tvm.ir.structural_equal(self.untyped, other.untyped, map_free_vars=True)
                and tvm.ir.structural_equal(self.result, other.result)):
            return False
        differ = [not tvm.ir.structural_equal(mine.type_annotation, theirs.type_annotation)
                  for mine, theirs in zip(self.typed.params, other.typed.params)]
        return sum(differ) <= 1

    def same(self, other: "_Function") -> bool:
        return tvm.ir.structural_equal(self.typed, other.typed, map_free_vars=True)


def kernel_tasks(lib: tvm.runtime.Module, tasks: Sequence[ms.ExtractedTask]) -> Dict[str, str]:
    """Kernel name (:func:`kernel_name` of a built model's function) -> the name of the task of
    ``tasks`` it runs: the task whose fused Relay function is the kernel's (the build keeps each
    kernel's Relay function in ``lib.function_metadata``), else, where the build rewrote a
    weight's layout, the one task with the same ops and output type on parameters of the same
    types but one. A kernel no task matches (a build of another module; a kernel of a module
    loaded from a file, which keeps no metadata) is left out."""
    by_key: Dict[int, List[Tuple[str, _Function]]] = collections.defaultdict(list)
    for task in tasks:
        (_, func), = task.mod.functions.items()
        function = _Function.of(func)
        by_key[function.key()].append((str(task.task_name), function))
    found: Dict[str, str] = {}
    for symbol, info in getattr(lib, "function_metadata", {}).items():
        if not info.tir_primfuncs:  # the graph's main function, no kernel
            continue
        for func in info.relay_primfuncs.values():
            kernel = _Function.of(func)
            alike = [(name, task) for name, task in by_key.get(kernel.key(), ())
                     if task.alike(kernel)]
            exact = [name for name, task in alike if task.same(kernel)]
            if exact or len(alike) == 1:
                found[kernel_name(str(symbol))] = (exact or [alike[0][0]])[0]
    return found


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


def _one_run(module, tasks: Mapping[str, str]) -> Dict[str, float]:
    """Ms per call of each kernel in one profiled run of the model, keyed by the name of its task
    (``tasks``: :func:`kernel_tasks`; a kernel without a task is left out)."""
    totals: Dict[str, float] = collections.defaultdict(float)
    calls: Dict[str, int] = collections.defaultdict(int)
    for call in module.profile().calls:
        name = kernel_name(str(call["Name"]))
        if name not in tasks:
            continue
        name = tasks[name]
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
                     tasks: Sequence[ms.ExtractedTask],
                     rounds: int = ROUNDS) -> Dict[str, Dict[str, float]]:
    """Per build (label -> graph executor factory of the same graph), per task of ``tasks``
    (its name), its kernel's milliseconds per call inside the model: the median of ``rounds``
    interleaved profiled runs (see the module doc)."""
    names = {label: kernel_tasks(lib, tasks) for label, lib in libs.items()}
    with tempfile.TemporaryDirectory(prefix="quantfuse-profile-") as dump_root:
        modules = {label: _debug_module(lib, inputs, dump_root) for label, lib in libs.items()}
        runs: Dict[str, list] = {label: [] for label in libs}
        for _ in range(rounds):
            for label, module in modules.items():
                runs[label].append(_one_run(module, names[label]))
    medians = {}
    for label, samples in runs.items():
        names = set().union(*samples)
        medians[label] = {name: statistics.median(s.get(name, 0.0) for s in samples)
                          for name in names}
    return medians
