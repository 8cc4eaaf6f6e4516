"""Before lowering: thread-extent annotations and dynamic thread extents (TVM's ThreadExtentChecker)."""

from __future__ import annotations

from typing import List, Tuple

from tvm import tir

from meta_rules.analysis.tir_walk import child_stmts
from meta_rules.gpu.verifier.reasons import Rejection

_LOW = "meta_schedule.thread_extent_low_inclusive"
_HIGH = "meta_schedule.thread_extent_high_inclusive"


def thread_extent_rejections(func: tir.PrimFunc, thread_warp_size: int) -> List[Rejection]:
    """Blocks whose ``thread_extent_{low,high}_inclusive`` annotation the enclosing threads miss.

    The scheduled (not yet lowered) function, checked as TVM's VerifyGPUCode does before lowering; a
    ``warp_execution`` block counts ``threadIdx.x`` as the warp size. A dynamic thread extent
    rejects too.
    """
    found: List[Rejection] = []

    def visit(stmt, threads: Tuple[int, int, int]) -> None:
        if isinstance(stmt, tir.For):
            binding = stmt.thread_binding
            tag = binding.thread_tag if binding is not None else ""
            if tag.startswith("threadIdx.") or tag.startswith("vthread") or tag == "cthread":
                if not isinstance(stmt.extent, tir.IntImm):
                    found.append(Rejection("thread extent", f"dynamic extent of {tag}",
                                           f"loop {stmt.loop_var.name}"))
                    return
                if tag.startswith("threadIdx."):
                    dim = "xyz".index(tag[-1])
                    threads = tuple(int(stmt.extent) if i == dim else t
                                    for i, t in enumerate(threads))  # type: ignore[assignment]
        elif isinstance(stmt, tir.Block):
            ann = stmt.annotations
            if "warp_execution" in ann:
                threads = (thread_warp_size, threads[1], threads[2])
            if _LOW in ann and _HIGH in ann:
                low, high = int(ann[_LOW]), int(ann[_HIGH])
                product = threads[0] * threads[1] * threads[2]
                if not low <= product <= high:
                    found.append(Rejection("thread extent", f"block needs {low}..{high} threads",
                                           f"block {stmt.name_hint} ({product} threads)"))
        for child in child_stmts(stmt):
            visit(child, threads)

    visit(func.body, (1, 1, 1))
    return found
