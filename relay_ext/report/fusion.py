"""The static fusion report behind ``quantfuse fusion``: no tuning, only design spaces.

For each tuning task of a Relay module: its anchor op, and under each variant the number of
global-memory intermediates its design spaces leave (:func:`meta_rules.measure.fusion.global_intermediates`,
the worst space) and the bytes of global traffic they cost: each such buffer is written once and
read back once, so ``elements x dtype bytes x 2``. Totals per variant at the end. A task that keeps
its TOPI schedule (the int16 convs of x86 targets without VNNI) has no design space to measure:
its result says :data:`~relay_ext.schedules.topi_only.TOPI_SCHEDULE`.

    report = fusion_report(m.mod, m.params, "nvidia/nvidia-a100", variants=("legacy", "ours"))
    report.totals["ours"]["intermediates"], report.tasks[0].variants["legacy"].bytes
    report.layout_transforms.between_convs   # layout_transform kernels between two convs

The report also places the graph's ``layout_transform`` kernels (between two convs, at the
input, at the output: :mod:`relay_ext.report.layout_transforms`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import tvm
from tvm import meta_schedule as ms
from tvm import tir

import meta_rules
from meta_rules.base.tvm_errors import QuantfuseBug, is_tvm_failure, tvm_error_message
from meta_rules.generic.resilient_space_generator import (
    DesignSpaceGenerationError,
    GenerationOutcome,
    ResilientPostOrderApply,
)
from meta_rules.measure import fusion
from meta_rules.rule_sets import TargetLike, check_variant

from relay_ext.lowering.config import pass_config
from relay_ext.lowering.prefold import prefold_or_keep
from relay_ext.lowering.targets import normalize_target
from relay_ext.lowering.tasks import lowered_tasks
from relay_ext.report.layout_transforms import LayoutTransformCount, layout_transforms_of_module
from relay_ext.schedules.topi_only import TOPI_SCHEDULE, topi_only


logger = logging.getLogger(__name__)

DESIGN_SPACE = "design space"  # no design space could be generated (TVM's rules)
MEASURE = "measure"            # the spaces were generated; the fusion measure failed on one


@dataclasses.dataclass
class VariantResult:
    """One task under one variant: the worst design space's intermediates and their traffic."""

    intermediates: int          # max over design spaces
    bytes: int                  # max over design spaces: sum of buffer bytes x 2 (write + read)
    buffers: List[str]          # the buffers of the space with the most intermediates
    spaces: int                 # number of design spaces generated
    generation: str = "ok"      # how the spaces were generated (ResilientPostOrderApply's outcome)
    failed: Optional[str] = None  # TVM's reason when the task could not be reported
    failed_in: Optional[str] = None  # where it failed: DESIGN_SPACE or MEASURE


@dataclasses.dataclass
class TaskFusion:
    name: str
    anchor: str                 # the op the task is built around (conv2d, dense, pool ...)
    weight: float
    variants: Dict[str, VariantResult]


@dataclasses.dataclass
class FusionReport:
    target: str
    variants: List[str]
    tasks: List[TaskFusion]
    # the graph's layout_transform kernels by place (None: not counted)
    layout_transforms: Optional[LayoutTransformCount] = None

    @property
    def totals(self) -> Dict[str, Dict[str, int]]:
        """Per variant: intermediates and bytes summed over the tasks whose design spaces were
        generated, the tasks with any intermediate, and the tasks that failed and those that keep
        TOPI's schedule (no design space: :mod:`relay_ext.schedules.topi_only`), counted apart."""
        return {
            v: {
                "intermediates": sum(t.variants[v].intermediates for t in self.tasks),
                "bytes": sum(t.variants[v].bytes for t in self.tasks),
                "tasks_with_intermediates": sum(t.variants[v].intermediates > 0 for t in self.tasks),
                "tasks_failed": sum(t.variants[v].failed is not None for t in self.tasks),
                "tasks_topi_schedule": sum(t.variants[v].generation == TOPI_SCHEDULE
                                           for t in self.tasks),
            }
            for v in self.variants
        }

    def to_dict(self) -> Dict:
        return {
            "target": self.target,
            "variants": list(self.variants),
            "tasks": [dataclasses.asdict(t) for t in self.tasks],
            "totals": self.totals,
            "layout_transforms": (None if self.layout_transforms is None
                                  else self.layout_transforms.to_dict()),
        }


