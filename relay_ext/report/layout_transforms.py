"""Where a build copies activations from one blocked layout into another: its ``layout_transform``
kernels, each placed between two convs, at the model's input or at its output.

Relay's x86 layout pass gives every conv a channel-blocked layout (``NCHW16c``, ``NCHW64c`` ...);
where two convs connected through the graph were given different blocks, a ``layout_transform``
kernel copies the whole activation from one into the other, once per inference. One at the input
(the image into the first conv's blocks, fused with its quantize and pad) and one at the output
(back to a flat tensor before the classifier) are expected; any between two convs is a copy a
single blocked layout along the graph would not make.

    count = layout_transforms_of_module(mod, params, target)      # the fused graph, nothing built
    count = layout_transforms_of_graph_json(lib.get_graph_json())  # a build's graph
    count.between_convs, count.line()   # "layout_transform: 0 between convs, 1 at the input, ..."

A kernel is *between convs* when a conv runs before it and another after it along the graph
(through any other kernels: pools, adds, pads), *at the input* when no conv runs before it, *at
the output* when a conv runs before it and none after. Counts are kernel runs per inference (a
task reused by several layers counts once per layer); :attr:`LayoutTransformCount.tasks` names
the kernels.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Dict, List, Mapping, Optional, Sequence

import tvm
from tvm import relay

from tvm.target import Target

from relay_ext.lowering.tasks import fused_main

BETWEEN_CONVS, AT_INPUT, AT_OUTPUT = "between convs", "at the input", "at the output"
PLACES = (BETWEEN_CONVS, AT_INPUT, AT_OUTPUT)
LAYOUT_TRANSFORM = "layout_transform"
_CONV = re.compile(r"conv[123]d")
_GRAPH_JSON_PREFIX = re.compile(r"^tvmgen_[A-Za-z0-9]+_")


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One kernel run of a fused graph: its name, the Relay ops it holds (empty when only its name
    is known) and the kernels whose outputs it reads (indices into the graph's list)."""

    name: str
    inputs: Sequence[int]
    ops: Sequence[str] = ()

    @property
    def is_conv(self) -> bool:
        return any(_CONV.search(op) for op in self.ops) if self.ops else bool(_CONV.search(self.name))

    @property
    def is_layout_transform(self) -> bool:
        return LAYOUT_TRANSFORM in self.ops if self.ops else LAYOUT_TRANSFORM in self.name


@dataclasses.dataclass(frozen=True)
class PlacedTransform:
    """A ``layout_transform`` kernel: its name, where it sits, and how many times it runs."""

    task: str
    where: str
    runs: int


@dataclasses.dataclass(frozen=True)
class LayoutTransformCount:
    """The ``layout_transform`` kernel runs of one build, by place (see the module doc)."""

    tasks: List[PlacedTransform]

    def runs(self, where: str) -> int:
        return sum(t.runs for t in self.tasks if t.where == where)

    @property
    def between_convs(self) -> int:
        return self.runs(BETWEEN_CONVS)

    @property
    def at_input(self) -> int:
        return self.runs(AT_INPUT)

    @property
    def at_output(self) -> int:
        return self.runs(AT_OUTPUT)

    def line(self) -> str:
        """For people: ``layout_transform: 2 between convs (fused_nn_pad_layout_transform x2),
        1 at the input, 1 at the output`` (kernel runs per inference)."""
        between = [t for t in self.tasks if t.where == BETWEEN_CONVS]
        named = (f" ({', '.join(f'{t.task} x{t.runs}' if t.runs > 1 else t.task for t in between)})"
                 if between else "")
        return (f"layout_transform: {self.between_convs} between convs{named}, "
                f"{self.at_input} at the input, {self.at_output} at the output")

    def to_dict(self) -> Dict[str, object]:
        """``between_convs``, ``at_input``, ``at_output`` (kernel runs per inference) and
        ``tasks`` (``task``, ``where``, ``runs`` for each kernel)."""
        return {"between_convs": self.between_convs, "at_input": self.at_input,
                "at_output": self.at_output, "tasks": [dataclasses.asdict(t) for t in self.tasks]}


