"""Tasks whose only fast schedule is TOPI's: MetaSchedule is not asked to design or tune them.

On x86 targets without VNNI the uint8 x int8 convs become int16 pairs
(:mod:`relay_ext.lowering.x86.int16_pair_conv`) or seven-bit convs
(:mod:`relay_ext.lowering.x86.seven_bit_conv`), and the 3x3 ones Winograd GEMMs
(:mod:`relay_ext.lowering.x86.int16_winograd`); their TOPI schedules tensorize with ``vpmaddwd``
or with ``vpmaddubsw`` on bits split per tile, for which MetaSchedule has no tensor intrinsic.
Its designs of those tasks, untensorized, lose:
ResNet-18 for ``core-avx2`` after a 10-minute tune, every conv's rule design ran 2.1-13.8x the
time of its TOPI schedule and every tuned record slower still (docs/cpu.md), so trials spent on
them were lost. They keep TOPI's schedule; tuning and the no-search designs skip them.

    why = topi_only(task.dispatched[0])   # None, or why the task keeps its TOPI schedule

Before (a ResNet-18 task for ``core-avx2``, MetaSchedule's view)::

    block conv2d_NCHWc_int8: reads data (int16), weights (int16)   -> designed, tuned, dropped
    block winograd_gemm:     reads winograd_input (int16), weights  -> designed, tuned, dropped

After: ``topi_only`` names the block, the task gets no design space, no trial, no record.
"""

from __future__ import annotations

from typing import List, Optional

import tvm
from tvm import tir

from relay_ext.lowering.x86.int16_pair_conv import CONV_STAGE, INT16
from relay_ext.lowering.x86.int16_winograd import GEMM_STAGE
from relay_ext.lowering.x86.seven_bit_conv import HIGH_STAGE

TOPI_SCHEDULE = "TOPI's schedule"  # what a task report says of how such a task is scheduled
WHY = "tensorized with vpmaddwd by TOPI's schedule; MetaSchedule has no intrinsic for it"


def topi_only(workload: tvm.IRModule) -> Optional[str]:
    """Why ``workload`` (a task's TIR) keeps its TOPI schedule: it computes an int16 pair conv
    (a ``conv2d_NCHWc_int8`` block reading int16), the int16 Winograd GEMMs or a seven-bit conv
    (:mod:`relay_ext.lowering.x86.seven_bit_conv`); None otherwise."""
    found: List[str] = []

    def visit(node) -> None:
        if not isinstance(node, tir.Block) or found:
            return
        if node.name_hint == GEMM_STAGE:
            found.append(f"int16 Winograd GEMMs {WHY}")
        elif node.name_hint == CONV_STAGE and any(r.buffer.dtype == INT16 for r in node.reads):
            found.append(f"int16 conv {WHY}")
        elif node.name_hint == HIGH_STAGE:
            found.append("seven-bit conv tensorized with vpmaddubsw by TOPI's schedule; "
                         "MetaSchedule has no form of its guarded high-bit term")

    for func in workload.functions.values():
        if isinstance(func, tir.PrimFunc):
            tir.stmt_functor.post_order_visit(func.body, visit)
    return found[0] if found else None