def parse_variants(text: str) -> List[str]:
    """``"legacy,upstream,ours"`` -> a list of checked variant names (ValueError on an unknown one)."""
    names = [v.strip() for v in text.split(",") if v.strip()]
    if not names:
        raise ValueError(f"no variant given; use a comma-separated list of {', '.join(meta_rules.VARIANTS)}")
    for name in names:
        check_variant(name)
    return list(dict.fromkeys(names))


def fusion_report(
    mod: tvm.IRModule,
    params: Optional[Mapping[str, tvm.nd.NDArray]],
    target: TargetLike,
    variants: Sequence[str] = ("legacy", "upstream", "ours"),
    rand_state: int = 1,
) -> FusionReport:
    """The fusion report of a Relay module on ``target`` (design spaces only, nothing is tuned).

    Tasks are extracted under each variant (its TE->TIR converter decides how Relay's constants
    reach the TIR) and paired by position (the task list is the same); each variant's design
    spaces are generated for its own TIR, as a tune generates them
    (:class:`ResilientPostOrderApply`: other random states, then without the failing rule). A
    task whose spaces cannot be generated at all, or whose spaces the fusion measure fails on
    (:func:`_measure`), is reported as failed with TVM's reason, and the report goes on with the
    other tasks. The graph's ``layout_transform`` kernels are placed and counted
    (:func:`~relay_ext.report.layout_transforms.layout_transforms_of_module`).
    """
    variants = [check_variant(v) for v in variants]
    target = normalize_target(target)
    # the Relay-level folding is the variants' alike (they differ in their TE->TIR converter):
    # done once here, every extraction and the layout count start from it
    mod, params = prefold_or_keep(mod, params, target, pass_config(variants[0]))
    per_variant = {v: _tasks(mod, params, target, v) for v in variants}
    tasks = per_variant[variants[0]]
    for variant, others in per_variant.items():
        if [t.task_name for t in others] != [t.task_name for t in tasks]:
            raise RuntimeError(f"variant {variant} extracts other tasks than {variants[0]}; "
                               "the per-task report cannot pair them")
    rows = []
    for index, task in enumerate(tasks):
        results = {}
        for variant in variants:
            task_mod = per_variant[variant][index].dispatched[0]
            if topi_only(task_mod) is not None:  # MetaSchedule designs nothing there
                results[variant] = VariantResult(0, 0, [], 0, TOPI_SCHEDULE)
                continue
            spaces, outcome = _design_spaces(task_mod, target, variant, rand_state, task.task_name)
            if spaces is None:
                results[variant] = VariantResult(0, 0, [], 0, outcome.describe(),
                                                 failed=_first_reason(outcome),
                                                 failed_in=DESIGN_SPACE)
                continue
            results[variant] = _measure(spaces, outcome.describe(), task.task_name, variant)
        rows.append(TaskFusion(task.task_name, anchor_op(task.dispatched[0], task.task_name),
                               float(task.weight), results))
    return FusionReport(str(target), variants, rows,
                        layout_transforms_of_module(mod, params, target, variants[0]))


def _tasks(mod: tvm.IRModule, params: Optional[Mapping[str, tvm.nd.NDArray]],
           target: tvm.target.Target, variant: str) -> list:
    """The tuning tasks under ``variant``; a TVM failure in Relay's lowering of the imported module
    is no fault of the user's: a :class:`QuantfuseBug` naming the step (and op when TVM says)."""
    try:
        return lowered_tasks(mod, params, target, variant)
    except Exception as error:
        if is_tvm_failure(error):
            raise QuantfuseBug(f"extracting the tuning tasks (variant {variant})", error) from error
        raise


def _design_spaces(mod: tvm.IRModule, target: tvm.target.Target, variant: str, rand_state: int,
                   task_name: str) -> Tuple[Optional[List[tir.Schedule]], GenerationOutcome]:
    """The task's design spaces under ``variant`` as a tune generates them (None when every
    attempt failed), with how they were generated."""
    space = ResilientPostOrderApply(*meta_rules.rule_set(target, variant))
    context = ms.TuneContext(mod=mod, target=target, space_generator=space,
                             rand_state=rand_state, task_name=task_name)
    try:
        return list(context.generate_design_space()), space.outcome
    except DesignSpaceGenerationError:
        return None, space.outcome