def count_layout_transforms(kernels: Sequence[Kernel]) -> LayoutTransformCount:
    """Place each ``layout_transform`` kernel of a fused graph (``kernels`` in topological order,
    each reading earlier ones) and count them by task name and place."""
    consumers: List[List[int]] = [[] for _ in kernels]
    for index, kernel in enumerate(kernels):
        for source in kernel.inputs:
            if not 0 <= source < index:
                raise ValueError(f"kernel {index} ({kernel.name}) reads kernel {source}: the "
                                 "kernels must be in topological order")
            consumers[source].append(index)
    conv_before = [False] * len(kernels)
    for index, kernel in enumerate(kernels):
        conv_before[index] = any(kernels[s].is_conv or conv_before[s] for s in kernel.inputs)
    conv_after = [False] * len(kernels)
    for index in reversed(range(len(kernels))):
        conv_after[index] = any(kernels[c].is_conv or conv_after[c] for c in consumers[index])
    runs: Dict[tuple, int] = {}
    for index, kernel in enumerate(kernels):
        if not kernel.is_layout_transform:
            continue
        where = (AT_INPUT if not conv_before[index] else
                 BETWEEN_CONVS if conv_after[index] else AT_OUTPUT)
        runs[(kernel.name, where)] = runs.get((kernel.name, where), 0) + 1
    return LayoutTransformCount([PlacedTransform(name, where, n) for (name, where), n in runs.items()])


def kernels_of_function(main: relay.Function) -> List[Kernel]:
    """The kernels of a fused ``main`` (:func:`relay_ext.lowering.tasks.fused_main`): one per call
    of a primitive function, named as TVM names its task (``fused_`` and its ops, without the
    suffix that tells apart tasks of the same name)."""
    index: Dict[relay.Expr, int] = {}
    kernels: List[Kernel] = []

    def sources(expr: relay.Expr) -> List[int]:
        if expr in index:
            return [index[expr]]
        if isinstance(expr, relay.TupleGetItem):
            return sources(expr.tuple_value)
        if isinstance(expr, relay.Tuple):
            return [s for field in expr.fields for s in sources(field)]
        return []

    def visit(expr: relay.Expr) -> None:
        if isinstance(expr, relay.Call) and isinstance(expr.op, relay.Function):
            ops: List[str] = []
            relay.analysis.post_order_visit(expr.op.body, lambda e: ops.append(e.op.name) if (
                isinstance(e, relay.Call) and isinstance(e.op, tvm.ir.Op)) else None)
            index[expr] = len(kernels)
            kernels.append(Kernel("fused_" + "_".join(op.replace(".", "_") for op in ops),
                                  [s for arg in expr.args for s in sources(arg)], ops))

    relay.analysis.post_order_visit(main.body, visit)
    return kernels


def kernels_of_graph_json(graph_json: str) -> List[Kernel]:
    """The kernels of a built graph-executor module (``lib.get_graph_json()``), named by their
    functions (TVM's ``tvmgen_default_`` prefix dropped): only names are known, so a conv is a
    kernel whose name has ``conv2d`` and a layout transform one whose name has
    ``layout_transform`` (TVM cuts names over 80 characters: an op past the cut is not seen)."""
    graph = json.loads(graph_json)
    kernel_of_node: Dict[int, int] = {}
    kernels: List[Kernel] = []
    for node_id, node in enumerate(graph["nodes"]):
        if node.get("op") != "tvm_op":
            continue
        name = _GRAPH_JSON_PREFIX.sub("", node.get("attrs", {}).get("func_name", node.get("name", "")))
        inputs = [kernel_of_node[entry[0]] for entry in node.get("inputs", ())
                  if entry[0] in kernel_of_node]
        kernel_of_node[node_id] = len(kernels)
        kernels.append(Kernel(name, inputs))
    return kernels


def layout_transforms_of_module(mod: tvm.IRModule, params: Optional[Mapping[str, tvm.nd.NDArray]],
                                target: Target, variant: str = "ours") -> LayoutTransformCount:
    """The layout transforms a build of ``mod`` for ``target`` runs, from its fused graph (the
    passes task extraction runs; nothing is lowered, tuned or built). ``target`` is taken as it
    is (no C compiler or CPU feature is needed: any x86 target can be counted on any host); pass
    it through :func:`relay_ext.lowering.targets.normalize_target` for what this host builds."""
    return count_layout_transforms(kernels_of_function(fused_main(mod, params, target, variant)))


def layout_transforms_of_graph_json(graph_json: str) -> LayoutTransformCount:
    """The layout transforms of a built module's graph (``lib.get_graph_json()``)."""
    return count_layout_transforms(kernels_of_graph_json(graph_json))
