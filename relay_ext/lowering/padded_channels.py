"""An int8 conv whose output channels the x86 legalization padded keeps them padded up to the
next conv, instead of slicing them off after it and re-blocking the narrow tensor before the next.

TVM's x86 ``Legalize`` of an int8 ``nn.conv2d`` (``conv2d_alter_int8_common``) pads output
channels to a multiple of 16 (the int32 lanes of one AVX-512 register): zero weights for the added
channels, then a ``strided_slice`` back to the model's count. MobileNetV2's 24-channel stage is
such a case. After ``AlterOpLayout`` the conv writes ``NCHW16c`` (32 channels), the slice needs the
flat layout, and the next conv blocks its 24 input channels by 12 or 8: two ``layout_transform``
kernels between two convs (three in MobileNetV2, where the residual add sits between)::

    before                                              after
    %c = nn.conv2d(%x, %w32)            # 32 channels   %c = nn.conv2d(%x, %w32)
    %s = strided_slice(%c, end=[1, 24, 56, 56])         %q = requantize ops(%c, per-channel
    %q = requantize ops(%s, per-channel constants[24])       constants padded to 32)
    %n = nn.conv2d(%q, %v)              # %v: 24 inputs %n = nn.conv2d(%q, %v + 8 zero inputs)

The elementwise ops between the two convs (casts, arithmetic, clip; constants per channel or
scalar; the residual add of two such tensors) run on all 32 channels, and the next conv reads
them with zero weights for the 8 added ones, so the added channels' values (whatever the
requantize makes of the zero sums) never reach an output: integer products with zero weights are
exactly zero. Any other consumer (a pool, a concatenate, an output, a conv of non-constant
weights or with groups, an op that takes the tensor as a divisor) still gets the 24 channels,
sliced where it reads them. Per-channel constants are padded by repeating their last channel,
so that no op sees a value the model's own channels would not.

Where the next conv reads the tensor twice, concatenated (the saturation-free split that
non-``NCHW`` convs of targets without VNNI get, :mod:`relay_ext.lowering.x86.saturation_free_int8`),
nothing changes: it would read 64 channels for 48, and MobileNetV2's no-search build for
``core-avx2`` measured 1.035x slower that way when its convs had that form. The int16 convs of
those targets (``NCHW``) read the padded tensor widened, as any conv reads it.

Applied by :func:`relay_ext.lowering.prefold.prefold` after Relay's legalization (the weights
are constants then) and before ``AlterOpLayout``; task extraction prefolds as the build does
(:func:`relay_ext.lowering.tasks.lowered_tasks`), so tuning and the build see the same tasks.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Dict, Optional, Tuple

import numpy as np
import tvm
from tvm import relay

logger = logging.getLogger(__name__)

CHANNEL_AXIS = 1  # NCHW, the layout Relay's legalization works in
# Ops that compute each output element from the same element of each input (broadcasting
# scalars and per-channel constants): the added channels stay in their channels.
ELEMENTWISE = frozenset({
    "add", "subtract", "multiply", "divide", "floor_divide", "cast", "clip", "floor", "round",
    "ceil", "trunc", "nn.relu", "maximum", "minimum", "right_shift", "left_shift", "negative",
    "fixed_point_multiply"})
# ... of which these take the padded tensor as their first argument only (a divisor or a shift
# amount from the added channels' values could be anything)
FIRST_ARGUMENT_ONLY = frozenset({"divide", "floor_divide", "right_shift", "left_shift"})


def _shape(expr: relay.Expr) -> Optional[Tuple[int, ...]]:
    typ = expr.checked_type
    if not isinstance(typ, relay.TensorType):
        return None
    try:
        return tuple(int(d) for d in typ.shape)
    except (TypeError, ValueError):  # a symbolic dimension
        return None


def _channel_slice(call: relay.Call) -> Optional[int]:
    """The padded channel count a ``strided_slice`` cuts back (to the first channels of a 4-D
    NCHW tensor, every other axis whole), else None."""
    attrs = call.attrs
    source, out = _shape(call.args[0]), _shape(call)
    if source is None or out is None or len(source) != 4 or len(out) != 4:
        return None
    if attrs.axes is not None or str(attrs.slice_mode) != "end":
        return None
    if any(int(b) != 0 for b in attrs.begin) or \
            (attrs.strides is not None and any(int(s) != 1 for s in attrs.strides)):
        return None
    if [d for i, d in enumerate(source) if i != CHANNEL_AXIS] != \
            [d for i, d in enumerate(out) if i != CHANNEL_AXIS] or out[1] >= source[1]:
        return None
    return source[1]


@dataclasses.dataclass(frozen=True, eq=False)
class _Wide:
    """The padded tensor a narrow one is the first ``channels`` channels of: ``expr``, of
    ``width`` channels."""

    expr: relay.Expr
    channels: int
    width: int

    def spread(self, value: np.ndarray, axis: int) -> np.ndarray:
        """``value``, one entry per narrow channel along ``axis``, for the wide channels: an
        added channel repeats the last channel's entry (a value the op sees anyway)."""
        widths = [(0, 0)] * value.ndim
        widths[axis] = (0, self.width - self.channels)
        return np.pad(value, widths, mode="edge")

    def constant(self, value: np.ndarray) -> Optional[np.ndarray]:
        """A constant broadcast against the narrow 4-D NCHW tensor, for the wide one: spread
        over the wide channels where it has one entry per channel, as it is otherwise; None
        where it broadcasts along the channels some other way."""
        if value.ndim < 3 or value.shape[-3] == 1:
            return value
        if value.shape[-3] != self.channels or value.ndim > 4:
            return None
        return self.spread(value, value.ndim - 3)