def _measure(spaces: List[tir.Schedule], generation: str, task_name: str,
             variant: str) -> VariantResult:
    """The worst of ``spaces`` by the fusion measure; a task whose measure fails on any space
    (TVM's lowering passes raising, say) is failed with the reason, and the caller goes on."""
    per_space = []
    for index, space in enumerate(spaces):
        try:
            names = fusion.global_intermediates(space.mod)
        except Exception as error:  # noqa: BLE001 - one task's failure is reported, not raised
            reason = f"design space {index + 1} of {len(spaces)}: {tvm_error_message(error)}"
            logger.warning("fusion measure failed on task %s (%s): %s", task_name, variant, reason,
                           exc_info=logger.isEnabledFor(logging.DEBUG))
            return VariantResult(0, 0, [], len(spaces), generation, failed=reason, failed_in=MEASURE)
        sizes = _buffer_bytes(space.mod)
        per_space.append((names, sum(2 * sizes.get(n, 0) for n in names)))
    worst = max(per_space, key=lambda p: (len(p[0]), p[1]), default=([], 0))
    return VariantResult(intermediates=len(worst[0]), bytes=max((p[1] for p in per_space), default=0),
                         buffers=sorted(worst[0]), spaces=len(spaces), generation=generation)


def _first_reason(outcome: GenerationOutcome) -> str:
    """TVM's reason of the first failed attempt, without the attempt's random state."""
    first = outcome.failures[0] if outcome.failures else "no design space"
    return first.split(": ", 1)[1] if first.startswith("rand_state ") and ": " in first else first


# Relay ops a fused task is named after (``fused_nn_<op>_...``), longest first.
_KNOWN_NN_OPS = sorted([
    "contrib_conv2d_NCHWc", "contrib_conv2d_winograd_without_weight_transform",
    "contrib_dense_pack", "conv2d_transpose", "conv2d", "conv1d", "conv3d", "dense",
    "batch_matmul", "matmul", "adaptive_avg_pool2d", "adaptive_max_pool2d", "global_avg_pool2d",
    "global_max_pool2d", "avg_pool2d", "max_pool2d", "pad", "softmax", "relu", "bias_add",
], key=len, reverse=True)


def anchor_op(mod: tvm.IRModule, task_name: str = "") -> str:
    """The op a task is built around: the Relay op its name starts with when that is an ``nn`` op
    (``fused_nn_conv2d_add_...`` -> ``nn.conv2d``), else its first reduction block in the TIR,
    else the first op of its name marked ``(injective)``."""
    name = re.sub(r"^fused_", "", task_name)
    if name.startswith("nn_"):
        for op in _KNOWN_NN_OPS:
            if name[3:] == op or name[3:].startswith(op + "_"):
                return f"nn.{op}"
    reductions: List[str] = []
    for func in mod.functions.values():
        if isinstance(func, tir.PrimFunc):
            tir.stmt_functor.post_order_visit(func.body, lambda node: reductions.append(node.name_hint)
                                              if isinstance(node, tir.Block) and any(
                                                  iv.iter_type == tir.IterVar.CommReduce
                                                  for iv in node.iter_vars) else None)
    # post_order_visit meets sibling blocks in program order: the first reduction comes first.
    if reductions and reductions[0] != "compute":
        return re.sub(r"^T_", "", re.sub(r"_\d+$", "", reductions[0]))
    first = name.split("_")[0] if name else "?"
    return f"{first} ({'reduction' if reductions else 'injective'})"


def _buffer_bytes(mod: tvm.IRModule) -> Dict[str, int]:
    """Bytes of every allocated buffer of ``mod``, keyed like :func:`fusion.global_intermediates`."""
    funcs = [(gv.name_hint, f) for gv, f in mod.functions.items() if isinstance(f, tir.PrimFunc)]
    sizes: Dict[str, int] = {}
    for func_name, func in funcs:
        def visit(node, func_name=func_name):
            if isinstance(node, tir.Block):
                for buf in node.alloc_buffers:
                    key = buf.name if len(funcs) == 1 else f"{func_name}/{buf.name}"
                    sizes[key] = _nbytes(buf)

        tir.stmt_functor.post_order_visit(func.body, visit)
    return sizes


def _nbytes(buf: tir.Buffer) -> int:
    elements = 1
    for dim in buf.shape:
        if not isinstance(dim, (tir.IntImm, int)):
            return 0  # a symbolic shape: no static size
        elements *= int(dim)
    dtype = tvm.DataType(buf.dtype)
    return elements * ((dtype.bits * dtype.lanes + 7) // 8)
