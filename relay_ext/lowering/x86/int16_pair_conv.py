"""Exact uint8 x int8 convolutions without VNNI: int16 operands, ``vpmaddwd`` on pairs of channels.

Without VNNI, TOPI's int8 conv multiplies with ``vpmaddubsw``, whose 16-bit pair sums can
saturate (:mod:`.saturation_free_int8`). Where they could, QNN's x86 legalization hands a
(non-grouped, ``NCHW``/``OIHW``) ``qnn.conv2d`` to :func:`int16_conv` instead, which computes the
same int32 sum with both operands shifted by their zero points and widened to int16::

    qnn.conv2d(x, w, zx, zw)  ->  nn.conv2d(int16(x) - zx, int16(w) - zw, out_dtype="int32")

Every operand then lies in [-255, 255], so ``vpmaddwd`` (two int16 products summed in 32 bits)
is exact, and its multiplier work per product is that of ``vpmaddubsw`` + ``vpmaddwd``: half
the work of splitting the weights in two halves (the other exact form, which doubles the
reduction). The weights are widened once, when they are folded; the activation is widened where
the conv reads it.

Three hooks of TVM's x86 lowering see the int16 conv through (:func:`install`), each calling
TVM's own function for every other conv:

* the ``nn.conv2d`` legalization pads its channels as TVM pads int8 ones (input channels to a
  multiple of 4, output channels to 16, sliced back), so it gets the int8 convs' blocks;
* the layout pass makes it ``nn.contrib_conv2d_NCHWc`` in the int8 convs' data layout
  (``NCHW16c`` between convs), its weights in pairs of input channels (``OIHW{ic/2}i16o2i``);
* the ``conv2d_NCHWc`` strategy gives it TOPI's NCHWc int8 compute with pairs
  (``n_elems=2``) and the column-block schedule of :mod:`.vnni_conv_schedule` for every kernel
  size, 1x1 included, with :func:`pmaddwd_intrinsic` (16 or 8 output channels per instruction:
  AVX-512BW or AVX2) and the register tile of :func:`register_tile`; the widening of the
  activation is done once, in parallel, before the conv.

:func:`int16_dense` gives a ``qnn.dense`` the same conv (1x1): TOPI's int8 dense without VNNI
is exact but slow (docs/cpu.md).

MetaSchedule tunes the same compute (its own schedules, no tensor intrinsic for it); untuned
tasks take the TOPI schedule above.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional

import tvm
from tvm import relay, te
from tvm.relay.op.nn.utils import get_pad_tuple2d
from tvm.target import Target

from relay_ext.lowering import depthwise_padding
from relay_ext.lowering.x86 import vnni_conv_schedule

logger = logging.getLogger(__name__)

INT16 = "int16"
PAIR = 2  # int16 products vpmaddwd sums into one 32-bit lane
# vpmaddwd's LLVM intrinsic by int32 lanes: AVX2 (ymm), AVX-512BW (zmm)
PMADDWD = {8: "llvm.x86.avx2.pmadd.wd", 16: "llvm.x86.avx512.pmaddw.d.512"}
IN_CHANNEL_MULTIPLE = 4  # input channels padded as TVM pads int8 convs' (the blocks stay alike)
OUT_CHANNEL_BLOCK = 16  # output channel block of TVM's int8 convs on x86
CONV_STAGE = "conv2d_NCHWc_int8"  # TOPI's name (and tag) of the NCHWc int8 conv it computes
# Accumulator vectors a register tile keeps live: the vector registers (16 ymm with AVX2, 32 zmm
# with AVX-512) less the broadcast input and the weight vectors the tile reads (ResNet-18 on AVX2:
# 14 ran 1.06x the time of 12, 8 alike; docs/BENCHMARKS.md).
ACCUMULATORS = {8: 12, 16: 24}

_TO_THE_END = 2**31 - 1  # a slice's end past every extent (clamped to it)

_originals: Dict[str, Callable[..., Any]] = {}


def op_name(expr: relay.Expr) -> str:
    """The name of the operator ``expr`` calls (``""`` where it calls none): how the int16
    conv's rewrites (this module, :mod:`.int16_winograd_rewrite`, :mod:`.shared_widening`) tell
    ops apart."""
    return getattr(expr.op, "name", "") if isinstance(expr, relay.Call) else ""


def int16_conv(data: relay.Expr, kernel: relay.Expr, input_zero_point: relay.Expr,
               kernel_zero_point: relay.Expr, attrs) -> relay.Expr:
    """The int32 result of ``qnn.conv2d(data, kernel, zero points, attrs)`` (groups 1, ``NCHW`` /
    ``OIHW``) as an ``nn.conv2d`` of int16 operands with their zero points subtracted: padding
    with zeros then is padding with the zero point. A pad of ``data`` with the input zero point in
    front of the conv (TVM's PyTorch importer makes one per padded conv) is folded into the conv's
    padding: the conv pads inside its own kernel (:mod:`.int16_winograd` inside its input
    transform), and the widening joins the epilogue of the op before (ResNet-18 and ResNet-50 on
    AVX2: 16 pad kernels fewer each).

    A strided 1x1 conv without padding (ResNet's downsample) reads every ``stride``-th pixel
    only: those are sliced out of the widened input and the conv runs with stride 1, its reads
    contiguous (ResNet-50's three such convs ran 0.53-0.94x their time on AVX2, docs/cpu.md)."""
    data, padding = _zero_point_pad_folded(data, input_zero_point, attrs.padding)
    strides = tuple(int(stride) for stride in attrs.strides)
    kernel_hw = tuple(int(extent) for extent in attrs.kernel_size) if attrs.kernel_size else None
    subsample = kernel_hw == (1, 1) and max(strides) > 1 and not any(padding)
    return _conv16(data, kernel, input_zero_point, kernel_zero_point,
                   subsample=strides if subsample else None,
                   strides=(1, 1) if subsample else attrs.strides, padding=padding,
                   dilation=attrs.dilation, channels=attrs.channels, kernel_size=attrs.kernel_size)


def _zero_point_pad_folded(data: relay.Expr, input_zero_point: relay.Expr,
                           padding) -> tuple[relay.Expr, list[int]]:
    """``data`` and the conv's (top, left, bottom, right) padding, with a spatial ``nn.pad`` of
    ``data`` (``NCHW``) by the input zero point folded into the padding."""
    sides = list(get_pad_tuple2d([int(side) for side in padding]))
    if op_name(data) != "nn.pad":
        return data, sides
    value = depthwise_padding.constant_scalar(data.args[1])
    zero_point = depthwise_padding.constant_scalar(input_zero_point)
    widths = depthwise_padding.spatial_padding(data, "NCHW")
    if value is None or value != zero_point or widths is None:
        return data, sides
    return data.args[0], [side + width for side, width in zip(sides, widths)]


def int16_dense(data: relay.Expr, kernel: relay.Expr, input_zero_point: relay.Expr,
                kernel_zero_point: relay.Expr, units: int) -> relay.Expr:
    """The int32 result of ``qnn.dense(data[B, K], kernel[units, K], zero points)`` as a 1x1
    :func:`int16_conv` over ``[B, K, 1, 1]``, reshaped back to ``[B, units]``. Where ``data`` is
    a ``[B, K, 1, 1]`` tensor flattened (a classifier after its global pool), the conv reads that
    tensor itself: in the convs' blocked layout, with no layout copy before it."""
    conv = _conv16(_as_nchw_column(data), relay.expand_dims(kernel, 2, 2),
                   input_zero_point, kernel_zero_point, channels=units, kernel_size=(1, 1))
    return relay.reshape(conv, (0, units))


_FLATTENING = ("reshape", "squeeze", "nn.batch_flatten")


def _as_nchw_column(data: relay.Expr) -> relay.Expr:
    """``data[B, K]`` as ``[B, K, 1, 1]``: the tensor it was flattened from (the first one of
    that shape below every reshape of it), or expanded."""
    column, expr = None, data
    while op_name(expr) in _FLATTENING:
        expr = expr.args[0]
        shape = _shape(expr)
        if shape is not None and len(shape) == 4 and shape[2:] == [1, 1]:
            column = expr
    return column if column is not None else relay.expand_dims(data, 2, 2)


def _shape(expr: relay.Expr) -> Optional[list]:
    try:
        return [int(extent) for extent in expr.checked_type.shape]
    except (ValueError, TypeError, AttributeError):  # not type-checked yet, or a dynamic shape
        return None


def _conv16(data: relay.Expr, kernel: relay.Expr, input_zero_point: relay.Expr,
            kernel_zero_point: relay.Expr, subsample: Optional[tuple] = None,
            **conv_attrs) -> relay.Expr:
    data16 = relay.subtract(relay.cast(data, INT16), relay.cast(input_zero_point, INT16))
    if subsample is not None:  # after the widening, which the producer's epilogue computes
        data16 = relay.strided_slice(data16, begin=[0, 0], end=[_TO_THE_END] * 2,
                                     strides=list(subsample), axes=[2, 3])
    # A scalar or per-output-channel zero point, broadcast along O of OIHW either way.
    kernel_zero = relay.reshape(relay.cast(kernel_zero_point, INT16), (-1, 1, 1, 1))
    kernel16 = relay.subtract(relay.cast(kernel, INT16), kernel_zero)
    return relay.nn.conv2d(data16, kernel16, groups=1, data_layout="NCHW", kernel_layout="OIHW",
                           out_dtype="int32", **conv_attrs)


def serves(target: Optional[Target]) -> bool:
    """Whether this module compiles int16 convs for ``target``: an llvm target with AVX2 or
    AVX-512BW (the lanes of :func:`pmaddwd_intrinsic`)."""
    return target is not None and target.kind.name == "llvm" and vector_lanes(target) in (8, 16)


def is_int16_conv(data_dtype: str, kernel_dtype: str, target: Optional[Target] = None) -> bool:
    """Whether a conv's operands are the int16 pair this module compiles for ``target`` (default:
    the current one, :func:`serves`). TVM's own QNN lowering for a target without fast int8
    (plain ``llvm``) makes int16 convs too; those keep TVM's path."""
    if str(data_dtype) != INT16 or str(kernel_dtype) != INT16:
        return False
    return serves(target if target is not None else Target.current(allow_none=True))


def pmaddwd_intrinsic(lanes: int) -> tvm.te.TensorIntrin:
    """``out[i] += a[0] * b[i, 0] + a[1] * b[i, 1]`` for ``i < lanes`` (int16 in, int32 out), one
    ``vpmaddwd`` (``lanes`` 8: AVX2, 16: AVX-512BW) and one vector add."""
    if lanes not in PMADDWD:
        raise ValueError(f"vpmaddwd has 8 (AVX2) or 16 (AVX-512BW) int32 lanes, not {lanes}")
    llvm_name, bits = PMADDWD[lanes], lanes * 32
    pairs = te.placeholder((PAIR,), dtype=INT16, name="pairs")
    weights = te.placeholder((lanes, PAIR), dtype=INT16, name="weights")
    k = te.reduce_axis((0, PAIR), name="k")
    out = te.compute((lanes,), lambda i: te.sum(
        pairs[k].astype("int32") * weights[i, k].astype("int32"), axis=k), name="out")
    pairs_buffer = tvm.tir.decl_buffer(pairs.shape, INT16, name="pairs_buffer", offset_factor=1,
                                       strides=[1])
    weights_buffer = tvm.tir.decl_buffer(weights.shape, INT16, name="weights_buffer",
                                         offset_factor=1, strides=[te.var("ldw"), 1])
    int32s, int16s = f"int32x{lanes}", f"int16x{bits // 16}"

    def body(ins, outs):
        def emit(kind: str):
            builder = tvm.tir.ir_builder.create()
            if kind == "reset":
                builder.emit(outs[0].vstore(0, tvm.tir.const(0, int32s)))
                return builder.get()
            pair = tvm.tir.call_intrin("int32", "tir.reinterpret", ins[0].vload([0], "int16x2"))
            broadcast = tvm.tir.call_intrin(int16s, "tir.reinterpret", pair.astype(int32s))
            product = tvm.tir.call_llvm_pure_intrin(
                int32s, llvm_name, tvm.tir.const(2, "uint32"), broadcast,
                ins[1].vload([0, 0], int16s))
            if kind == "update":
                product = product + outs[0].vload([0], int32s)
            builder.emit(outs[0].vstore(0, product))
            return builder.get()

        return emit("body"), emit("reset"), emit("update")

    return te.decl_tensor_intrin(out.op, body, binds={pairs: pairs_buffer, weights: weights_buffer},
                                 default_buffer_params={"offset_factor": 1})


def vector_lanes(target: Optional[Target]) -> int:
    """The int32 lanes of ``target``'s vectors (8 with AVX2, 16 with AVX-512; TVM's count)."""
    from tvm.target.x86 import get_simd_32bit_lanes  # pylint: disable=import-outside-toplevel

    with target if target is not None else tvm.target.Target("llvm"):
        return get_simd_32bit_lanes()


def conv2d_nchwc_int16(data: te.Tensor, kernel: te.Tensor, strides, padding, dilation,
                       layout: str, out_layout: str, out_dtype: str = "int32") -> te.Tensor:
    """TOPI's NCHWc int8 conv compute on int16 operands, input channels in pairs (weights
    ``OIHW{ic/2}i{oc}o2i``)."""
    from tvm import topi  # pylint: disable=import-outside-toplevel

    return topi.nn.conv2d_NCHWc_int8(data, kernel, strides, padding, dilation, layout, out_layout,
                                     out_dtype, n_elems=PAIR)


def register_tile(columns: int, oc_bn: int, lanes: int,
                  vectors_per_column: Optional[int] = None) -> int:
    """Output columns of an int16 conv's register tile: :func:`.vnni_conv_schedule.block_width`
    with the accumulators of ``lanes``-lane vectors (:data:`ACCUMULATORS`), ``oc_bn / lanes`` of
    them per column unless ``vectors_per_column`` says otherwise."""
    vectors = vectors_per_column if vectors_per_column is not None else oc_bn // lanes
    return vnni_conv_schedule.block_width(columns, oc_bn, ACCUMULATORS.get(lanes, 12), vectors)


def one_vector_columns(columns: int, oc_bn: int, lanes: int) -> int:
    """Columns of a conv's register tile when the ``oc_bn // lanes`` vectors of a channel
    block are computed one after the other (each its own pass over the reduction, one vector per
    column), where that tile holds more accumulators than :func:`register_tile`'s (all of a
    column's vectors at once); 0 where it does not. On AVX2 (16 channels = 2 vectors, 12
    accumulators) a width of 7 or 14 gets 7 columns instead of 1 or 2 (2 or 4 accumulators)."""
    vectors = max(oc_bn // lanes, 1)
    together = register_tile(columns, oc_bn, lanes) * vectors
    apart = register_tile(columns, oc_bn, lanes, vectors_per_column=1)
    return apart if vectors > 1 and apart > together else 0


def schedule_conv2d_nchwc_int16(outs) -> te.Schedule:
    """Every int16 conv, 1x1 or k x k, in the column-block schedule of :mod:`.vnni_conv_schedule`
    with :func:`pmaddwd_intrinsic`, the register tile of :func:`register_tile` (a channel block's
    vectors one at a time where :func:`one_vector_columns` says so), the rows outside the
    channel blocks where :func:`.vnni_conv_schedule.rows_outside` says so (on AVX2 MobileNetV2
    ran 0.95-0.98x the time, ResNet-50 level, docs/cpu.md), and the operand widening computed once,
    in parallel. (TOPI's 1x1 int8 schedule, with rows in its tile, ran ResNet-50
    1.04x and MobileNetV2 1.05x the time on AVX2, docs/BENCHMARKS.md.)"""
    from tvm.topi.utils import get_const_tuple, traverse_inline  # pylint: disable=import-outside-toplevel

    outs = [outs] if isinstance(outs, te.Tensor) else outs
    schedule = te.create_schedule([x.op for x in outs])
    lanes = vector_lanes(Target.current(allow_none=True))

    def callback(op):
        if CONV_STAGE not in op.tag:
            return
        conv = op.output(0)
        data_vec, kernel_vec = conv.op.input_tensors
        _widen_once(schedule, data_vec)
        _, oc_chunks, oh, ow, oc_bn = get_const_tuple(conv.shape)
        kernel_h, kernel_w = get_const_tuple(kernel_vec.shape)[2:4]
        apart = one_vector_columns(ow, oc_bn, lanes)
        # computed per block of columns, not per column of the fused epilogue (TOPI's)
        vnni_conv_schedule.schedule_conv_NCHWc_int8_vnni(
            schedule, {"unroll_kw": True}, data_vec, kernel_vec, conv, outs[0], lanes=lanes,
            intrin=pmaddwd_intrinsic(lanes), columns=apart or register_tile(ow, oc_bn, lanes),
            vectors_outside=bool(apart), rows_outside=vnni_conv_schedule.rows_outside(
                oh, ow, oc_chunks * oc_bn, kernel_h * kernel_w))

    traverse_inline(schedule, outs[0].op, callback)
    return schedule


def _widen_once(schedule: te.Schedule, data_vec: te.Tensor) -> None:
    """The conv's input stages before it (the widening and zero-point shift Relay fused in, a zero
    pad): one stage, all its outer loops in parallel, the channel block vectorized."""
    if "pad" in data_vec.op.tag:  # TOPI's schedule parallelises the pad; inline what feeds it
        _inline_injective(schedule, data_vec.op.input_tensors[0])
        return
    _inline_injective(schedule, data_vec, keep=True)


def _inline_injective(schedule: te.Schedule, tensor: te.Tensor, keep: bool = False) -> None:
    from tvm.topi import tag  # pylint: disable=import-outside-toplevel

    if not isinstance(tensor.op, te.ComputeOp) or not tag.is_injective(tensor.op.tag):
        return
    for producer in tensor.op.input_tensors:
        _inline_injective(schedule, producer)
    if not keep:
        schedule[tensor].compute_inline()
        return
    axes = list(schedule[tensor].op.axis)
    if len(axes) >= 2:
        schedule[tensor].parallel(schedule[tensor].fuse(*axes[:-1]))
        schedule[tensor].vectorize(axes[-1])


# --------------------------------------------------------------------------- TVM's x86 hooks


def _legalize(attrs, inputs, arg_types):
    from tvm.topi.generic.conv2d import conv2d_alter_int8_common  # pylint: disable=import-outside-toplevel

    data_type, kernel_type, out_type = arg_types[0], arg_types[1], arg_types[2]
    if not is_int16_conv(data_type.dtype, kernel_type.dtype):
        return _originals["legalize"](attrs, inputs, arg_types)
    return conv2d_alter_int8_common(inputs[0], data_type, inputs[1], kernel_type, out_type, attrs,
                                    INT16, IN_CHANNEL_MULTIPLE, OUT_CHANNEL_BLOCK)


def _alter_layout(attrs, inputs, tinfos, out_type):
    data, kernel = tinfos
    if not (is_int16_conv(data.dtype, kernel.dtype) and attrs["data_layout"] == "NCHW"
            and attrs["kernel_layout"] == "OIHW" and int(attrs.groups) == 1):
        return _originals["alter_layout"](attrs, inputs, tinfos, out_type)
    in_channels, out_channels = int(data.shape[1]), int(kernel.shape[0])
    if in_channels % PAIR or out_channels % OUT_CHANNEL_BLOCK:
        return None  # channels not padded (a dilated conv): TOPI's NCHW conv, exact and slow
    ic_bn = next(n for n in (16, 12, 8, 4, 2) if in_channels % n == 0)  # TOPI's int8 choice
    new_attrs = {key: attrs[key] for key in attrs.keys()}
    new_attrs["channels"] = out_channels
    new_attrs["data_layout"] = f"NCHW{ic_bn}c"
    new_attrs["kernel_layout"] = f"OIHW{ic_bn // PAIR}i{OUT_CHANNEL_BLOCK}o{PAIR}i"
    new_attrs["out_layout"] = f"NCHW{OUT_CHANNEL_BLOCK}c"
    return relay.nn.contrib_conv2d_nchwc(*inputs, **new_attrs)


def nchwc_strategy(attrs, inputs, out_type, target):
    """TVM's ``conv2d_NCHWc`` strategy for ``cpu`` targets, with the int16 convs' own."""
    from tvm.relay.op import op as _op  # pylint: disable=import-outside-toplevel
    from tvm.relay.op.strategy.generic import wrap_compute_conv2d, wrap_topi_schedule  # pylint: disable=import-outside-toplevel

    data, kernel = inputs
    if not (is_int16_conv(data.dtype, kernel.dtype, target) and len(kernel.shape) == 7):
        return _originals["nchwc_strategy"](attrs, inputs, out_type, target)
    strategy = _op.OpStrategy()
    strategy.add_implementation(
        wrap_compute_conv2d(conv2d_nchwc_int16, need_data_layout=True, need_out_layout=True),
        wrap_topi_schedule(schedule_conv2d_nchwc_int16), name="conv2d_NCHWc_int16_pairs.x86")
    return strategy


def install() -> None:
    """Put the three hooks in place of TVM's for ``cpu`` targets (idempotent)."""
    if _originals:
        return
    from tvm.relay.op.strategy import generic as generic_strategy  # pylint: disable=import-outside-toplevel
    from tvm.relay.op.strategy import x86 as x86_strategy  # pylint: disable=import-outside-toplevel
    from tvm.topi import nn as topi_nn  # pylint: disable=import-outside-toplevel
    from tvm.topi.x86 import conv2d_alter_op  # pylint: disable=import-outside-toplevel

    _originals["legalize"] = conv2d_alter_op._conv2d_legalize  # pylint: disable=protected-access
    _originals["alter_layout"] = conv2d_alter_op._alter_conv2d_layout  # pylint: disable=protected-access
    _originals["nchwc_strategy"] = x86_strategy.conv2d_NCHWc_strategy_cpu
    topi_nn.conv2d_legalize.register("cpu", _legalize, override=True)
    topi_nn.conv2d_alter_layout.register("cpu", _alter_layout, override=True)
    generic_strategy.conv2d_NCHWc_strategy.register("cpu", nchwc_strategy, override=True)
