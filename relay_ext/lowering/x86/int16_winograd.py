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

:func:`int32_bound` bounds every int32 value of the GEMM and the output transform from the
weights; a conv whose bound passes 2^31 - 1 keeps its direct form.

Where: :func:`rewrite` runs in the prefolding (:mod:`relay_ext.lowering.prefold`), after the
layout pass, for targets without VNNI that compile int16 convs (AVX2, AVX-512BW). It replaces
each ``nn.contrib_conv2d_NCHWc`` that is 3x3, stride 1, dilation 1, one group, padding 0 or 1 on
every side, batch 1, with constant weights, data of uint8 (or int16 uint8 minus a zero point), at
least :data:`MIN_CHANNELS` channels in and out and an output at least :data:`MIN_SIZE` wide, by
the op :data:`OP_NAME` (data ``NCHW{c}c``, transformed weights, int32 ``NCHW16c`` out, the conv's
attributes): Relay fuses the epilogue after it as after the conv. docs/cpu.md gives the
measurements.
"""

from __future__ import annotations

import logging
import re
from typing import List, Optional

import numpy as np
import tvm
from tvm import relay, te, tir
from tvm.target import Target

from relay_ext.lowering.numpy_layouts import layout_transform
from relay_ext.lowering.x86 import int16_pair_conv

logger = logging.getLogger(__name__)

OP_NAME = "quantfuse.winograd_conv2d_3x3"
OUT_BLOCK = 16  # output channels per block of the NCHW16c output, as the int8 convs'
MIN_CHANNELS = 64  # smaller convs keep their direct form (not measured below this)
MIN_SIZE = 4  # outputs narrower than this: too few tiles to share a register tile
REGISTER_TILES = 12  # tiles of a GEMM register tile: as many accumulator vectors
FUSED_MAX_WEIGHT_BYTES = 256 * 1024  # per-row GEMMs re-read the weights: only where L2 holds them
INT32_MAX = 2 ** 31 - 1
INPUT_MAX = 255  # |input| of the convs rewritten: uint8, or uint8 minus a zero point
B_T = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.int64)
G2 = np.array([[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]], dtype=np.int64)
A_T = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.int64)


# --------------------------------------------------------------------------- numpy side


def transform_weights(kernel: np.ndarray, lanes: int) -> np.ndarray:
    """``U' = G' g G'^T`` of ``kernel`` ``[K, C, 3, 3]``, packed ``[16, K / lanes, C / 2, lanes, 2]``
    int16 (position, output-channel vector, input-channel pair, lane, pair member)."""
    out_channels, channels = kernel.shape[:2]
    u = np.einsum("ai,kcij,bj->abkc", G2, kernel.astype(np.int64), G2)
    if np.abs(u).max() > np.iinfo(np.int16).max:
        raise ValueError("transformed weights out of the int16 range")
    u = u.reshape(16, out_channels // lanes, lanes, channels // 2, 2).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(u).astype("int16")


def int32_bound(kernel: np.ndarray, input_max: int = INPUT_MAX) -> int:
    """The largest magnitude an int32 value of the GEMM (``M'``) or of the output transform (its
    partial sums included) can take for ``kernel`` ``[K, C, 3, 3]`` and inputs within
    ``+-input_max``: a ``V`` entry sums 4 inputs, and a partial sum is at most the sum of its terms'
    magnitudes."""
    u = np.abs(np.einsum("ai,kcij,bj->abkc", G2, kernel.astype(np.int64), G2))  # [4, 4, K, C]
    m = u.sum(axis=3) * 4 * input_max
    half = np.einsum("by,xyk->xbk", np.abs(A_T), m)  # the second position index first, as below
    return int(np.einsum("ax,xbk->abk", np.abs(A_T), half).max())


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
    ``padding`` zeros, with weights from :func:`transform_weights`: ``[N, K / 16, Ho, Wo, 16]``."""
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
        axis=[pair, member]), name="winograd_gemm", tag="winograd_gemm")

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
    stages = {}

    def walk(tensor):
        op = tensor.op
        if not isinstance(op, te.ComputeOp) or op.tag in stages:
            return
        if op.tag.startswith("winograd"):
            stages[op.tag.split(",")[0]] = tensor
        elif tensor is not out and tag.is_injective(op.tag):
            schedule[tensor].compute_inline()
        for producer in op.input_tensors:
            walk(producer)

    walk(out)
    v, m, y = stages["winograd_input"], stages["winograd_gemm"], stages["winograd_output"]
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


def winograd_call(data: relay.Expr, weights: np.ndarray, conv_attrs) -> relay.Expr:
    """A call of :data:`OP_NAME` in place of a conv with attributes ``conv_attrs`` (its
    ``Conv2DAttrs``, kept: tools that read a conv's shape read this op's the same way)."""
    return relay.Call(tvm.ir.Op.get(OP_NAME), [data, relay.const(weights)], conv_attrs)


