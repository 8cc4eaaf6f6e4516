"""RejectFlatLayoutRewrite: keep out of the search CPU candidates whose weight layout Relay cannot build.

MetaSchedule's ``RewriteLayout`` postproc stores a layout-free parameter (the weight of a dense or
a conv) in the order its consumer's loops read it, in a block marked
``meta_schedule.layout_rewrite_preproc``. When those loops are one fused loop -- a dense whose
reduction was rfactor'd: the rfactor block's axes are all spatial, so
``RewriteParallelVectorizeUnroll`` fuses them all for ``parallel`` -- the new layout has a single
dimension::

    for ax0, ax1 in T.grid(32, 64):
        with T.block("p1_global"):                  # the (32, 64) weight of a dense
            v0, v1 = T.axis.remap("SS", [ax0, ax1])
            T.block_attr({"meta_schedule.layout_rewrite_preproc": T.bool(True)})
            p1_global[v0 * 64 + v1] = p1[v0, v1]    # written as (2048,)

The candidate builds and runs, so it is measured and may be the task's best record. But Relay
builds the model with that record by handing TOPI's dense the weight in the rewritten shape, and
``topi.nn.matmul`` asserts two dimensions *before* it restores the original shape ("1-dim matmul
is not supported yet"): the whole model fails to compile. This postproc, placed right after
``RewriteLayout``, rejects such candidates, so the search never measures one. A layout of two or
more dimensions, or a one-dimensional parameter kept one-dimensional, passes.
:func:`flattened_layout_rewrites` is the analysis alone, which compilation also uses to skip such
records in databases tuned without this postproc (``relay_ext.lowering.relay_build``).

Serves CPU targets (``"cpu"`` in the target's keys), placed right after ``RewriteLayout``.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import List, Tuple

import tvm
from tvm import tir
from tvm.meta_schedule.postproc import Postproc, PyPostproc, RewriteLayout
from tvm.meta_schedule.utils import derived_object
from tvm.target import Target
from tvm.tir.schedule import Schedule

from meta_rules.base.placement import Placement

logger = logging.getLogger(__name__)

PREPROC_ANNOTATION = "meta_schedule.layout_rewrite_preproc"


@dataclasses.dataclass(frozen=True)
class FlatLayoutRewrite:
    """A layout-rewrite block that stores a parameter of ``original`` shape as ``rewritten``."""

    block: str
    parameter: str
    original: Tuple[int, ...]
    rewritten: Tuple[int, ...]

    def __str__(self) -> str:
        return (f"block {self.block!r} stores {self.parameter} {_shape(self.original)} as "
                f"{_shape(self.rewritten)}")


def _shape(shape: Tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _static_shape(buffer: tir.Buffer) -> Tuple[int, ...]:
    return tuple(int(d) if isinstance(d, tir.IntImm) else -1 for d in buffer.shape)


def is_flat_rewrite(block: tir.Block) -> bool:
    """A layout-rewrite block that writes fewer than two dimensions from a parameter of two or
    more."""
    if PREPROC_ANNOTATION not in block.annotations or len(block.reads) != 1 or len(block.writes) != 1:
        return False
    return len(block.writes[0].buffer.shape) < 2 <= len(block.reads[0].buffer.shape)


def flattened_layout_rewrites(func: tir.PrimFunc) -> List[FlatLayoutRewrite]:
    """Every layout-rewrite block of ``func`` that flattens a parameter to one dimension (or none),
    in program order; empty when there is none."""
    found: List[FlatLayoutRewrite] = []

    def visit(node) -> None:
        if isinstance(node, tir.Block) and is_flat_rewrite(node):
            source, target = node.reads[0].buffer, node.writes[0].buffer
            found.append(FlatLayoutRewrite(node.name_hint, source.name, _static_shape(source),
                                           _static_shape(target)))

    tir.stmt_functor.post_order_visit(func.body, visit)
    return found


def module_flat_rewrites(mod: tvm.IRModule) -> List[FlatLayoutRewrite]:
    """:func:`flattened_layout_rewrites` over every PrimFunc of ``mod``."""
    return [found for _, func in mod.functions.items() if isinstance(func, tir.PrimFunc)
            for found in flattened_layout_rewrites(func)]


@derived_object
class RejectFlatLayoutRewrite(PyPostproc, Placement):
    """Reject candidates whose ``RewriteLayout`` flattened a weight to one dimension (see the
    module doc)."""

    def is_target_available(self, target: Target) -> bool:
        return "cpu" in target.keys

    def follows(self, default: object) -> bool:
        return isinstance(default, RewriteLayout)

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch: Schedule) -> bool:
        try:
            flat = module_flat_rewrites(sch.mod)
        except Exception:  # pylint: disable=broad-except
            # An exception must not reach the search's C++ worker thread: reject, and say so.
            logger.exception("RejectFlatLayoutRewrite failed on a candidate")
            return False
        if flat and logger.isEnabledFor(logging.DEBUG):
            logger.debug("RejectFlatLayoutRewrite rejects a candidate: %s", "; ".join(map(str, flat)))
        return not flat

    def clone(self) -> Postproc:
        return RejectFlatLayoutRewrite()

    def __str__(self) -> str:
        return "RejectFlatLayoutRewrite"
