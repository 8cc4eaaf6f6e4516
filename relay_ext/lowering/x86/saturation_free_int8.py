"""uint8 x int8 convolutions that stay exact on x86 CPUs without VNNI.

Without VNNI, x86 multiplies uint8 by int8 with ``vpmaddubsw``: it adds each *pair* of adjacent
products into a signed 16-bit lane and saturates there. TOPI's int8 conv2d (every untuned conv, and
the per-task choice's default) uses it on every target with SSE4.2 but no VNNI (AVX2 hosts,
AVX-512 without VNNI), and so does MetaSchedule's AVX-512 dot product (``dot_16x4_avx512``). Two
products of a full-range activation (up to 255) with two weights whose magnitudes add up to more
than 128 leave the 16-bit range: a single ``qnn.conv2d`` of random uint8 data and int8 weights,
built for ``llvm -mcpu=core-avx2``, gets most of its outputs wrong by thousands of steps
(docs/BENCHMARKS.md). Models quantized for PyTorch's fbgemm engine avoid it by calibrating activations to 7 bits
(``reduce_range``); PT2E programs from ``X86InductorQuantizer`` and ONNX Runtime's QDQ models use
all 8, and their untuned TVM builds on AVX2 would be many output steps from the programs.

Where this can happen, :func:`install` makes a non-grouped ``NCHW`` conv, and every 2-D
``qnn.dense``, an int16 conv (:mod:`.int16_pair_conv`: operands widened to 16 bits, multiplied
with ``vpmaddwd``: exact, half the multiply work of the split below). For the other layouts it
splits the weights in two halves that cannot saturate, ``w = (w >> 1) + (w - (w >> 1))``
(both in [-64, 64]), and makes them one convolution over twice the input channels, the
activation read twice::

    qnn.conv2d(x, w, zx, 0)  ->  qnn.conv2d(concat(x, x), concat(w >> 1, w - (w >> 1)), zx, 0)

which is exact (the sum is the same sum, regrouped) and pairs no two weights above 64 in
magnitude, so every 16-bit pair sum fits (255 * 128 = 32640). One conv stays one conv: Relay fuses
its requantize epilogue as before. It costs twice the reduction and a copy of the input
(docs/known-tvm-issues.md has the measurements). Weights with a nonzero zero point (which would
count twice) and grouped convs (where they are split, below) take a second form, two convs added:
``(qnn.conv2d(x, w >> 1, zx, 0) << 1) + qnn.conv2d(x, w & 1, zx, zw)`` (exact too; their sum is an
epilogue Relay cannot fuse into both convs). The split is made in QNN's x86 legalization, so the
untuned build, MetaSchedule's task extraction and the tuned build all see it; it is made only:

* for an llvm target with SSE4.2 (TVM's "fast int8" path) and neither ``avx512vnni`` nor
  ``avxvnni`` (with VNNI, ``vpdpbusd`` sums in 32 bits: nothing changes there, nor with AMX);
* for a ``qnn.conv2d`` whose weights could saturate: some output channel with two weights whose
  positive parts (or negative parts) add up to more than 128 in magnitude (whatever the pairing;
  a model whose constant weights are quantized to 7 bits keeps its single conv);
* for grouped or depthwise convs only where MetaSchedule's AVX-512 dot product may be used
  (``avx512bw`` without VNNI): TOPI's untuned grouped and depthwise int8 ops are exact on these
  targets. TOPI's untuned int8 dense is exact too, but slow there: every ``qnn.dense`` of 2-D data
  on these targets is the int16 conv.

Weights that are not a constant when QNN is legalized (parameters bound later, a weight computed
by ops) are split with Relay ops (``right_shift``, ``subtract``, ``bitwise_and``), which constant
folding folds.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional

import numpy as np
from tvm import relay
from tvm.relay.qnn.op import legalizations
from tvm.target import Target
from tvm.target.codegen import target_has_features

from relay_ext.lowering import depthwise_padding
from relay_ext.lowering.x86 import int16_pair_conv, seven_bit_conv

logger = logging.getLogger(__name__)

UINT8_MAX = 255
INT16_MAX, INT16_MIN = 32767, -32768
VNNI_FEATURES = ("avx512vnni", "avxvnni")

_originals: Dict[str, Callable[..., Any]] = {}


def multiplies_with_pmaddubsw(target: Optional[Target], op: str = "conv2d") -> bool:
    """Whether ``op``'s uint8 x int8 products (``"conv2d"`` or ``"dense"``) may go through
    ``vpmaddubsw`` for ``target``: an llvm x86 target with SSE4.2 and no VNNI; for dense, one
    with AVX-512BW too (MetaSchedule's dot product; TOPI's untuned dense does not use it)."""
    if target is None or target.kind.name != "llvm":
        return False
    try:
        if not target_has_features("sse4.2", target) or any(
            target_has_features(feature, target) for feature in VNNI_FEATURES
        ):
            return False
        return op == "conv2d" or bool(target_has_features("avx512bw", target))
    except Exception:  # not an x86 target: LLVM knows none of these features
        return False


def can_saturate(weights: np.ndarray, output_axis: int = 0) -> bool:
    """Whether some pair of products of a uint8 activation (0..255) and two of ``weights`` (int8,
    raw values: QNN subtracts the zero point after the products, in 32 bits) of one output channel
    can leave the int16 range, whatever the pairing."""
    per_channel = np.moveaxis(np.asarray(weights, dtype=np.int64), output_axis, 0)
    per_channel = per_channel.reshape(per_channel.shape[0], -1)
    if per_channel.shape[1] < 2:
        return bool(np.any(UINT8_MAX * np.abs(per_channel) > INT16_MAX))
    top = np.sort(per_channel, axis=1)
    most = UINT8_MAX * (np.maximum(top[:, -1], 0) + np.maximum(top[:, -2], 0))
    least = UINT8_MAX * (np.minimum(top[:, 0], 0) + np.minimum(top[:, 1], 0))
    return bool(np.any(most > INT16_MAX) or np.any(least < INT16_MIN))


def split_weights(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(high, low)`` with ``weights == 2 * high + low``, high in [-64, 63], low in {0, 1}."""
    wide = np.asarray(weights, dtype=np.int16)
    return (wide >> 1).astype("int8"), (wide & 1).astype("int8")


