"""Exact uint8 x int8 convs at ``vpmaddubsw``'s speed when activations rarely exceed 127.

``vpmaddubsw`` adds each pair of uint8 x int8 products in a signed 16-bit lane; with both
activations at most 127 the pair fits (``2 x 127 x 128 = 32512``) whatever the weights. Models
quantized for PyTorch's x86 and fbgemm engines calibrate their activations to 7 bits
(``reduce_range``), yet a few values of most tensors still come out above 127 (at most 0.13% in
ResNet-18/50 and MobileNetV2 on random inputs, docs/BENCHMARKS.md). This conv splits each
activation in its low 7 bits and its high bit, ``x = (x & 127) + 128 (x >> 7)``, and computes::

    conv(x, w) = conv(x & 127, w) + (conv(x >> 7, w) << 7)

The first term runs on every input with ``vpmaddubsw`` + ``vpmaddwd`` + ``vpaddd`` (3 vector
uops per 32 products, where the exact int16 conv of :mod:`.int16_pair_conv` needs 4). The second
is computed per register tile and block of input channels only where a flag says the block's
inputs have a high bit set: ``flag[n, c_block, oh, ow]`` is 1 where some input that output pixel
reads in that channel block is above 127 (:func:`flags`). Both terms are exact (the high bits are
0 or 1, so their pairs are at most 256), so the sum is the conv's exact int32 value; the flags only
decide what work is skipped (where a flag is 0 the skipped products are all 0).

Before (``x`` uint8, one ``vpmaddubsw`` per 4 input channels, wrong where a pair saturates)::

    conv[n, oc, oh, ow, o] += x[n, ic, oh*s + kh, ow*s + kw, c] * w[oc, ic, kh, kw, c/4, o, c%4]

After (the low term tensorized with :mod:`.seven_bit_intrinsics`' ``low_bits_intrinsic``; the high
term per channel block with its ``high_bit_intrinsic``, which tests the tile's flags and does nothing where
they are all 0)::

    low[n, oc, oh, ow, o]  += (x & 127)[...] * w[...]
    high[n, oc, oh, ow, o] += (x >> 7)[...] * w[...] * flag[n, ic, oh, ow]
    conv = low + (high << 7)
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from typing import Any, Iterator, Optional, Sequence, Tuple

import tvm
from tvm import te
from tvm.target import Target
from tvm.target.codegen import target_has_features

from relay_ext.lowering.x86 import int16_pair_conv, vnni_conv_schedule
from relay_ext.lowering.x86.seven_bit_intrinsics import (HIGH_SHIFT, LANES, QUAD, dot,
                                                         high_bit_intrinsic, low_bits_intrinsic)

logger = logging.getLogger(__name__)

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar("seven_bit_activations",
                                                               default=False)

TAG = "conv2d_NCHWc_seven_bit"
LOW_STAGE, HIGH_STAGE = "low_sum", "high_sum"  # the two terms' blocks
LOW_BITS = 127
MIN_PRODUCTS_PER_INPUT = 256  # output channels x taps of the smallest conv made seven-bit (pays)


def serves(target: Optional[Target]) -> bool:
    """Whether ``target`` takes the seven-bit convs: llvm x86 with AVX2, without AVX-512BW (its
    int16 convs multiply 32 products an instruction) or VNNI (``vpdpbusd`` is exact as it is)."""
    if target is None or target.kind.name != "llvm":
        return False
    try:
        return bool(target_has_features("avx2", target)) and not any(
            target_has_features(feature, target) for feature in ("avx512bw", "avx512vnni", "avxvnni"))
    except Exception:  # pylint: disable=broad-except
        return False  # not an x86 target: LLVM knows none of these features


@contextlib.contextmanager
def activations(seven_bit: bool) -> Iterator[None]:
    """Within: QNN's legalization makes the uint8 convs of a target :func:`serves` seven-bit
    convs (``seven_bit``) or int16 convs (:mod:`.int16_pair_conv`)."""
    token = _ACTIVE.set(bool(seven_bit))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active() -> bool:
    """Whether the module being legalized has seven-bit activations (:func:`activations`)."""
    return _ACTIVE.get()


def pays(weight_shape: Sequence[Any]) -> bool:
    """Whether a conv of ``OIHW`` weights does enough work per input value for the seven-bit
    conv's passes over its input (its low bits written, its high bits read: 3 bytes moved per
    input value, where the int16 conv may read a tensor its producer widened) to pay: at least
    :data:`MIN_PRODUCTS_PER_INPUT` output channels x taps. With every uint8 conv seven-bit,
    MobileNetV2 (narrow 1x1 convs) ran 1.025x the int16 build's time; with this rule 0.957x, and
    ResNet-50 0.931x -> 0.914x (docs/BENCHMARKS.md)."""
    out_channels, _, kernel_h, kernel_w = (int(x) for x in weight_shape)
    return out_channels * kernel_h * kernel_w >= MIN_PRODUCTS_PER_INPUT


def is_seven_bit_conv(data_dtype: str, kernel_dtype: str, groups: int, kernel_dims: int,
                      dilation: Sequence[Any], target: Optional[Target] = None) -> bool:
    """Whether an ``nn.contrib_conv2d_NCHWc`` is one this module compiles: uint8 data, int8
    weights in TOPI's int8 blocks (7 dimensions), one group, no dilation, for a target
    :func:`serves`. Where :func:`serves`, QNN's legalization leaves no other uint8 x int8 conv
    (they are int16 convs); a dilated one written in Relay keeps TVM's."""
    if (str(data_dtype), str(kernel_dtype), int(groups), kernel_dims) != ("uint8", "int8", 1, 7):
        return False
    if any(int(d) != 1 for d in dilation):
        return False
    return serves(target if target is not None else Target.current(allow_none=True))


