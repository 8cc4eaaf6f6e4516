"""A uint8 tensor that an int16 conv reads widened, and other ops read as it is, widened once.

An int16 conv (:mod:`.int16_pair_conv`, :mod:`.int16_winograd`) reads its uint8 input widened to
int16, minus its zero point. Where that input has no other reader, Relay fuses the widening into
the epilogue of the op before, which then writes int16. Where the input also feeds the residual
add of a ResNet block (or of a MobileNetV2 bottleneck), the op before writes uint8 for both, and
the widening becomes a kernel of its own (``fused_cast``, ``fused_subtract``) that reads the
uint8 tensor and writes its int16 copy: one kernel more per identity block (12 in ResNet-50 built
for AVX2, 5 in ResNet-18, 10 in MobileNetV2)::

    %x = cast(clip(...), "uint8")                 # the op before: writes uint8
    %w = subtract(cast(%x, "int16"), %zp)          # its own kernel: reads uint8, writes int16
    %c = nn.contrib_conv2d_NCHWc(%w, ...)
    %r = cast(%x, "float32") ...                   # the residual add (fused into a later conv)

:func:`rewrite` gives the other readers the widened tensor instead, turned back into the value
they read (exact: int16 holds every uint8 value, and adding the zero point back undoes its
subtraction)::

    %x = cast(clip(...), "uint8")
    %w = subtract(cast(%x, "int16"), %zp)          # now in the op before's kernel: writes int16
    %c = nn.contrib_conv2d_NCHWc(%w, ...)
    %r = cast(cast(add(%w, %zp), "uint8"), "float32") ...   # the residual reads int16

So the op before writes the int16 tensor once and the kernel between goes (the readers' kernels
read 2 bytes per value instead of 1). A tensor is rewritten only where every other reader is an
elementwise or broadcast op (so that its restoring ``add`` and ``cast`` fuse into that reader's
kernel, as TVM's ``CanonicalizeCast`` assumes of a cast's readers) and everything that reads the
widened tensor is a conv (or a slice of it): where a depthwise conv, say, reads the uint8 tensor,
it stays. :func:`rewrite` runs in the prefolding (:mod:`relay_ext.lowering.prefold`), after the
layout pass and the Winograd rewrite, for the targets that compile int16 convs. Relay's later
passes leave the form alone: ``SimplifyExpr`` does not merge a cast through int16 back into one
from uint8 (not a widening in its order of types), and ``CanonicalizeCast`` copies an upcast only
for a second elementwise reader (the conv is not one).
"""

from __future__ import annotations

import logging
from typing import Dict, List, Optional, Tuple

import tvm
from tvm import relay
from tvm.target import Target

from relay_ext.lowering.x86 import int16_pair_conv
from relay_ext.lowering.x86.int16_pair_conv import op_name

logger = logging.getLogger(__name__)

SOURCE_DTYPE = "uint8"
# what reads the widened tensor where it is worth sharing: a conv, or a slice a conv reads
WIDENED_READERS = ("nn.contrib_conv2d_NCHWc", "nn.conv2d", "quantfuse.winograd_conv2d_3x3",
                   "strided_slice")
BROADCAST = 1  # TVM's kBroadcast: elementwise and broadcast ops, fused into their reader's kernel


def _fuses_in(call: relay.Call) -> bool:
    """Whether ``call`` is elementwise or broadcast (TVM's ``TOpPattern``)."""
    if not isinstance(call.op, tvm.ir.Op):
        return False
    pattern = call.op.get_attr("TOpPattern")
    return pattern is not None and int(pattern) <= BROADCAST


def _readers(func: relay.Function) -> Dict[relay.Expr, List[relay.Call]]:
    readers: Dict[relay.Expr, List[relay.Call]] = {}

    def visit(expr):
        if isinstance(expr, relay.Call):
            for arg in expr.args:
                readers.setdefault(arg, []).append(expr)

    relay.analysis.post_order_visit(func, visit)
    return readers


def _widening(source: relay.Expr, readers: Dict[relay.Expr, List[relay.Call]]
              ) -> Optional[Tuple[relay.Call, Optional[relay.Constant]]]:
    """The widened tensor of ``source`` that :func:`rewrite` shares (``cast(source, "int16")``,
    or that minus a constant zero point, the second item), or None where ``source`` does not
    qualify (module doc)."""
    users = readers.get(source, [])
    widenings = [call for call in users
                 if op_name(call) == "cast" and str(call.attrs.dtype) == int16_pair_conv.INT16]
    if (len(users) < 2 or len(widenings) != 1 or str(source.checked_type.dtype) != SOURCE_DTYPE
            or not all(_fuses_in(call) for call in users)):
        return None
    widened, zero_point = widenings[0], None
    after = readers.get(widened, [])
    if len(after) == 1 and op_name(after[0]) == "subtract" and after[0].args[0].same_as(widened) \
            and isinstance(after[0].args[1], relay.Constant):
        widened, zero_point = after[0], after[0].args[1]
    if not all(op_name(call) in WIDENED_READERS for call in readers.get(widened, [])):
        return None
    return widened, zero_point


class _Rewriter(relay.ExprMutator):
    """Every reader of a qualifying source other than its widening reads the widened tensor."""

    def __init__(self, shared: Dict[relay.Expr, Tuple[relay.Call, Optional[relay.Constant]]]):
        super().__init__()
        self.shared = shared
        self.rewritten = 0

    def visit_call(self, call):
        args = []
        for arg in call.args:
            if arg in self.shared and not self._is_widening(call, arg):
                args.append(self._restored(arg))
            else:
                args.append(self.visit(arg))
        return relay.Call(self.visit(call.op), args, call.attrs, call.type_args, call.span)

    def _is_widening(self, call: relay.Call, source: relay.Expr) -> bool:
        widened, zero_point = self.shared[source]
        return call.same_as(widened.args[0] if zero_point is not None else widened)

    def _restored(self, source: relay.Expr) -> relay.Expr:
        widened, zero_point = self.shared[source]
        value = self.visit(widened)
        if zero_point is not None:
            value = relay.add(value, zero_point)
        self.rewritten += 1
        return relay.cast(value, SOURCE_DTYPE)


def rewrite(mod: tvm.IRModule, target: Target) -> tvm.IRModule:
    """``mod`` (type-checked, after the layout pass) with each uint8 tensor that an int16 conv
    reads widened and other ops read as it is widened once (module doc), for a target that
    compiles int16 convs (:func:`.int16_pair_conv.serves`); unchanged elsewhere."""
    if not int16_pair_conv.serves(target):
        return mod
    readers = _readers(mod["main"])
    shared = {}
    for source in readers:
        widening = _widening(source, readers)
        if widening is not None:
            shared[source] = widening
    if not shared:
        return mod
    rewriter = _Rewriter(shared)
    main = rewriter.visit(mod["main"])
    logger.info("int16 convs: %d uint8 tensors widened once for all their readers (%d readers)",
                len(shared), rewriter.rewritten)
    new = tvm.IRModule(mod.functions, mod.type_definitions)
    new["main"] = main
    return relay.transform.InferType()(new)
