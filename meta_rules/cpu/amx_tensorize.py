"""TensorizeAMXConv: the postproc half of :class:`~meta_rules.cpu.amx_conv.AMXConv`.

The rule tiles an eligible conv and marks each block it blockized with the annotation
``quantfuse.amx_conv_intrinsic = <intrinsic name>``; this postproc, placed after
``RewriteParallelVectorizeUnroll`` and ``RewriteReductionBlock`` and before ``RewriteTensorize``,
decomposes each marked block's reduction and tensorizes it with that intrinsic
(:mod:`meta_rules.cpu.amx_intrinsics`; why the work is split so: :func:`meta_rules.cpu.amx_conv.schedule_amx_conv`).
A candidate where that fails is rejected.
"""

from __future__ import annotations

import logging
from typing import List, Tuple

import tvm
from tvm import tir
from tvm.meta_schedule.postproc import Postproc, PyPostproc, RewriteReductionBlock
from tvm.meta_schedule.utils import derived_object
from tvm.target import Target
from tvm.tir.schedule import Schedule

from meta_rules.base.placement import Placement
from meta_rules.base.tvm_errors import tvm_error_message
from meta_rules.cpu.amx_conv import AMX_ANNOTATION
from meta_rules.cpu.amx_intrinsics import register_intrinsic, shape_of_intrinsic
from meta_rules.cpu.amx_tiles import target_has_amx

logger = logging.getLogger(__name__)


def marked_blocks(sch: Schedule) -> List[Tuple[str, str]]:
    """(block name, intrinsic) of every block :class:`AMXConv` marked."""
    marked: List[Tuple[str, str]] = []
    for _, func in sch.mod.functions.items():
        if not isinstance(func, tir.PrimFunc):
            continue

        def visit(node):
            if isinstance(node, tir.Block) and AMX_ANNOTATION in node.annotations:
                marked.append((node.name_hint, str(node.annotations[AMX_ANNOTATION])))

        tir.stmt_functor.post_order_visit(func.body, visit)
    return marked


def tensorize_marked(sch: Schedule) -> int:
    """Decompose and tensorize every block :class:`AMXConv` marked; how many."""
    tensorized = 0
    for name, intrinsic in marked_blocks(sch):
        block = sch.get_block(name)
        sch.unannotate(block, AMX_ANNOTATION)
        if not any(it.iter_type == tir.IterVar.CommReduce for it in sch.get(block).iter_vars):
            continue  # the init block RewriteReductionBlock split off (with the annotations)
        shape = shape_of_intrinsic(intrinsic)
        if shape is not None:  # (a name of ours: registered, also in a fresh process)
            register_intrinsic(shape)
        if sch.get(block).init is not None:  # else RewriteReductionBlock decomposed it, at the
            # chunk loop of the second design (the accumulators are zeroed once, not per chunk)
            init = sch.decompose_reduction(block, sch.get_loops(block)[-1])
            if shape is not None and shape.zeroed:  # the intrinsic zeroes its accumulators
                sch.tensorize(init, shape.init_intrinsic)
        sch.tensorize(block, intrinsic)
        tensorized += 1
    return tensorized


@derived_object
class TensorizeAMXConv(PyPostproc, Placement):
    """The postproc half of :class:`AMXConv`: decompose and tensorize the blocks it marked
    (placed right after ``RewriteReductionBlock``, before ``RewriteTensorize``, for the targets
    AMXConv serves); a candidate where that fails is rejected."""

    def is_target_available(self, target: Target) -> bool:
        return target_has_amx(target)

    def follows(self, default: object) -> bool:
        return isinstance(default, RewriteReductionBlock)

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch: Schedule) -> bool:
        try:
            tensorize_marked(sch)
        except tvm.TVMError as error:  # reject, never raise TVM's error into C++; ours surface
            logger.warning("TensorizeAMXConv rejects a candidate: %s", tvm_error_message(error))
            return False
        return True

    def clone(self) -> Postproc:
        return TensorizeAMXConv()

    def __str__(self) -> str:
        return "TensorizeAMXConv"