def flags(data: te.Tensor, out_h: int, out_w: int, kernel: Tuple[int, int],
          stride: Tuple[int, int]) -> te.Tensor:
    """``flag[n, c_block, oh, ow]``: 1 where an input of channel block ``c_block`` that output
    pixel ``(oh, ow)`` reads is above 127 (the max over the block of each pixel's high bits, then
    over the kernel's window)."""
    batch, blocks, height, width, ic_bn = (int(x) for x in data.shape)
    channel = te.reduce_axis((0, ic_bn), name="c")
    pixel = te.compute((batch, blocks, height, width), lambda n, b, h, w: te.max(
        data[n, b, h, w, channel] >> HIGH_SHIFT, axis=channel), name="high_bit_pixels")
    row = te.reduce_axis((0, kernel[0]), name="kh")
    col = te.reduce_axis((0, kernel[1]), name="kw")
    return te.compute((batch, blocks, out_h, out_w), lambda n, b, oh, ow: te.max(
        pixel[n, b, oh * stride[0] + row, ow * stride[1] + col], axis=[row, col]),
        name="high_bit_flags")


def conv2d_nchwc_seven_bit(data: te.Tensor, kernel: te.Tensor, strides, padding, dilation,
                           layout: str, out_layout: str, out_dtype: str = "int32") -> te.Tensor:
    """The exact uint8 x int8 NCHWc conv above (TOPI's int8 layouts: data ``NCHW{ic_bn}c``,
    weights ``OIHW{ic_bn/4}i{oc_bn}o4i``; one group, no dilation)."""
    # pylint: disable=import-outside-toplevel,unused-argument,too-many-locals
    from tvm.topi.nn.pad import pad
    from tvm.topi.nn.utils import get_pad_tuple
    from tvm.topi.utils import get_const_tuple

    stride_h, stride_w = strides if isinstance(strides, (tuple, list)) else (strides, strides)
    stride_h, stride_w = int(stride_h), int(stride_w)
    if any(int(d) != 1 for d in (dilation if isinstance(dilation, (tuple, list)) else [dilation])):
        raise ValueError("the seven-bit conv takes no dilation")
    batch, blocks, height, width, ic_bn = get_const_tuple(data.shape)
    oc_chunks, kernel_blocks, kernel_h, kernel_w, _, oc_bn, _ = get_const_tuple(kernel.shape)
    if kernel_blocks != blocks:
        raise ValueError("the seven-bit conv takes one group")
    top, left, down, right = get_pad_tuple(padding, (kernel_h, kernel_w))
    out_h = (height + top + down - kernel_h) // stride_h + 1
    out_w = (width + left + right - kernel_w) // stride_w + 1
    if top or left or down or right:
        data = pad(data, (0, 0, top, left, 0), (0, 0, down, right, 0), name="data_pad")
    low = te.compute(data.shape, lambda *i: data(*i) & tvm.tir.const(LOW_BITS, "uint8"),
                     name="low_bits")
    flag = flags(data, out_h, out_w, (kernel_h, kernel_w), (stride_h, stride_w))
    shape = (batch, oc_chunks, out_h, out_w, oc_bn)

    def reduction(name: str, source: te.Tensor, shift: bool) -> te.Tensor:
        ico = te.reduce_axis((0, blocks), name="ic_outer")
        kh = te.reduce_axis((0, kernel_h), name="kh")
        kw = te.reduce_axis((0, kernel_w), name="kw")
        icf = te.reduce_axis((0, ic_bn // QUAD), name="ic_f_inner")
        ics = te.reduce_axis((0, QUAD), name="ic_s_inner")

        def value(n, oc, oh, ow, o):
            x = source[n, ico, oh * stride_h + kh, ow * stride_w + kw, icf * QUAD + ics]
            w = kernel[oc, ico, kh, kw, icf, o, ics]
            if shift:
                return te.sum(dot(x >> HIGH_SHIFT, w, flag[n, ico, oh, ow]), axis=[ico, kh, kw, icf, ics])
            return te.sum(dot(x, w), axis=[ico, kh, kw, icf, ics])

        return te.compute(shape, value, name=name)

    low_sum = reduction(LOW_STAGE, low, shift=False)
    high_sum = reduction(HIGH_STAGE, data, shift=True)
    return te.compute(shape, lambda *i: (low_sum(*i) + (high_sum(*i) << HIGH_SHIFT)).astype(out_dtype),
                      name="conv2d_NCHWc_int8", tag=TAG, attrs={"stride": [stride_h, stride_w]})


def schedule_conv2d_nchwc_seven_bit(outs) -> te.Schedule:
    """The column-block schedule of the int16 convs (:func:`.int16_pair_conv.register_tile`, one
    vector of a channel block at a time where that holds more accumulators, rows outside channel
    blocks where :func:`.vnni_conv_schedule.rows_outside` says so), for both terms; the splitting
    of the input and its flags done once, in parallel, before the conv."""
    from tvm.topi.utils import get_const_tuple, traverse_inline  # pylint: disable=import-outside-toplevel

    outs = [outs] if isinstance(outs, te.Tensor) else outs
    schedule = te.create_schedule([x.op for x in outs])

    def callback(op):
        if op.tag != TAG:
            return
        conv, last = op.output(0), outs[0]
        low_sum, high_sum = conv.op.input_tensors
        low, kernel = low_sum.op.input_tensors
        data, _, flag = high_sum.op.input_tensors
        _, oc_chunks, out_h, out_w, oc_bn = get_const_tuple(conv.shape)
        kernel_h, kernel_w = get_const_tuple(kernel.shape)[2:4]
        apart = int16_pair_conv.one_vector_columns(out_w, oc_bn, LANES)
        columns = apart or int16_pair_conv.register_tile(out_w, oc_bn, LANES)
        rows_outside = vnni_conv_schedule.rows_outside(out_h, out_w, oc_chunks * oc_bn,
                                                       kernel_h * kernel_w)
        _prepare(schedule, data, low, flag)

        if conv != last:
            schedule[conv].compute_inline()
        if len(schedule[last].op.axis) == 4:  # an NCHW output (a layout transform fused in)
            batch, channels, oh, ow = schedule[last].op.axis
            oc_chunk, oc_block = schedule[last].split(channels, factor=oc_bn)
        else:
            batch, oc_chunk, oh, ow, oc_block = schedule[last].op.axis
        ow_chunk, ow_block = schedule[last].split(ow, factor=columns)
        outer = [oh, oc_chunk] if rows_outside else [oc_chunk, oh]
        schedule[last].reorder(*outer, ow_chunk, ow_block, oc_block)
        schedule[last].parallel(schedule[last].fuse(batch, *outer))
        schedule[last].vectorize(oc_block)
        for term in (low_sum, high_sum):
            schedule[term].compute_at(schedule[last], ow_chunk)
        _low_term(schedule, low_sum, columns, bool(apart))
        _high_term(schedule, high_sum, columns, int(op.attrs["stride"][1]), kernel_h, kernel_w,
                   int(data.shape[-1]), oc_bn)

    traverse_inline(schedule, outs[0].op, callback)
    return schedule


def _prepare(schedule: te.Schedule, data: te.Tensor, low: te.Tensor, flag: te.Tensor) -> None:
    """Every stage before the conv: its outer loops in parallel, the channel block vectorized."""
    pixel = flag.op.input_tensors[0]
    stages = [low, pixel, flag] + ([data] if "pad" in data.op.tag else [])
    for tensor in stages:
        axes = list(schedule[tensor].op.axis)
        schedule[tensor].parallel(schedule[tensor].fuse(*axes[:3]))
    schedule[low].vectorize(schedule[low].op.axis[-1])
    schedule[pixel].unroll(schedule[pixel].op.reduce_axis[0])
    if "pad" in data.op.tag:
        schedule[data].vectorize(schedule[data].op.axis[-1])


def _low_term(schedule: te.Schedule, low_sum: te.Tensor, columns: int, apart: bool) -> None:
    stage = schedule[low_sum]
    _, _, _, ow, oc_block = stage.op.axis
    ico, kh, kw, icf, ics = stage.op.reduce_axis
    ow_chunk, ow_block = stage.split(ow, factor=columns)
    oc_f, oc_s = stage.split(oc_block, factor=LANES)
    if apart:  # one vector of the channel block per pass over the reduction
        stage.reorder(ow_chunk, oc_f, ico, kh, icf, kw, ow_block, oc_s, ics)
    else:
        stage.reorder(ow_chunk, ico, kh, icf, kw, ow_block, oc_f, oc_s, ics)
        stage.unroll(oc_f)
    stage.tensorize(oc_s, low_bits_intrinsic())
    stage.unroll(kw)
    stage.unroll(ow_block)


def _high_term(schedule: te.Schedule, high_sum: te.Tensor, columns: int, stride: int,
               kernel_h: int, kernel_w: int, ic_bn: int, oc_bn: int) -> None:
    stage = schedule[high_sum]
    _, _, _, ow, oc_block = stage.op.axis
    ico, kh, kw, icf, ics = stage.op.reduce_axis
    ow_chunk, ow_block = stage.split(ow, factor=columns)
    stage.reorder(ow_chunk, ico, kh, kw, icf, ow_block, oc_block, ics)
    stage.tensorize(kh, high_bit_intrinsic(columns, stride, kernel_h, kernel_w, ic_bn, oc_bn))


_installed = []


def _strategy(attrs, inputs, out_type, target):
    """TVM's ``conv2d_NCHWc`` strategy for ``cpu`` targets with the seven-bit convs' own (and the
    int16 convs', :func:`.int16_pair_conv.nchwc_strategy`)."""
    # pylint: disable=import-outside-toplevel
    from tvm.relay.op import op as _op
    from tvm.relay.op.strategy.generic import wrap_compute_conv2d, wrap_topi_schedule

    data, kernel = inputs
    if not is_seven_bit_conv(data.dtype, kernel.dtype, attrs.groups, len(kernel.shape),
                             attrs.dilation, target):
        return int16_pair_conv.nchwc_strategy(attrs, inputs, out_type, target)
    strategy = _op.OpStrategy()
    strategy.add_implementation(
        wrap_compute_conv2d(conv2d_nchwc_seven_bit, need_data_layout=True, need_out_layout=True),
        wrap_topi_schedule(schedule_conv2d_nchwc_seven_bit), name="conv2d_NCHWc_seven_bit.x86")
    return strategy


def install() -> None:
    """Put :func:`_strategy` in place of the int16 convs' hook (installed first; idempotent)."""
    from tvm.relay.op.strategy import generic as generic_strategy  # pylint: disable=import-outside-toplevel

    if _installed:
        return
    logger.debug("conv2d_NCHWc on AVX2: seven-bit convs for uint8 x int8, int16 convs after")
    int16_pair_conv.install()
    generic_strategy.conv2d_NCHWc_strategy.register("cpu", _strategy, override=True)
    _installed.append(True)
