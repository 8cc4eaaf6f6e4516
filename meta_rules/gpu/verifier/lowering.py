"""Lowering a scheduled candidate as TVM 0.19's VerifyGPUCode postproc does, up to and including
``LowerIntrin``, with the task's own target attached (where ``q_multiply_shift_per_axis`` becomes
64-bit arithmetic)."""

from __future__ import annotations

from typing import List, Optional

import tvm
from tvm import tir
from tvm.target import Target


def lowering_passes() -> List[tvm.transform.Pass]:
    """The pass list of TVM 0.19's VerifyGPUCode postproc, in order; the last one is LowerIntrin."""
    t = tir.transform
    return [
        # phase 1
        t.LowerCrossThreadReduction(), t.LowerInitBlock(), t.PlanAndUpdateBufferAllocationLocation(),
        t.ConvertBlocksToOpaque(), t.LiftThreadBinding(), t.ManifestSharedMemoryLocalStage(),
        t.CompactBufferAllocation(), t.Simplify(), t.LowerAutoCopy(), t.UnifyThreadBinding(),
        t.LowerMatchBuffer(), t.InjectSoftwarePipeline(), t.LowerOpaqueBlock(), t.FlattenBuffer(),
        t.BF16ComputeLegalize(), t.NarrowDataType(32), t.Simplify(),
        # phase 2
        t.VectorizeLoop(True), t.InjectVirtualThread(), t.InjectDoubleBuffer(), t.StorageRewrite(),
        t.MergeSharedMemoryAllocations(), t.LowerIntrin(),
    ]


def lower_for_verification(
    func: tir.PrimFunc,
    name: str,
    target: Target,
    passes: Optional[List[tvm.transform.Pass]] = None,
) -> tir.PrimFunc:
    """``func`` lowered by ``passes`` (default :func:`lowering_passes`) with ``target`` attached."""
    attrs = {"global_symbol": name, "target": target}
    if bool(tvm.transform.PassContext.current().config.get("tir.noalias", True)):
        attrs["tir.noalias"] = True
    mod = tvm.IRModule({name: func.with_attr(attrs)})
    return tvm.transform.Sequential(passes if passes is not None else lowering_passes())(mod)[name]