def halve_weights(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(first, second)`` with ``weights == first + second``, both in [-64, 64]."""
    wide = np.asarray(weights, dtype=np.int16)
    return (wide >> 1).astype("int8"), (wide - (wide >> 1)).astype("int8")


def _parts(kernel: relay.Expr, numpy_split, relay_split) -> tuple[relay.Expr, relay.Expr]:
    """The two parts of an int8 kernel: numpy for a constant, Relay ops (which constant folding
    folds once the parameters are bound) for an expression."""
    if isinstance(kernel, relay.Constant):
        first, second = numpy_split(kernel.data.numpy())
        return relay.const(first), relay.const(second)
    return relay_split(kernel)


def _relay_halves(kernel: relay.Expr) -> tuple[relay.Expr, relay.Expr]:
    first = relay.right_shift(kernel, relay.const(1, "int8"))
    return first, relay.subtract(kernel, first)


def _relay_high_low(kernel: relay.Expr) -> tuple[relay.Expr, relay.Expr]:
    one = relay.const(1, "int8")
    return relay.right_shift(kernel, one), relay.bitwise_and(kernel, one)


def _split_legalize(op: str, attrs, inputs, types, relay_op: Callable[..., relay.Expr]):
    original = _originals[op]
    groups = int(attrs.groups) if op == "conv2d" else 1
    target = Target.current(allow_none=True)
    int16 = int16_pair_conv.serves(target)  # AVX2 or AVX-512BW (not an SSE-only target)
    if op == "dense" and int16 and multiplies_with_pmaddubsw(target) and len(types[0].shape) == 2:
        # Exact, and far faster than TOPI's untuned int8 dense without VNNI (docs/cpu.md).
        return int16_pair_conv.int16_dense(*inputs[:4], int(types[1].shape[0]))
    # TOPI's grouped and depthwise int8 convs do not use vpmaddubsw (exact on AVX2, tested); like
    # dense, they are split only where MetaSchedule's AVX-512 dot product may be used.
    if not multiplies_with_pmaddubsw(target, op if groups == 1 else "dense"):
        return original(attrs, inputs, types)
    # TVM's own legalization first: uint8 data and int8 weights (each shifted by 128 if need be).
    legal = legalizations.helper_change_dtypes_to_uint8_int8(attrs, inputs, types, relay_op)
    data, kernel, input_zero_point, kernel_zero_point, input_scale, kernel_scale = (
        legal.args if legal is not None else inputs)
    kernel_layout = str(attrs.kernel_layout) if op == "conv2d" else "OI"
    plain = op == "conv2d" and groups == 1 and (str(attrs.data_layout), kernel_layout) == ("NCHW", "OIHW")
    seven_bit = plain and seven_bit_conv.serves(target)
    if seven_bit and seven_bit_conv.active() and str(types[0].dtype) == "uint8" and all(
            int(d) == 1 for d in attrs.dilation) and seven_bit_conv.pays(types[1].shape):
        # 7-bit activations: TVM's uint8 x int8 conv, which seven_bit_conv computes exactly.
        logger.debug("qnn.conv2d %s kept uint8 x int8: a seven-bit conv", types[1].shape)
        return legal
    if not seven_bit and isinstance(kernel, relay.Constant) and not can_saturate(
            kernel.data.numpy(), kernel_layout.index("O")):
        return legal
    # Weights that could saturate, or that this pass cannot see yet (parameters not bound, a
    # weight computed by ops), or any weights where the seven-bit convs are compiled (they take
    # every uint8 x int8 conv left): an int16 conv, or split; exact in either case.
    if int16 and plain:
        logger.debug("qnn.conv2d %s on int16 pairs: exact where vpmaddubsw could saturate",
                     types[1].shape)
        return int16_pair_conv.int16_conv(*inputs[:4], attrs)
    new_attrs = {key: attrs[key] for key in attrs.keys()}
    logger.debug("qnn.%s %s split in two int8 halves: its uint8 x int8 pairs could saturate vpmaddubsw",
                 op, types[1].shape)
    if groups == 1 and depthwise_padding.constant_scalar(kernel_zero_point) == 0:
        # One op over twice the input channels: the same sum, regrouped.
        data_axis = str(attrs.data_layout).index("C") if op == "conv2d" else 1
        first, second = _parts(kernel, halve_weights, _relay_halves)
        return relay_op(relay.concatenate([data, data], data_axis),
                        relay.concatenate([first, second], kernel_layout.index("I")),
                        input_zero_point, kernel_zero_point, input_scale, kernel_scale, **new_attrs)
    high, low = _parts(kernel, split_weights, _relay_high_low)

    def part(weights: relay.Expr, zero_point: relay.Expr) -> relay.Expr:
        return relay_op(data, weights, input_zero_point, zero_point, input_scale, kernel_scale, **new_attrs)

    # A shift, not a multiply by 2: FoldScaleAxis (opt level 3) folds a constant multiply after a
    # conv into its weights, which would undo the split (and does not type-check: int8 x int32).
    return relay.add(relay.left_shift(part(high, relay.const(0, "int32")), relay.const(1, "int32")),
                     part(low, kernel_zero_point))


def _conv2d(attrs, inputs, types):
    return _split_legalize("conv2d", attrs, inputs, types, relay.qnn.op.conv2d)


def _dense(attrs, inputs, types):
    return _split_legalize("dense", attrs, inputs, types, relay.qnn.op.dense)


def install() -> None:
    """Put the splitting legalization in place of TVM's for ``cpu`` targets (idempotent); it calls
    TVM's own (``legalizations._qnn_*_legalize_intel_cpu``) for every conv and dense it does not
    split."""
    if _originals:
        return
    _originals["conv2d"] = legalizations._qnn_conv2d_legalize_intel_cpu
    _originals["dense"] = legalizations._qnn_dense_legalize_intel_cpu
    legalizations.qnn_conv2d_legalize.register("cpu", _conv2d, override=True)
    legalizations.qnn_dense_legalize.register("cpu", _dense, override=True)
