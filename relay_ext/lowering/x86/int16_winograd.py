"""Exact int8 3x3 convolutions without VNNI in fewer products: Winograd F(2x2, 3x3) on int16.

On x86 targets without VNNI an int8 conv multiplies with ``vpmaddubsw`` (uint8 x int8 pairs,
where they cannot saturate) or on int16 pairs with ``vpmaddwd`` (:mod:`.int16_pair_conv`).
Winograd's F(2x2, 3x3) computes each 2x2 block of a 3x3, stride-1 conv's outputs with 16
products per input and output channel instead of 36, and in integers it stays exact:

- input transform ``V = B^T d B`` of each 4x4 input patch (stride 2): entries of ``B^T`` are 0
  and +-1, so ``|V| <= 4 x 255`` for inputs in [-255, 255] (uint8 data, or int16 data that is
  uint8 minus a zero point): int16;
- weight transform ``U' = G' g G'^T`` with ``G' = 2 G`` (``G`` has halves; ``U' = 4 U``), once,
  from the constant weights: ``|U'| <= 9 x 255``: int16;
- 16 GEMMs (one per transform position): ``M'[p, k, t] = sum_c U'[p, k, c] V[p, t, c]`` with
  :func:`.int16_pair_conv.pmaddwd_intrinsic` (int16 pairs into int32 lanes), a register tile of
  tiles x one vector of output channels;
- output transform ``Y' = A^T M' A`` (entries 0 and +-1) is 4 x the conv's int32 sum; ``>> 2``
  is exact.

The weights are transformed once, where the op replaces a conv
(:mod:`.int16_winograd_rewrite`: which convs, the transform, the int32 bound). docs/cpu.md gives
the measurements.
"""

from __future__ import annotations

from typing import List

import numpy as np
import tvm
from tvm import relay, te, tir

from relay_ext.lowering.x86 import int16_pair_conv

OP_NAME = "quantfuse.winograd_conv2d_3x3"
GEMM_STAGE = "winograd_gemm"  # the GEMMs' stage (its buffers' names start with it)
OUT_BLOCK = 16  # output channels per block of the NCHW16c output, as the int8 convs'
REGISTER_TILES = 12  # tiles of a GEMM register tile: as many accumulator vectors
FUSED_MAX_WEIGHT_BYTES = 256 * 1024  # per-row GEMMs re-read the weights: only where L2 holds them
B_T = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.int64)
G2 = np.array([[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]], dtype=np.int64)
A_T = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.int64)


# --------------------------------------------------------------------------- compute, schedule


def _rows(matrix: np.ndarray, row: tir.PrimExpr, value) -> tir.PrimExpr:
    """``sum_i matrix[row, i] * value(i)`` as selects on ``row`` that leave one sum of 2-3 terms
    once the loop over ``row`` is unrolled."""
    def one(r: int) -> tir.PrimExpr:
        terms = [value(i) if c == 1 else -value(i) for i, c in enumerate(matrix[r]) if c]
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        return total

    expr = one(len(matrix) - 1)
    for r in reversed(range(len(matrix) - 1)):
        expr = tir.Select(row == r, one(r), expr)
    return expr


