"""Draw GPU candidates the way MetaSchedule's search does, to feed a verifier outside a tune.

A candidate is a design space's trace replayed on a fresh schedule with new random decisions,
followed by the postprocs that TVM's CUDA list runs before ``VerifyGPUCode``
(``RewriteCooperativeFetch``, ``RewriteUnboundBlock``, ...). Used by the verifier's agreement test
and by benchmarks/verifier_overhead.py.
"""

from __future__ import annotations

from typing import List, Optional

import tvm
from tvm import meta_schedule as ms
from tvm import tir

from ..rule_sets import postprocs


def postprocs_before_gpu_verifier(mod: tvm.IRModule, target: tvm.target.Target) -> List[ms.Postproc]:
    """TVM's postprocs for ``target`` that come before its VerifyGPUCode, initialised for ``mod``."""
    procs = postprocs(target, "upstream")
    ms.TuneContext(mod=mod, target=target, task_name="sample",
                   space_generator=ms.space_generator.PostOrderApply(
                       sch_rules=[], postprocs=procs, mutator_probs={}))
    return procs[:[isinstance(p, ms.postproc.VerifyGPUCode) for p in procs].index(True)]


def draw_candidate(mod: tvm.IRModule, space: tir.Schedule, seed: int,
                   before_verifier: List[ms.Postproc]) -> Optional[tir.Schedule]:
    """``space``'s trace replayed with the decisions of ``seed``; None if a postproc rejects it."""
    sch = tir.Schedule(mod, seed=seed)
    tir.schedule.Trace(space.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
    sch.enter_postproc()
    return sch if all(p.apply(sch) for p in before_verifier) else None
