"""The fusion measure: intermediates that a scheduled module keeps in global memory.

An epilogue that did not fuse into its conv/dense leaves the producer's result in a buffer of the
function that is allocated in global memory at the function's root::

    @T.prim_func
    def main(data, weight, ..., T_cast):
        conv2d_nhwc = T.alloc_buffer((1, 16, 16, 64), "int32")   # <- a global intermediate
        ...   # kernel 1 writes conv2d_nhwc, kernel 2 reads it back for the epilogue

Each such buffer is a round trip through global memory that a fused kernel does not pay. A buffer
in another scope (``shared``, ``local``, ``wmma.*``), or one whose allocation sits inside a loop
once allocations are placed (a tile computed at a loop, compacted by lowering), is not counted.
"""

from __future__ import annotations

import logging
from typing import List, Optional

import tvm
from tvm import meta_schedule as ms
from tvm import tir

from meta_rules.analysis.tir_walk import child_stmts
from meta_rules.rule_sets import TargetLike, as_target, check_variant, space_generator

logger = logging.getLogger(__name__)

_GLOBAL_SCOPES = ("", "global")


def _root_allocations(func: tir.PrimFunc) -> List[tir.Buffer]:
    """Buffers allocated outside every loop of ``func``, after TVM places each allocation."""
    passes = tvm.transform.Sequential(
        [tir.transform.LowerInitBlock(), tir.transform.PlanAndUpdateBufferAllocationLocation()]
    )
    placed = passes(tvm.IRModule({"main": func}))["main"]
    found: List[tir.Buffer] = []

    def visit(stmt, in_loop: bool) -> None:
        if isinstance(stmt, tir.Block) and not in_loop:
            found.extend(stmt.alloc_buffers)
        for child in child_stmts(stmt):
            visit(child, in_loop or isinstance(stmt, tir.For))

    visit(placed.body, False)
    return found


def global_intermediates(mod: tvm.IRModule) -> List[str]:
    """Names of the intermediate buffers of ``mod`` that live in global memory, function by function.

    ``mod`` is a scheduled (not yet lowered) module, such as ``Schedule.mod`` of a design space.
    Names are ``"<function>/<buffer>"`` when the module has more than one function.
    """
    names: List[str] = []
    funcs = [(gv.name_hint, f) for gv, f in mod.functions.items() if isinstance(f, tir.PrimFunc)]
    for func_name, func in funcs:
        for buf in _root_allocations(func):
            if buf.scope() in _GLOBAL_SCOPES:
                names.append(buf.name if len(funcs) == 1 else f"{func_name}/{buf.name}")
    return names


def design_spaces(
    mod: tvm.IRModule,
    target: TargetLike,
    variant: str = "ours",
    rand_state: int = 0,
) -> List[tir.Schedule]:
    """The design spaces MetaSchedule generates for one task under ``variant``."""
    check_variant(variant)
    target = as_target(target)
    context = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator=space_generator(target, variant),
        rand_state=rand_state,
        task_name="fusion",
    )
    return list(context.generate_design_space())


def design_space_intermediates(
    mod: tvm.IRModule,
    target: TargetLike,
    variant: str = "ours",
    rand_state: int = 0,
    spaces: Optional[List[tir.Schedule]] = None,
) -> List[int]:
    """The number of global intermediates in each design space of one task under ``variant``."""
    if spaces is None:
        spaces = design_spaces(mod, target, variant, rand_state)
    return [len(global_intermediates(sch.mod)) for sch in spaces]
