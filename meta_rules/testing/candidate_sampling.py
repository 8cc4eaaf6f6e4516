"""Draw GPU candidates the way MetaSchedule's search does, to judge them outside a tune.

A candidate is a design space's trace replayed on a fresh schedule with new random decisions,
followed by postprocs: those that TVM's CUDA list runs before ``VerifyGPUCode``
(``RewriteCooperativeFetch``, ``RewriteUnboundBlock``, ...) to feed a verifier, or a variant's
whole list to ask whether a tune could measure it. Used by the verifier's agreement test,
benchmarks/verifier_overhead.py and benchmarks/candidate_validity.py.
"""

from __future__ import annotations

from typing import List, Optional

import tvm
from tvm import meta_schedule as ms
from tvm import tir

from meta_rules.rule_sets import postprocs


def initialised_postprocs(mod: tvm.IRModule, target: tvm.target.Target,
                          variant: str = "upstream") -> List[ms.Postproc]:
    """``variant``'s postprocs for ``target``, initialised for ``mod`` as a tune would."""
    procs = postprocs(target, variant)
    ms.TuneContext(mod=mod, target=target, task_name="sample",
                   space_generator=ms.space_generator.PostOrderApply(
                       sch_rules=[], postprocs=procs, mutator_probs={}))
    return procs


def postprocs_before_gpu_verifier(mod: tvm.IRModule, target: tvm.target.Target) -> List[ms.Postproc]:
    """TVM's postprocs for ``target`` that come before its VerifyGPUCode, initialised for ``mod``."""
    procs = initialised_postprocs(mod, target, "upstream")
    return procs[:[isinstance(p, ms.postproc.VerifyGPUCode) for p in procs].index(True)]


def replay(mod: tvm.IRModule, space: tir.Schedule, seed: int) -> tir.Schedule:
    """``space``'s trace replayed on ``mod`` with the decisions of ``seed``, ready for postprocs."""
    sch = tir.Schedule(mod, seed=seed)
    tir.schedule.Trace(space.trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
    sch.enter_postproc()
    return sch


def first_rejection(sch: tir.Schedule, procs: List[ms.Postproc]) -> Optional[ms.Postproc]:
    """Apply ``procs`` in order, as MetaSchedule's search does; the first that rejects ``sch``."""
    for proc in procs:
        if not proc.apply(sch):
            return proc
    return None


def draw_candidate(mod: tvm.IRModule, space: tir.Schedule, seed: int,
                   procs: List[ms.Postproc]) -> Optional[tir.Schedule]:
    """``space``'s trace replayed with the decisions of ``seed``, then ``procs`` applied in order;
    None if one of them rejects it."""
    sch = replay(mod, space, seed)
    return sch if first_rejection(sch, procs) is None else None