class _KeepPaddedChannels(relay.ExprMutator):
    """See the module doc. ``wide`` maps each rewritten narrow tensor to the padded tensor it is
    read from."""

    def __init__(self) -> None:
        super().__init__()
        self.wide: Dict[relay.Expr, _Wide] = {}
        self.convs = 0

    def visit_call(self, call: relay.Call) -> relay.Expr:
        new = super().visit_call(call)
        if not isinstance(call.op, tvm.ir.Op):
            return new
        name = call.op.name
        if name == "strided_slice":
            padded = _channel_slice(call)
            if padded is not None:
                self.wide[new] = _Wide(new.args[0], _shape(call)[CHANNEL_AXIS], padded)
            return new
        handlers = {"nn.conv2d": self._conv, "nn.bias_add": self._bias_add}
        if name in handlers:
            return handlers[name](call, new)
        if name in ELEMENTWISE:
            return self._elementwise(call, new)
        return new

    def _conv(self, call: relay.Call, new: relay.Call) -> relay.Expr:
        data, weight = new.args
        attrs = call.attrs
        if data not in self.wide or not isinstance(weight, relay.Constant):
            return new
        if int(attrs.groups) != 1 or attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW":
            return new
        wide = self.wide[data]
        value = weight.data.numpy()
        if value.ndim != 4 or value.shape[1] != wide.channels:
            return new
        # zero weights for the added channels
        spread = np.pad(value, [(0, 0), (0, wide.width - wide.channels), (0, 0), (0, 0)])
        self.convs += 1
        return relay.Call(call.op, [wide.expr, relay.const(spread, str(value.dtype))],
                          call.attrs, call.type_args, call.span)

    def _bias_add(self, call: relay.Call, new: relay.Call) -> relay.Expr:
        data, bias = new.args
        out = _shape(call)
        if data not in self.wide or not isinstance(bias, relay.Constant) or out is None \
                or len(out) != 4 or int(call.attrs.axis) not in (CHANNEL_AXIS, CHANNEL_AXIS - 4):
            return new
        wide = self.wide[data]
        value = bias.data.numpy()
        if value.shape != (out[CHANNEL_AXIS],):
            return new
        return self._narrow(relay.Call(call.op, [wide.expr, relay.const(wide.spread(value, 0),
                                                                        str(value.dtype))],
                                       call.attrs, call.type_args, call.span), wide, out)

    def _narrow(self, expr: relay.Expr, like: _Wide, out: Tuple[int, ...]) -> relay.Expr:
        """The narrow tensor of the wide ``expr`` (its first channels), for any reader that is
        not rewritten; remembered as read from ``expr``."""
        narrow = relay.strided_slice(expr, begin=[0, 0, 0, 0], end=list(out))
        self.wide[narrow] = dataclasses.replace(like, expr=expr)
        return narrow

    def _elementwise(self, call: relay.Call, new: relay.Call) -> relay.Expr:
        out = _shape(call)
        if out is None or len(out) != 4:
            return new
        wides = [self.wide[arg] for arg in new.args if arg in self.wide]
        if len({(w.channels, w.width) for w in wides}) != 1:
            return new
        like, args = wides[0], []
        for index, arg in enumerate(new.args):
            if arg in self.wide:
                if _shape(call.args[index]) != out or \
                        (index > 0 and call.op.name in FIRST_ARGUMENT_ONLY):
                    return new
                args.append(self.wide[arg].expr)
            elif isinstance(arg, relay.Constant):
                value = like.constant(arg.data.numpy())
                if value is None:
                    return new
                args.append(relay.const(value, arg.data.dtype))
            else:
                return new
        return self._narrow(relay.Call(call.op, args, call.attrs, call.type_args, call.span),
                            like, out)


def keep_padded_channels(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` (after Relay's ``Legalize``, weights constant) with each int8 conv's padded output
    channels kept up to the next conv (see the module doc)."""
    mod = relay.transform.InferType()(mod)
    mutator = _KeepPaddedChannels()
    main = mutator.visit(mod["main"])
    if not mutator.convs:
        return mod
    rewritten = tvm.IRModule(mod.functions, mod.type_definitions)
    rewritten["main"] = main
    logger.info("padded channels kept up to %d convs", mutator.convs)
    return relay.transform.InferType()(rewritten)


def keep_padded_channels_pass() -> tvm.transform.Pass:
    """:func:`keep_padded_channels` as a module pass."""
    return tvm.transform.module_pass(lambda mod, _ctx: keep_padded_channels(mod), opt_level=0,
                                     name="KeepPaddedChannels")
