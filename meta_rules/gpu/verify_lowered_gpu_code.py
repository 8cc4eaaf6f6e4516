"""VerifyLoweredGPUCode: judge a GPU candidate on the code it lowers to, for the task's own target.

The quantized epilogue reads as 32-bit code until ``LowerIntrin`` expands its intrinsic::

    for i_2 in T.vectorized(4):                    # scheduled: int32 x 4 = 16 B, looks fine
        T_cast[...] = T.Cast("uint8", T.max(T.min(
            T.q_multiply_shift_per_axis(acc[...] + 3, multiplier[...], ...), 255), 0))

    # VectorizeLoop + LowerIntrin, with the task's target attached:
    T_cast[b:b + 4] = T.Cast("uint8x4", T.max(T.min(T.Cast("int32x4", T.shift_right(
        T.shift_left(T.Cast("int64x4", acc[b:b + 4] + ...), ...)      # <- int64 x 4 = 32 B
        * T.Cast("int64x4", multiplier[c:c + 4]) + ..., ...)), ...), ...))

A check made before ``LowerIntrin``, or with a hard-coded target instead of the task's, sees
``int32x4`` and passes a candidate that needs 32-byte vectors, or 64-bit integers on a target that
has none. This postproc lowers as TVM 0.19's ``VerifyGPUCode`` postproc does, up to and including
``LowerIntrin``, with the task's target attached, and rejects a candidate when

* a thread-bound loop has a dynamic extent, or a block's thread-extent annotation is not met
  (checked before lowering, as TVM does);
* in a kernel, threads per block, a ``threadIdx`` extent, ``vthread`` or shared memory per block
  exceed the target's limits (counted as TVM counts them);
* a value with a vector dtype (load, store, cast, allocation, ramp, broadcast, arithmetic,
  comparison, select, call, let) is wider than ``max_vector_bytes``. In a buffer index only what TVM
  checks there counts (casts, loads, a strided ``Ramp``): a unit-stride ``Ramp`` is an address, and a
  gather index mostly becomes one once later passes unroll and simplify the loop;
* a 64-bit integer value appears on a target without 64-bit integers: ``webgpu``, and ``vulkan``
  unless ``-supports_int64=1`` (TVM's SPIR-V code generator also reads a missing attribute as false);
* lowering itself fails.

Each rejection carries :class:`Rejection` reasons. Counts per task live in a store shared by a
verifier and all its clones (TVM clones postprocs into each task's context), readable at any time
with :meth:`VerifyLoweredGPUCode.stats`, ``task_stats`` and ``summary``. Each task's summary is
logged (INFO) once: by :meth:`VerifyLoweredGPUCode.log_summaries`, or, for tasks not logged by then,
when the last verifier sharing the store is released or the interpreter exits.

Serves GPU targets (``"gpu"`` in the target's keys), in the place of TVM's ``VerifyGPUCode``.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Optional

import tvm
from tvm import tir
from tvm.meta_schedule.postproc import Postproc, PyPostproc, VerifyGPUCode
from tvm.meta_schedule.utils import derived_object
from tvm.target import Target
from tvm.tir.schedule import Schedule

from meta_rules.base.placement import Placement
from meta_rules.base.tvm_errors import tvm_error_message
from meta_rules.gpu.verifier import (GPULimits, Rejection, RejectionBook, TaskStats, gpu_limits,
                                     lower_for_verification, lowered_rejections, lowering_passes,
                                     thread_extent_rejections)
from meta_rules.gpu.verifier.reasons import log_pending

logger = logging.getLogger(__name__)


@derived_object
class VerifyLoweredGPUCode(PyPostproc, Placement):
    """Reject GPU candidates whose lowered code breaks the target's limits, and say why."""

    def __init__(self, max_vector_bytes: int = 16) -> None:
        if max_vector_bytes <= 0:
            raise ValueError(f"max_vector_bytes must be positive, got {max_vector_bytes}")
        self.max_vector_bytes = int(max_vector_bytes)
        self.target: Optional[Target] = None
        self.limits: Optional[GPULimits] = None
        self.task = "task"
        self._book = RejectionBook()

    def _initialize_with_tune_context(self, context) -> None:
        if context.target is None:
            raise ValueError("VerifyLoweredGPUCode needs a tune context with a target")
        self.limits = gpu_limits(context.target, self.max_vector_bytes)
        self.target = context.target
        self.task = context.task_name or "task"

    def is_target_available(self, target: Target) -> bool:
        return "gpu" in target.keys

    def replaces(self, default: object) -> bool:
        return isinstance(default, VerifyGPUCode)

    # -- checking -----------------------------------------------------------------------------
    def verify(self, mod: tvm.IRModule) -> List[Rejection]:
        """Every reason to reject the scheduled module ``mod``; empty when it passes. Counts nothing."""
        if self.limits is None or self.target is None:
            raise RuntimeError("VerifyLoweredGPUCode is used before initialisation with a tune context")
        reasons: List[Rejection] = []
        for gvar, func in mod.functions.items():
            if not isinstance(func, tir.PrimFunc):
                continue
            found = thread_extent_rejections(func, self.limits.thread_warp_size)
            if found:
                reasons += found
                continue
            try:
                lowered = lower_for_verification(func, gvar.name_hint, self.target)
            except Exception as err:  # pylint: disable=broad-except
                # TVM raises TVMError, InternalError, ValueError, ... depending on the failed check
                reasons.append(Rejection("lowering failed", tvm_error_message(err, limit=120), gvar.name_hint))
                continue
            reasons += lowered_rejections(lowered, self.limits)
        return reasons

    def apply(self, sch: Schedule) -> bool:
        try:
            reasons = self.verify(sch.mod)
        except Exception as err:  # pylint: disable=broad-except
            # An exception must not reach the search's C++ worker thread: reject, and say so.
            logger.exception("VerifyLoweredGPUCode failed on a candidate of %s", self.task)
            reasons = [Rejection("verifier error", type(err).__name__, tvm_error_message(err, limit=120))]
        self._book.record(self.task, reasons)
        if reasons and logger.isEnabledFor(logging.DEBUG):
            logger.debug("VerifyLoweredGPUCode rejects a candidate of %s: %s", self.task,
                         "; ".join(str(r) for r in reasons))
        return not reasons

    def clone(self) -> Postproc:
        other = VerifyLoweredGPUCode(self.max_vector_bytes)
        inst = other._inst  # pylint: disable=protected-access
        inst.target, inst.limits, inst.task = self.target, self.limits, self.task
        inst._book = self._book  # clones count into the same store
        return other

    def __str__(self) -> str:
        return f"VerifyLoweredGPUCode(max_vector_bytes={self.max_vector_bytes})"

    # -- counts --------------------------------------------------------------------------------
    def stats(self, task: Optional[str] = None) -> TaskStats:
        """A copy of the counts of ``task`` (default: the task this verifier was initialised for)."""
        name = task or self.task
        with self._book.lock:
            found = self._book.tasks.get(name)
            return found.copy() if found is not None else TaskStats(name)

    def task_stats(self) -> Dict[str, TaskStats]:
        """Copies of the counts of every task seen by this verifier or its clones."""
        with self._book.lock:
            return {name: s.copy() for name, s in self._book.tasks.items()}

    def summary(self, task: Optional[str] = None) -> str:
        """``"<task>: rejected 37 of 64: 30 vector width (...), 7 shared memory (...)"``; logs nothing."""
        return self.stats(task).summary()

    def log_summaries(self) -> Dict[str, str]:
        """Log the summary of every task not logged yet (once per task); return what was logged."""
        book = self._book
        return log_pending(book.lock, book.tasks, book.logged)


__all__: List[str] = ["GPULimits", "Rejection", "TaskStats", "VerifyLoweredGPUCode", "gpu_limits",
                      "lower_for_verification", "lowered_rejections", "lowering_passes",
                      "thread_extent_rejections"]