# --------------------------------------------------------------------------- the rewrite


def serves(target: Optional[Target]) -> bool:
    """Whether :func:`rewrite` changes convs for ``target``: one that compiles int16 convs
    (:func:`.int16_pair_conv.serves`) and has no VNNI."""
    from relay_ext.lowering.x86.saturation_free_int8 import multiplies_with_pmaddubsw  # pylint: disable=import-outside-toplevel

    return int16_pair_conv.serves(target) and multiplies_with_pmaddubsw(target)


def _uint8_range(expr: relay.Expr) -> bool:
    """Whether ``expr`` (int16) is uint8 data widened, or uint8 data minus a constant zero point
    (:mod:`.int16_pair_conv`'s operands), through layout copies."""
    def name(e):
        return getattr(e.op, "name", "") if isinstance(e, relay.Call) else ""

    while name(expr) == "layout_transform":
        expr = expr.args[0]
    if name(expr) == "subtract":
        expr, zero = expr.args
        if not (isinstance(zero, relay.Constant)
                and np.abs(zero.data.numpy().astype(np.int64)).max() <= INPUT_MAX):
            return False
    return name(expr) == "cast" and str(expr.args[0].checked_type.dtype) == "uint8"


def _kernel_oihw(call: relay.Call) -> Optional[np.ndarray]:
    kernel = call.args[1]
    if not isinstance(kernel, relay.Constant):
        return None
    try:
        return layout_transform(kernel.data.numpy(), str(call.attrs.kernel_layout), "OIHW")
    except ValueError:
        return None


def _eligible(call: relay.Call, lanes: int) -> Optional[np.ndarray]:
    """The OIHW weights of ``call`` where :func:`rewrite` replaces it, else None."""
    attrs = call.attrs
    padding = [int(x) for x in attrs.padding]
    data_type, out_type = call.args[0].checked_type, call.checked_type
    if not ([int(x) for x in attrs.kernel_size] == [3, 3] and [int(x) for x in attrs.strides] == [1, 1]
            and [int(x) for x in attrs.dilation] == [1, 1] and int(attrs.groups) == 1
            and len(set(padding)) == 1 and padding[0] in (0, 1)
            and re.fullmatch(r"NCHW\d+c", str(attrs.data_layout))
            and str(attrs.out_layout) == f"NCHW{OUT_BLOCK}c" and str(out_type.dtype) == "int32"
            and int(data_type.shape[0]) == 1):
        return None
    if str(data_type.dtype) == "int16":
        if not _uint8_range(call.args[0]):
            return None
    elif str(data_type.dtype) != "uint8":
        return None
    kernel = _kernel_oihw(call)
    if kernel is None or kernel.dtype.kind != "i":
        return None
    out_channels, channels = kernel.shape[:2]
    if (min(out_channels, channels) < MIN_CHANNELS or channels % 2 or out_channels % OUT_BLOCK
            or out_channels % lanes or min(int(out_type.shape[2]), int(out_type.shape[3])) < MIN_SIZE):
        return None
    if np.abs(kernel.astype(np.int64)).max() > INPUT_MAX or int32_bound(kernel) > INT32_MAX:
        return None
    return kernel


class _Rewriter(relay.ExprMutator):
    def __init__(self, lanes: int):
        super().__init__()
        self.lanes = lanes
        self.rewritten = 0

    def visit_call(self, call):
        new = super().visit_call(call)
        if getattr(call.op, "name", "") != "nn.contrib_conv2d_NCHWc":
            return new
        kernel = _eligible(call, self.lanes)
        if kernel is None:
            return new
        self.rewritten += 1
        return winograd_call(new.args[0], transform_weights(kernel, self.lanes), call.attrs)


def rewrite(mod: tvm.IRModule, target: Target) -> tvm.IRModule:
    """``mod`` (type-checked, after the layout pass, constants folded) with every eligible conv
    (module doc) as :data:`OP_NAME` where :func:`serves` ``target``; unchanged elsewhere."""
    if not serves(target):
        return mod
    with target:
        from tvm.target.x86 import get_simd_32bit_lanes  # pylint: disable=import-outside-toplevel

        lanes = get_simd_32bit_lanes()
    rewriter = _Rewriter(lanes)
    main = rewriter.visit(mod["main"])
    if not rewriter.rewritten:
        return mod
    logger.info("int16 Winograd F(2x2, 3x3): %d 3x3 convs", rewriter.rewritten)
    new = tvm.IRModule(mod.functions, mod.type_definitions)
    new["main"] = main
    return relay.transform.InferType()(new)


register()
