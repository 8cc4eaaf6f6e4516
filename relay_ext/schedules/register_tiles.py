"""The register tile of a no-search design: the innermost tile factors that
:func:`relay_ext.schedules.rule_designs.deterministic_trace` gives a block's spatial loops (the
module doc of :mod:`relay_ext.schedules.rule_designs` says why), and the reduction loops' split.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

from tvm.target import Target

from relay_ext.lowering.x86.vnni_conv_schedule import STACK_BYTES  # a buffer below it: a stack alloca
from relay_ext.lowering.x86.vnni_conv_schedule import rows_outside
OC_BLOCK = 16  # output channels per block of the int8 NCHWc convs (VNNI's 16 int32 lanes)


def target_vectors(target: Target) -> Tuple[int, int]:
    """(vector register bits, vector register count) of an llvm ``target``: 512 and 32 with
    AVX-512, 256 and 16 with AVX2, 128 and 16 otherwise."""
    from tvm.target.codegen import target_has_features  # pylint: disable=import-outside-toplevel

    if target.kind.name != "llvm":
        return 128, 16
    if target_has_features("avx512f", target):
        return 512, 32
    if target_has_features("avx2", target):
        return 256, 16
    return 128, 16


def register_caps(target: Target, tensorized: bool) -> Tuple[int, int]:
    """The largest innermost tile factors of the two innermost non-unit spatial loops (see the
    module doc): a tensorized block's calls each keep one accumulator register, so its register
    tile holds all registers but 4 (operands), and fewer vectors than fit in
    :data:`STACK_BYTES` (the tile's accumulators are one buffer: below it a stack alloca, which
    LLVM keeps in registers): the first value, which
    :func:`relay_ext.schedules.rule_designs.deterministic_trace` shares among
    the spatial loops (``tile_decisions``' ``accumulators``; the second, 1, is not used); a
    vectorized block's innermost loop fills one vector of int32 and the next takes half the
    registers."""
    bits, count = target_vectors(target)
    if tensorized:
        return min(count - 4, (STACK_BYTES - 1) // (bits // 8)), 1
    return bits // 32, count // 2


def largest_divisor(extent: int, cap: int) -> int:
    """The largest divisor of ``extent`` not above ``cap`` (at least 1)."""
    return max(d for d in range(1, max(1, min(extent, cap)) + 1) if extent % d == 0)


def _divisor_within(extent: int, cap: int, max_inner: int) -> int:
    return largest_divisor(extent, min(cap, max_inner) if max_inner > 0 else cap)


def register_tile(loops: Sequence[Tuple[int, int]], accumulators: int) -> List[int]:
    """The innermost factors of a tensorized block's spatial loops, ``loops`` (extent,
    max_innermost_factor) innermost first, one accumulator per point of the tile, at most
    ``accumulators`` of them. Filled innermost loop first (a conv's output columns, then its
    rows, then its output-channel blocks: 7 columns x 2 blocks at 7 columns). A block with three
    loops above 1 (columns, rows, channel blocks) may instead take up to half the accumulators in
    columns and the rest in channel blocks: the tile with more accumulators wins, and of two
    alike the one that loads less per ``vpdpbusd`` -- each pixel of the tile loads its 4 input
    bytes, each channel block its 64 bytes of weights, so 14 columns x 1 block load 15 times per
    14 dot products, 7 x 2 only 9 (the input read from memory once per 2 blocks, not per block)."""
    filled, tile = [], 1
    for extent, max_inner in loops:
        filled.append(_divisor_within(extent, accumulators // tile, max_inner))
        tile *= filled[-1]
    above_one = [i for i, (extent, _) in enumerate(loops) if extent > 1]
    if len(above_one) < 3:
        return filled
    columns, blocks = above_one[0], above_one[2]
    split = [1] * len(loops)
    split[columns] = _divisor_within(loops[columns][0], accumulators // 2, loops[columns][1])
    split[blocks] = _divisor_within(loops[blocks][0], accumulators // split[columns],
                                    loops[blocks][1])

    def rank(factors: List[int]) -> Tuple[int, float]:
        tile = math.prod(factors)
        return tile, -(tile // factors[blocks] + factors[blocks]) / tile

    return max([filled, split], key=rank)


def _channels_inside_rows(extents: Sequence[Tuple[int, int, int]], spatial: Sequence[int],
                          reduction: Sequence[int]) -> Optional[int]:
    """The output-channel-chunk loop of a tensorized NCHWc conv (spatial loops batch, channel
    chunks, rows, columns, channel block; reduction loops kernel rows and columns first) whose
    output pixels outnumber its output channels times its taps -- per input channel, its input
    outweighs its weights -- else None. That loop's outer factor then goes one level in, so that
    the outermost loops, which run in parallel, are the rows: each thread computes every channel
    of a band of rows, reading only that band of the input (which, inside the model, the same
    thread's share of the op before wrote), not the whole input for half of the channels."""
    if len(spatial) != 5 or len(reduction) < 4:
        return None
    _, chunks, rows, columns, _ = (extents[i][0] for i in spatial)
    taps = extents[reduction[0]][0] * extents[reduction[1]][0]
    return spatial[1] if rows_outside(rows, columns, chunks * OC_BLOCK, taps) else None


def tile_decisions(extents: Sequence[Tuple[int, int, int]], caps: Tuple[int, int],
                   channels_outside_taps: bool = False,
                   accumulators: Optional[int] = None) -> List[List[int]]:
    """Factors for consecutive SamplePerfectTile instructions of one block, outermost loop
    first: ``extents`` holds (extent, n, max_innermost_factor) per loop; n == 2 is a reduction
    loop (MultiLevelTiling's ``R`` levels), otherwise a spatial one (see the module doc).
    ``channels_outside_taps``: a block with four reduction loops or more whose first (a conv's
    kernel rows) is above 1 -- kh, kw, input-channel blocks, their channels -- runs the channel
    blocks outside the taps (their whole extent on the outer ``R`` level: TOPI's order).
    ``accumulators`` (a tensorized block, one accumulator register per intrinsic call): the
    spatial loops' innermost factors multiply to at most that many (``caps`` unused), chosen by
    :func:`register_tile`; the outer factors sit on the outermost level, except a conv's
    output-channel chunks where its input outweighs its weights (:func:`_channels_inside_rows`),
    on the next one."""
    decisions: List[Optional[List[int]]] = [None] * len(extents)
    spatial = [i for i, (_, n, _) in enumerate(extents) if n != 2]
    reduction = [i for i, (_, n, _) in enumerate(extents) if n == 2]
    budget = list(caps)
    tile = (register_tile([(extents[i][0], extents[i][2]) for i in reversed(spatial)],
                          accumulators) if accumulators is not None else None)
    channels_inside = (_channels_inside_rows(extents, spatial, reduction) if tile is not None
                       else None)
    for position, i in enumerate(reversed(spatial)):
        extent, n, max_inner = extents[i]
        inner = 1
        if tile is not None:
            inner = tile[position]
        elif extent > 1 and budget:
            inner = _divisor_within(extent, budget.pop(0), max_inner)
        decisions[i] = [extent // inner] + [1] * (n - 2) + [inner]
        if i == channels_inside and n > 2:
            decisions[i] = [1, extent // inner] + [1] * (n - 3) + [inner]
    for i in reduction:
        extent, _, max_inner = extents[i]
        inner = _divisor_within(extent, extent, max_inner)
        decisions[i] = [extent // inner, inner]
    if channels_outside_taps and len(reduction) >= 4 and extents[reduction[0]][0] > 1:
        decisions[reduction[2]] = [extents[reduction[2]][0], 1]
    return decisions  # type: ignore[return-value] - every entry is set above