def winograd_conv2d(data: te.Tensor, weights: te.Tensor, padding: int) -> te.Tensor:
    """The int32 3x3, stride-1 conv of ``data`` ``[N, C / c, H, W, c]`` (uint8 or int16) padded by
    ``padding`` zeros, with weights from :func:`.int16_winograd_rewrite.transform_weights`:
    ``[N, K / 16, Ho, Wo, 16]``."""
    n, blocks, height, width, block = (int(x) for x in data.shape)
    _, vectors, pairs, lanes, _ = (int(x) for x in weights.shape)
    channels, out_channels = blocks * block, vectors * lanes
    out_h, out_w = height + 2 * padding - 2, width + 2 * padding - 2
    rows = (out_h + 1) // 2
    cols = tile_columns(n * rows, (out_w + 1) // 2, fused_form(int(np.prod(weights.shape))))
    tiles = n * rows * cols

    def tap(t, c, i, j):
        y, x = 2 * ((t // cols) % rows) + i - padding, 2 * (t % cols) + j - padding
        inside = tir.all(y >= 0, y < height, x >= 0, x < width)
        value = data[t // (rows * cols), c // block, y, x, c % block].astype("int16")
        return tir.if_then_else(inside, value, tir.const(0, "int16"))

    v = te.compute((16, tiles, channels), lambda p, t, c: _rows(
        B_T, p // 4, lambda i: _rows(B_T, p % 4, lambda j: tap(t, c, i, j))),
        name="winograd_input", tag="winograd_input")
    pair = te.reduce_axis((0, pairs), "pair")
    member = te.reduce_axis((0, 2), "member")
    m = te.compute((16, vectors, tiles, lanes), lambda p, kv, t, l: te.sum(
        v[p, t, pair * 2 + member].astype("int32") * weights[p, kv, pair, l, member].astype("int32"),
        axis=[pair, member]), name=GEMM_STAGE, tag=GEMM_STAGE)

    def out(nn, kb, oy, ox, kl):
        k = kb * OUT_BLOCK + kl
        t = nn * rows * cols + (oy // 2) * cols + ox // 2
        y4 = _rows(A_T, oy % 2, lambda xi: _rows(A_T, ox % 2, lambda nu: m[
            xi * 4 + nu, k // lanes, t, k % lanes]))
        return y4 >> 2

    return te.compute((n, out_channels // OUT_BLOCK, out_h, out_w, OUT_BLOCK), out,
                      name="winograd_output", tag="winograd_output,injective")


def fused_form(weight_elements: int) -> bool:
    """Whether the schedule runs the three stages per row of tiles: where the transformed weights
    (int16) fit :data:`FUSED_MAX_WEIGHT_BYTES`."""
    return 2 * weight_elements <= FUSED_MAX_WEIGHT_BYTES


def tile_columns(rows: int, columns: int, fused: bool) -> int:
    """Columns of the tile grid: ``columns``, or more (tiles past the output, computed on zeros
    and dropped) until the tiles a GEMM register tile splits (a row of tiles in the fused form,
    every tile else) have a divisor between half of :data:`REGISTER_TILES` and it, so that the
    register tile keeps enough independent accumulators (13 columns would give 1)."""
    while not any((columns * (1 if fused else rows)) % d == 0
                  for d in range(REGISTER_TILES // 2, REGISTER_TILES + 1)):
        columns += 1
    return columns


def schedule_winograd(outs: List[te.Tensor]) -> te.Schedule:
    """The output transform inlined into the fused epilogue (a channel block vectorized, the 2x2
    outputs of a tile unrolled); the GEMMs in register tiles of up to :data:`REGISTER_TILES` tiles
    x one output vector (tensorized), the input transform a channel block at a time. Where the
    transformed weights fit :data:`FUSED_MAX_WEIGHT_BYTES`, all three per row of tiles (in
    parallel): its input transform, then per output channel block its GEMMs and outputs, every
    intermediate in cache (ResNet-18's 56x56 convs); else each stage over the whole tensor in
    parallel, so that each GEMM reads its weights once (docs/cpu.md)."""
    from tvm.topi import tag  # pylint: disable=import-outside-toplevel

    out = outs[0]
    schedule = te.create_schedule([x.op for x in outs])
    stages, seen = {}, set()

    def walk(tensor):
        op = tensor.op
        if not isinstance(op, te.ComputeOp) or op in seen:
            return
        seen.add(op)
        if op.tag.startswith("winograd"):
            stages[op.tag.split(",")[0]] = tensor
        elif tensor is not out and tag.is_injective(op.tag):
            schedule[tensor].compute_inline()
        for producer in op.input_tensors:
            walk(producer)

    walk(out)
    v, m, y = stages["winograd_input"], stages[GEMM_STAGE], stages["winograd_output"]
    lanes = int(m.shape[3])
    block = int(v.op.input_tensors[0].shape[4])
    if y is not out:
        schedule[y].compute_inline()
    nn, kb, oy, ox, kl = schedule[out].op.axis
    ty, a = schedule[out].split(oy, 2)
    tx, b = schedule[out].split(ox, 2)
    weights = next(x for x in m.op.input_tensors if len(x.shape) == 5)
    rows = (int(out.shape[2]) + 1) // 2
    cols = int(v.shape[1]) // (int(out.shape[0]) * rows)  # the tile grid's, padded
    if fused_form(int(np.prod([int(x) for x in weights.shape]))):
        # per row of tiles (in parallel): its input transform, then per channel block its 16
        # GEMMs and its output transform, every intermediate in cache
        schedule[out].reorder(nn, ty, kb, tx, a, b, kl)
        row = schedule[out].fuse(nn, ty)
        schedule[out].parallel(row)
        v_at, m_at, tiles = row, kb, cols
    else:
        schedule[out].reorder(nn, kb, ty, tx, a, b, kl)
        schedule[out].parallel(schedule[out].fuse(nn, kb, ty))
        v_at = m_at = None
        tiles = int(v.shape[1])
    schedule[out].unroll(a)
    schedule[out].unroll(b)
    schedule[out].vectorize(kl)

    p, t, c = schedule[v].op.axis
    pa, pb = schedule[v].split(p, 4)
    c_outer, c_inner = schedule[v].split(c, block)
    schedule[v].reorder(t, c_outer, pa, pb, c_inner)
    if v_at is None:
        schedule[v].parallel(t)
    else:
        schedule[v].compute_at(schedule[out], v_at)
    schedule[v].unroll(pa)
    schedule[v].unroll(pb)
    schedule[v].vectorize(c_inner)

    cache = schedule.cache_write(m, "global")
    p, kv, t, l = schedule[m].op.axis
    width = max(d for d in range(1, REGISTER_TILES + 1) if tiles % d == 0)
    t_outer, t_inner = schedule[m].split(t, width)
    schedule[m].reorder(p, kv, t_outer, t_inner, l)
    if m_at is None:
        schedule[m].parallel(schedule[m].fuse(p, kv))
    else:
        schedule[m].compute_at(schedule[out], m_at)
    schedule[m].vectorize(l)
    schedule[cache].compute_at(schedule[m], t_outer)
    _, _, t_c, l_c = schedule[cache].op.axis
    pair_c, member_c = schedule[cache].op.reduce_axis
    schedule[cache].reorder(pair_c, t_c, l_c, member_c)
    schedule[cache].unroll(t_c)
    schedule[cache].tensorize(l_c, int16_pair_conv.pmaddwd_intrinsic(lanes))
    return schedule


# --------------------------------------------------------------------------- the Relay op


def _type_relation(arg_types, attrs):
    data, weights = arg_types
    if not (isinstance(data, relay.TensorType) and isinstance(weights, relay.TensorType)):
        return None  # not known yet
    n, _, height, width, _ = (int(x) for x in data.shape)
    out_channels = int(weights.shape[1]) * int(weights.shape[3])
    padding = int(attrs.padding[0])
    return relay.TensorType((n, out_channels // OUT_BLOCK, height + 2 * padding - 2,
                             width + 2 * padding - 2, OUT_BLOCK), "int32")


def _compute(attrs, inputs, out_type):
    return [winograd_conv2d(inputs[0], inputs[1], int(attrs.padding[0]))]


def _schedule(attrs, outs, target):
    with target:
        return schedule_winograd(outs)


@tvm.target.override_native_generic_func("quantfuse_winograd_conv2d_3x3_strategy")
def _strategy(attrs, inputs, out_type, target):
    from tvm.relay.op import op as _op  # pylint: disable=import-outside-toplevel

    strategy = _op.OpStrategy()
    strategy.add_implementation(_compute, _schedule, name="winograd_conv2d_3x3_int16.x86")
    return strategy


def register() -> None:
    """Register :data:`OP_NAME` with Relay (idempotent; done on import, so that a module holding
    the op loads wherever quantfuse is imported): its type relation (attributes ``Conv2DAttrs``,
    those of the conv it replaces; only ``padding`` is read), its fusion pattern (the epilogue
    fuses after it, as after a conv) and its one implementation."""
    from tvm.relay.op import op as _op  # pylint: disable=import-outside-toplevel

    if OP_NAME in tvm.ir.Op.list_op_names():
        return
    _op.register(OP_NAME, "int8 3x3 conv as int16 Winograd F(2x2, 3x3) (quantfuse)")
    op = tvm.ir.Op.get(OP_NAME)
    op.set_num_inputs(2)
    op.add_argument("data", "Tensor", "NCHW{c}c input, uint8 or int16")
    op.add_argument("weights", "Tensor", "transformed weights, int16")
    op.set_attrs_type_key("relay.attrs.Conv2DAttrs")
    op.set_support_level(10)
    op.add_type_rel("QuantfuseWinograd3x3", _type_relation)
    _op.register_pattern(OP_NAME, _op.OpPattern.OUT_ELEMWISE_FUSABLE)
    _op.register_strategy(OP_NAME, _strategy)


def winograd_call(data: relay.Expr, weights: np.ndarray, conv_attrs: tvm.ir.Attrs) -> relay.Expr:
    """A call of :data:`OP_NAME` in place of a conv with attributes ``conv_attrs`` (its
    ``Conv2DAttrs``, kept: tools that read a conv's shape read this op's the same way)."""
    return relay.Call(tvm.ir.Op.get(OP_NAME), [data, relay.const(weights)], conv_attrs)


register()
