"""Where the int16 Winograd op replaces a conv (:mod:`.int16_winograd`): which convs, their weights
transformed once, and the bound that keeps the int32 sums exact.

:func:`rewrite` runs in the prefolding (:mod:`relay_ext.lowering.prefold`), after the layout
pass (weights folded, layouts final; Relay's build does not run the layout pass again), for
targets without VNNI that compile int16 convs (AVX2, AVX-512BW). It replaces each
``nn.contrib_conv2d_NCHWc`` that is 3x3, stride 1, dilation 1, one group, padding 0 or 1 on every
side, batch 1, with constant weights, data of uint8 (or int16 uint8 minus a zero point), at least
:data:`MIN_CHANNELS` channels in and out and an output at least :data:`MIN_SIZE` wide, by a call
of :data:`.int16_winograd.OP_NAME` with the conv's attributes and its weights transformed
(:func:`transform_weights`). :func:`int32_bound` bounds every int32 value of the GEMM and the
output transform from the weights; a conv whose bound passes 2^31 - 1 keeps its direct form.
"""

from __future__ import annotations

import logging
import re
from typing import Optional

import numpy as np
import tvm
from tvm import relay
from tvm.target import Target

from relay_ext.lowering.numpy_layouts import layout_transform
from relay_ext.lowering.x86 import int16_pair_conv
from relay_ext.lowering.x86.int16_pair_conv import op_name
from relay_ext.lowering.x86.int16_winograd import A_T, G2, OUT_BLOCK, winograd_call

logger = logging.getLogger(__name__)

MIN_CHANNELS = 64  # smaller convs keep their direct form (not measured below this)
MIN_SIZE = 4  # outputs narrower than this: too few tiles to share a register tile
INT32_MAX = 2 ** 31 - 1
INPUT_MAX = 255  # |input| of the convs rewritten: uint8, or uint8 minus a zero point


def _transformed(kernel: np.ndarray) -> np.ndarray:
    """``G' g G'^T`` of ``kernel`` ``[K, C, 3, 3]`` per input and output channel: ``[4, 4, K, C]``
    int64."""
    return np.einsum("ai,kcij,bj->abkc", G2, kernel.astype(np.int64), G2)


def transform_weights(kernel: np.ndarray, lanes: int) -> np.ndarray:
    """``U' = G' g G'^T`` of ``kernel`` ``[K, C, 3, 3]``, packed ``[16, K / lanes, C / 2, lanes, 2]``
    int16 (position, output-channel vector, input-channel pair, lane, pair member)."""
    return _packed(_transformed(kernel), lanes)


def _packed(u: np.ndarray, lanes: int) -> np.ndarray:
    """:func:`transform_weights` of the weights whose :func:`_transformed` is ``u``."""
    out_channels, channels = u.shape[2:]
    if np.abs(u).max() > np.iinfo(np.int16).max:
        raise ValueError("transformed weights out of the int16 range")
    u = u.reshape(16, out_channels // lanes, lanes, channels // 2, 2).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(u).astype("int16")


def int32_bound(kernel: np.ndarray, input_max: int = INPUT_MAX) -> int:
    """The largest magnitude an int32 value of the GEMM (``M'``) or of the output transform (its
    partial sums included) can take for ``kernel`` ``[K, C, 3, 3]`` and inputs within
    ``+-input_max``: a ``V`` entry sums 4 inputs, and a partial sum is at most the sum of its terms'
    magnitudes."""
    return _bound(_transformed(kernel), input_max)


def _bound(u: np.ndarray, input_max: int = INPUT_MAX) -> int:
    """:func:`int32_bound` of the weights whose :func:`_transformed` is ``u``."""
    m = np.abs(u).sum(axis=3) * 4 * input_max
    half = np.einsum("by,xyk->xbk", np.abs(A_T), m)  # the second index first, as the output transform sums
    return int(np.einsum("ax,xbk->abk", np.abs(A_T), half).max())


def serves(target: Optional[Target]) -> bool:
    """Whether :func:`rewrite` changes convs for ``target``: one that compiles int16 convs
    (:func:`.int16_pair_conv.serves`) and has no VNNI."""
    from relay_ext.lowering.x86.saturation_free_int8 import multiplies_with_pmaddubsw  # pylint: disable=import-outside-toplevel

    return int16_pair_conv.serves(target) and multiplies_with_pmaddubsw(target)


def _uint8_range(expr: relay.Expr) -> bool:
    """Whether ``expr`` (int16) is uint8 data widened, or uint8 data minus a constant zero point
    (:mod:`.int16_pair_conv`'s operands), through layout copies. Uint8 data may come as a clip
    into [0, 255] cast to int16 directly: Relay drops the cast to uint8 between them (and a
    subtracted zero point of 0) where no pad separates the conv from the requantize before it."""
    while op_name(expr) == "layout_transform":
        expr = expr.args[0]
    if op_name(expr) == "subtract":
        expr, zero = expr.args
        # a uint8 zero point: the difference stays within +-INPUT_MAX
        if not isinstance(zero, relay.Constant):
            return False
        values = zero.data.numpy().astype(np.int64)
        if values.min() < 0 or values.max() > INPUT_MAX:
            return False
    if op_name(expr) != "cast":
        return False
    source = expr.args[0]
    if str(source.checked_type.dtype) == "uint8":
        return True
    return (op_name(source) == "clip" and float(source.attrs.a_min) >= 0
            and float(source.attrs.a_max) <= INPUT_MAX)


def _kernel_oihw(call: relay.Call) -> Optional[np.ndarray]:
    kernel = call.args[1]
    if not isinstance(kernel, relay.Constant):
        return None
    try:
        return layout_transform(kernel.data.numpy(), str(call.attrs.kernel_layout), "OIHW")
    except ValueError:
        return None


def _eligible(call: relay.Call, lanes: int) -> Optional[np.ndarray]:
    """The transformed weights (:func:`_transformed`, computed once) of ``call`` where
    :func:`rewrite` replaces it, else None."""
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
    if np.abs(kernel.astype(np.int64)).max() > INPUT_MAX:
        return None
    u = _transformed(kernel)
    return u if _bound(u) <= INT32_MAX else None


class _Rewriter(relay.ExprMutator):
    def __init__(self, lanes: int):
        super().__init__()
        self.lanes = lanes
        self.rewritten = 0

    def visit_call(self, call):
        new = super().visit_call(call)
        if op_name(call) != "nn.contrib_conv2d_NCHWc":
            return new
        transformed = _eligible(call, self.lanes)
        if transformed is None:
            return new
        self.rewritten += 1
        return winograd_call(new.args[0], _packed(transformed, self.lanes), call.attrs)


def rewrite(mod: tvm.IRModule, target: Target) -> tvm.IRModule:
    """``mod`` (type-checked, after the layout pass, constants folded) with every eligible conv
    (module doc) as :data:`OP_NAME` where :func:`serves` ``target``; unchanged elsewhere."""
    if not serves(target):
        return mod
    rewriter = _Rewriter(int16_pair_conv.vector_lanes(target))
    main = rewriter.visit(mod["main"])
    if not rewriter.rewritten:
        return mod
    logger.info("int16 Winograd F(2x2, 3x3): %d 3x3 convs", rewriter.rewritten)
    new = tvm.IRModule(mod.functions, mod.type_definitions)
    new["main"] = main
    return relay.transform.InferType()(new)
