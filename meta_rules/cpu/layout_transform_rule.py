"""The custom schedule rule ``quantfuse_layout_transform``: a channel-block layout transform that
copies whole source blocks at a time.

Where a target has AMX, Relay feeds each AMX conv ``NCHW64c`` data made from the previous layer's
``NCHW16c`` output, by a fused pad + layout transform (QNN pads with the zero point before the
conv). TOPI's ``layout_transform`` block carries ``schedule_rule = "None"``, so no MetaSchedule
rule touches it, and the root's parallel/vectorize annotations give it a 64-lane vector loop over
the destination's channels, which come from 4 different source blocks: LLVM gathers them byte by
byte (the time this costs a tuned ResNet-18 is in docs/cpu.md). As TOPI leaves it (the tuned
record of that task)::

    for ax0_ax1_ax2_fused in T.parallel(58):
        for ax3 in range(58):
            for ax4_fused in T.vectorized(64):           # 4 source blocks of 16 bytes
                with T.block("T_layout_trans"):
                    T_layout_trans[0, 0, ax2, ax3, ax4] = T.if_then_else(..., p0[0, ax4 // 16,
                        ax2 - 1, ax3 - 1, ax4 % 16], T.uint8(0))

:func:`annotate_layout_transform` (called by the TE->TIR converter,
:mod:`relay_ext.lowering.tir_converter`) renames the annotation of such a block, one whose
destination's innermost block is a multiple of the source's (``NCHW16c`` -> ``NCHW64c``), to
``quantfuse_layout_transform``; ApplyCustomRule hands it to :func:`vectorize_source_blocks`,
which splits the innermost loop at the source's block and vectorizes one source block::

    for ax0_ax1_ax2_fused in T.parallel(58):
        for ax3, ax4_0 in T.grid(58, 4):
            for ax4_1 in T.vectorized(16):               # 16 contiguous source bytes
                ...

Other blocks keep their annotation and the rules' behaviour (blocks annotated ``None`` are
skipped by every rule). Registered for every target key as :mod:`meta_rules.base.custom_rules`
says; for a target other than a CPU the function leaves the block as it is, as ``"None"`` would.
"""

from __future__ import annotations

import logging
import re
from typing import Iterable, List, Optional, Tuple

import tvm
from tvm import tir
from tvm.tir.schedule import BlockRV, Schedule

from meta_rules.base.custom_rules import SCHEDULE_RULE_KEY, register_for_every_key, with_schedule_rule
from meta_rules.base.tvm_errors import tvm_error_message

logger = logging.getLogger(__name__)

RULE_NAME = "quantfuse_layout_transform"
_INNER_BLOCK = re.compile(r"(\d+)([a-z])$")  # "NCHW16c" -> 16, "c"


def inner_block(layout: str) -> Optional[tuple]:
    """(factor, axis) of a layout's innermost sub-axis (``NCHW16c`` -> (16, "c")); None when
    the innermost axis is a primal one (``NCHW``)."""
    match = _INNER_BLOCK.search(layout)
    return (int(match.group(1)), match.group(2)) if match else None


def source_run(src_layout: str, dst_layout: str) -> Optional[int]:
    """How many consecutive destination elements of the innermost axis are contiguous in the
    source, where that is fewer than the destination's block (which a plain vector loop would
    gather): the source's block. None otherwise."""
    src, dst = inner_block(src_layout), inner_block(dst_layout)
    if src is None or dst is None or src[1] != dst[1]:
        return None
    if dst[0] > src[0] and dst[0] % src[0] == 0:
        return src[0]
    return None


def transform_layouts(block: tir.Block) -> Optional[Tuple[str, str]]:
    """(source, destination) layouts of a TOPI layout transform block (its ``src_layout`` and
    ``dst_layout`` annotations); None for any other block."""
    annotations = block.annotations
    if "src_layout" not in annotations or "dst_layout" not in annotations:
        return None
    return str(annotations["src_layout"]), str(annotations["dst_layout"])


def left_to_no_rule(block: tir.Block) -> Optional[Tuple[str, str]]:
    """:func:`transform_layouts` of a layout transform TOPI left to no rule (``schedule_rule =
    "None"``); None for any other block."""
    if str(block.annotations.get(SCHEDULE_RULE_KEY, "")) != "None":
        return None
    return transform_layouts(block)


def _layout_run(block: tir.Block) -> Optional[int]:
    layouts = transform_layouts(block)
    return None if layouts is None else source_run(*layouts)


def annotate_layout_transform(block: tir.Block) -> Optional[tir.Block]:
    """``block`` annotated for :func:`vectorize_source_blocks` when it is a layout transform TOPI
    left to no rule (``schedule_rule = "None"``) whose source blocks are narrower than its
    destination's; None for every other block."""
    layouts = left_to_no_rule(block)
    if layouts is None or source_run(*layouts) is None:
        return None
    return with_schedule_rule(block, RULE_NAME)


def vectorize_source_blocks(sch: Schedule, block: BlockRV) -> List[Schedule]:
    """Split the innermost loop of a layout transform annotated by
    :func:`annotate_layout_transform` at the source's block, vectorize that, and run the loops
    outside the last two in parallel (see the module doc). Where that cannot be done the block
    is left as it came (still annotated: no other rule takes it, as with ``"None"``)."""
    run = _layout_run(sch.get(block))
    loops = sch.get_loops(block)
    if run is None or len(loops) < 3:
        return [sch]
    try:
        extent = sch.get(loops[-1]).extent
        if not isinstance(extent, tir.IntImm) or int(extent) % run:
            return [sch]
        tiled = sch.copy()
        loops = tiled.get_loops(block)
        _, inner = tiled.split(loops[-1], [None, run])
        tiled.parallel(tiled.fuse(*loops[:-2]))
        tiled.vectorize(inner)
    except tvm.TVMError as error:  # never into the search's C++ thread
        logger.warning("%s left %s as it was: %s", RULE_NAME, sch.get(block).name_hint,
                       tvm_error_message(error))
        return [sch]
    return [tiled]


CPU_KEYS = ("cpu", "arm_cpu")  # ApplyCustomRule takes a target's first key that has the rule


def leave_as_it_is(sch: Schedule, block: BlockRV) -> List[Schedule]:  # pylint: disable=W0613
    """The rule for other targets (GPUs: their rules bind such a block): what ``"None"`` did."""
    return [sch]


def register_layout_transform_rule(extra_keys: Iterable[str] = ()) -> List[str]:
    """Register the rule for every target key (:func:`vectorize_source_blocks` for the CPU keys,
    :func:`leave_as_it_is` for the others: ApplyCustomRule would otherwise warn and drop the
    annotation); the names registered now (a name someone registered already is left alone)."""
    return register_for_every_key(
        RULE_NAME, lambda key: vectorize_source_blocks if key in CPU_KEYS else leave_as_it_is,
        extra_keys)
