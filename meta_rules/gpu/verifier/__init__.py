"""The checks behind :class:`meta_rules.VerifyLoweredGPUCode`, one concern per module.

* :mod:`.limits` -- what a target allows (threads, shared memory, vector bytes, 64-bit integers);
* :mod:`.lowering` -- TVM 0.19's VerifyGPUCode pass list, up to ``LowerIntrin``, with the task's
  own target attached;
* :mod:`.thread_extents` -- the check made before lowering (thread-extent annotations);
* :mod:`.kernel_scan` -- the walk over the lowered code (kernel resources, the width of every
  vector value, 64-bit integers);
* :mod:`.reasons` -- why a candidate is rejected, and the counts per task.
"""

from meta_rules.gpu.verifier.kernel_scan import lowered_rejections
from meta_rules.gpu.verifier.limits import GPULimits, gpu_limits
from meta_rules.gpu.verifier.lowering import lower_for_verification, lowering_passes
from meta_rules.gpu.verifier.reasons import Rejection, RejectionBook, TaskStats
from meta_rules.gpu.verifier.thread_extents import thread_extent_rejections

__all__ = ["GPULimits", "Rejection", "RejectionBook", "TaskStats", "gpu_limits",
           "lower_for_verification", "lowered_rejections", "lowering_passes",
           "thread_extent_rejections"]
