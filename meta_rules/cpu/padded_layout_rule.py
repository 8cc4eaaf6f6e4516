"""The custom schedule rule ``quantfuse_padded_layout``: the model input's quantize + pad + layout
transform in one pass, the padded borders apart from the interior.

A quantized CNN's first kernel takes the float image (``NCHW``), quantizes it, pads it with the
zero point (QNN's explicit pad), pads 3 channels to 4, and transforms it to the first conv's
``NCHW4c`` (or ``NCHW16c``). TOPI leaves the layout transform to no rule
(``schedule_rule = "None"``), so the task had no design and ran TOPI's injective schedule: every
element behind the bound checks of both pads, scalar. As TIR (every producer inlined)::

    for h, w, c in T.grid(230, 230, 4):
        with T.block("T_layout_trans"):
            out[0, 0, h, w, c] = T.if_then_else(c < 3, T.if_then_else(
                3 <= h and h < 227 and 3 <= w and w < 227, quantize(x[0, c, h - 3, w - 3]),
                T.uint8(64)), T.uint8(0))

:func:`annotate_padded_layout` (called by the TE->TIR converter,
:mod:`relay_ext.lowering.tir_converter`) renames the annotation of an 8-bit layout transform
from a layout without a channel block to one with it; ApplyCustomRule hands it to
:func:`split_padding_borders`, which inlines every producer into it, runs the rows in parallel
and partitions the innermost spatial loop where the bound checks change
(:func:`meta_rules.analysis.padding_blocks.padding_bounds`)::

    for h in T.parallel(230):
        for w, c in T.grid(3, 4):                  # left border: constants
            ...
        for w, c in T.grid(range(3, 227), 4):      # interior: no check on w, vectorized by LLVM
            out[0, 0, h, w, c] = T.if_then_else(c < 3, T.if_then_else(3 <= h and h < 227,
                quantize(x[0, c, h - 3, w - 3]), T.uint8(64)), T.uint8(0))
        for w, c in T.grid(range(227, 230), 4):    # right border
            ...

The partitioned loops start where the previous one ended; every build quantfuse makes moves them
back to 0 (:mod:`relay_ext.lowering.zero_based_loops`: TVM's CPU code generator takes no other
loop). A layout transform with nothing to partition (no padding) still gets its producers
inlined and its rows in parallel. Registered for every target key as
:mod:`meta_rules.base.custom_rules` says; for a target other than a CPU the function leaves the
block as it is, as ``"None"`` would.
"""

from __future__ import annotations

import logging
from typing import Iterable, List, Optional

import tvm
from tvm import tir
from tvm.tir.schedule import BlockRV, Schedule

from meta_rules.analysis.padding_blocks import padding_bounds
from meta_rules.base.custom_rules import register_for_every_key, with_schedule_rule
from meta_rules.base.tvm_errors import tvm_error_message
from meta_rules.base.unchecked_schedule import block_realize
from meta_rules.cpu.layout_transform_rule import (CPU_KEYS, inner_block, leave_as_it_is,
                                                 left_to_no_rule)

logger = logging.getLogger(__name__)

RULE_NAME = "quantfuse_padded_layout"
ROWS_MARK = "quantfuse.rows_in_parallel"  # on the loop the rule runs in parallel
EIGHT_BIT = ("uint8", "int8")  # what a quantized model's input copy writes


def blocks_channels(src_layout: str, dst_layout: str) -> bool:
    """True for a transform from a layout without a channel block to one with it (``NCHW`` ->
    ``NCHW4c``): each destination vector gathers one element from each of several planes."""
    return inner_block(src_layout) is None and inner_block(dst_layout) is not None


def annotate_padded_layout(block: tir.Block) -> Optional[tir.Block]:
    """``block`` annotated for :func:`split_padding_borders` when it is a layout transform TOPI
    left to no rule (``schedule_rule = "None"``) that :func:`blocks_channels` and writes 8-bit
    integers (a quantized model's input copy); None for every other block."""
    layouts = left_to_no_rule(block)
    if layouts is None or not blocks_channels(*layouts):
        return None
    if len(block.writes) != 1 or str(block.writes[0].buffer.dtype) not in EIGHT_BIT:
        return None  # a float model's copy, or an int16 one (QNN without VNNI): not measured
    return with_schedule_rule(block, RULE_NAME)


def _inline_producers(sch: Schedule, block: BlockRV) -> None:
    """Inline every producer of ``block``, nearest first, until none is left that can be."""
    progress = True
    while progress:
        progress = False
        for producer in sch.get_producers(block):
            try:
                sch.compute_inline(producer)
                progress = True
            except tvm.TVMError:  # a producer that cannot be inlined stays a block of its own
                continue


def _bound_var(sch: Schedule, block: BlockRV, loop: tir.For) -> Optional[tir.Var]:
    """The iteration variable of ``block`` bound to ``loop`` alone, None if there is none."""
    realize = block_realize(sch, block)
    found = [iter_var.var for iter_var, value in zip(realize.block.iter_vars, realize.iter_values)
             if isinstance(value, tir.Var) and value.same_as(loop.loop_var)]
    return found[0] if len(found) == 1 else None


def border_partition(extent: int, lower: Optional[int], upper: Optional[int]) -> List[int]:
    """The extents of the parts before the last (which takes the rest) that cut a loop of
    ``extent`` at the bounds ``lower`` and ``upper``: (230, 3, 227) -> [3, 224]; [] where
    neither bound falls inside the loop."""
    cuts = sorted({b for b in (lower, upper) if b is not None and 0 < b < extent})
    return [end - start for start, end in zip([0] + cuts[:-1], cuts)]


def split_padding_borders(sch: Schedule, block: BlockRV) -> List[Schedule]:
    """Inline the producers of a layout transform annotated by :func:`annotate_padded_layout`,
    run the loops outside the last two in parallel and partition the second-last (the innermost
    spatial one) at the padding's bounds (see the module doc). Where that cannot be done the
    block is left as it came (still annotated: no other rule takes it, as with ``"None"``)."""
    try:
        out = sch.copy()
        _inline_producers(out, block)
        loops = out.get_loops(block)
        if len(loops) < 3:
            return [out]
        spatial = out.get(loops[-2])
        var = _bound_var(out, block, spatial)
        parts: List[int] = []
        store = out.get(block).body
        if (var is not None and isinstance(spatial.extent, tir.IntImm)
                and isinstance(store, tir.BufferStore)):
            parts = border_partition(int(spatial.extent), *padding_bounds(store.value, var))
        rows = out.fuse(*loops[:-2])
        if parts:
            out.loop_partition(loops[-2], parts + [None])
        out.parallel(rows)
        # An annotated loop is one RewriteParallelVectorizeUnroll leaves alone: without it, the
        # root's parallel/vectorize marks had this loop fused again, or vectorized when short.
        out.annotate(rows, ROWS_MARK, 1)
    except tvm.TVMError as error:  # never into the search's C++ thread
        logger.warning("%s left %s as it was: %s", RULE_NAME, sch.get(block).name_hint,
                       tvm_error_message(error))
        return [sch]
    return [out]


def register_padded_layout_rule(extra_keys: Iterable[str] = ()) -> List[str]:
    """Register the rule for every target key (:func:`split_padding_borders` for the CPU keys,
    leave-as-it-is for the others: ApplyCustomRule would otherwise warn and drop the
    annotation); the names registered now (a name someone registered already is left alone)."""
    return register_for_every_key(
        RULE_NAME, lambda key: split_padding_borders if key in CPU_KEYS else leave_as_it_is,
        extra_keys)
