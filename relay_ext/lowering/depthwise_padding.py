"""A depthwise ``qnn.conv2d`` pads its input inside its own kernel, not in a kernel of its own.

TVM 0.19 canonicalizes every padded ``qnn.conv2d`` to an explicit ``nn.pad`` with the input zero
point followed by an unpadded ``nn.conv2d`` (``Conv2DPadInput``, ``src/relay/qnn/op/
convolution.cc``). Relay's fusion cannot put that pad (an injective op) in front of the conv (an
anchor takes only the elementwise ops after it), nor after the conv that produced the input, so
each padded depthwise conv costs a copy of its input in a kernel of its own (17 ``fused_nn_pad``
calls in MobileNetV2 on the AVX-512 hosts)::

    before                                       after (input zero point 0)
    %p = nn.pad(%x, 0, pad_width=[.., [1, 1], [1, 1]])
    %c = nn.conv2d(%p, %w, padding=[0, 0, 0, 0],   %c = nn.conv2d(%x, %w, padding=[1, 1, 1, 1],
                   groups=96)                                     groups=96)

:func:`register` puts a canonicalization of ``qnn.conv2d`` above TVM's (level 11): TVM's own, then,
where the input zero point is 0 and the conv is grouped, the zero pad folded back into the
``nn.conv2d`` it feeds, whose TOPI compute pads with zeros inside the conv's kernel. The values
are the same (a pad with 0 is what the conv's own padding is). A nonzero zero point keeps TVM's
pad (TOPI pads with 0 only), and so does a dense conv: its pad is fused with the layout copy in
front of it on the AMX target, and the AMX conv designs read a padded input.
Registered on import of :mod:`relay_ext.lowering.relay_build`, before any Relay module is lowered.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import tvm
from tvm import relay
from tvm.relay import dataflow_pattern as dfp

logger = logging.getLogger(__name__)

OP_NAME = "qnn.conv2d"
ATTR = "FTVMQnnCanonicalize"
# Above TVM's level 10: ours replaces TVM's canonicalization of qnn.conv2d (and calls it).
LEVEL = 11

_tvm_canonicalize: Optional[tvm.runtime.PackedFunc] = None


def constant_scalar(expr: relay.Expr) -> Optional[float]:
    """The value of a one-element constant (a zero point, a pad value), else None."""
    if not isinstance(expr, relay.Constant) or expr.data.numpy().size != 1:
        return None
    return float(expr.data.numpy().reshape(()))


def _zero_scalar(expr: relay.Expr) -> bool:
    return constant_scalar(expr) == 0.0


def spatial_padding(pad: relay.Call, layout: str) -> Optional[list[int]]:
    """The pad's (top, left, bottom, right) in ``layout`` (NCHW or NHWC), or None where it pads
    another axis or is not a constant pad."""
    if pad.attrs.pad_mode != "constant" or len(pad.attrs.pad_width) != len(layout):
        return None
    widths = {axis: [int(w) for w in pair] for axis, pair in zip(layout, pad.attrs.pad_width)}
    if any(widths[axis] != [0, 0] for axis in layout if axis not in "HW"):
        return None
    if any(width < 0 for axis in "HW" for width in widths[axis]):  # a negative width crops
        return None
    return [widths["H"][0], widths["W"][0], widths["H"][1], widths["W"][1]]


class _FoldZeroPad(dfp.DFPatternCallback):
    """``nn.conv2d(nn.pad(x, 0), w, padding=0, groups>1)`` -> ``nn.conv2d(x, w, padding=pad)``."""

    def __init__(self) -> None:
        super().__init__(require_type=False)
        self.data = dfp.wildcard()
        self.pad = dfp.is_op("nn.pad")(self.data, dfp.is_constant())
        self.weight = dfp.wildcard()
        self.pattern = dfp.is_op("nn.conv2d")(self.pad, self.weight)

    def callback(self, pre: relay.Expr, post: relay.Expr, node_map: Any) -> relay.Expr:
        attrs = post.attrs
        pad = node_map[self.pad][0]
        if int(attrs.groups) == 1 or any(int(p) != 0 for p in attrs.padding):
            return post
        if not _zero_scalar(pad.args[1]) or attrs.data_layout not in ("NCHW", "NHWC"):
            return post
        padding = spatial_padding(pad, attrs.data_layout)
        if padding is None:
            return post
        return relay.nn.conv2d(
            node_map[self.data][0], node_map[self.weight][0], strides=attrs.strides,
            padding=padding, dilation=attrs.dilation, groups=attrs.groups,
            channels=attrs.channels, kernel_size=attrs.kernel_size,
            data_layout=attrs.data_layout, kernel_layout=attrs.kernel_layout,
            out_layout=attrs.out_layout, out_dtype=attrs.out_dtype)


def canonicalize(attrs: Any, inputs: list, types: list) -> relay.Expr:
    """TVM's canonicalization of a ``qnn.conv2d``, its zero pad folded back into a grouped
    ``nn.conv2d`` (see the module doc)."""
    assert _tvm_canonicalize is not None, "register() first"
    lowered = _tvm_canonicalize(attrs, inputs, types)
    zero_point = inputs[2]
    if int(attrs.groups) == 1 or not _zero_scalar(zero_point):
        return lowered
    return dfp.rewrite(_FoldZeroPad(), lowered)


def register() -> None:
    """Put :func:`canonicalize` above TVM's canonicalization of ``qnn.conv2d`` (once per
    process)."""
    global _tvm_canonicalize  # pylint: disable=global-statement
    if _tvm_canonicalize is not None:
        return
    _tvm_canonicalize = tvm.ir.Op.get(OP_NAME).get_attr(ATTR)
    tvm.ir.register_op_attr(OP_NAME, ATTR, canonicalize, level=LEVEL)
    logger.debug("%s: zero pads of grouped convs folded into the conv", OP_NAME)
