"""QNN table lookups indexed in int32, not in the input's uint8.

TVM 0.19 legalizes ``qnn.sigmoid``, ``qnn.hardswish``, ``qnn.tanh`` and the other unary QNN ops to
a 256-entry table lookup, ``take(table, reinterpret(x, "uint8"), mode="fast")``: the TIR reads
``table[x]`` with a **uint8 index**. Wherever TVM relaxes such an access over a loop (a block's
read region, ``PlanAndUpdateBufferAllocationLocation`` in the fusion measure and in lowering) it
covers the index set ``[lo, hi]`` with ``Range(lo, hi + 1 - lo)`` computed in the index's own
dtype (``IntSet::CoverRange``, ``src/arith/int_set.cc``): with ``hi = 255`` the ``+ 1`` wraps to
``0U``, and with ``lo > 0`` TVM's arithmetic refuses the unsigned ``0 - lo``::

    InternalError: Check failed: (!((pa && pa->dtype.is_uint() && pa->value == 0U) && (pb &&
    pb->dtype.is_uint() && pb->value > 0U))) is false

(with ``lo == 0`` the region silently gets extent 0). Whether ``lo > 0`` depends on the clip
bounds and zero points the calibration chose, so the same network failed or passed with another
random calibration. :func:`register` replaces those legalizations with the same table (TVM's own
``create_integer_lookup_op``) indexed by the uint8 value cast to int32, where ``255 + 1`` is 256.
Registered on import of :mod:`relay_ext.lowering.relay_build`, before any Relay module is lowered.
"""

from __future__ import annotations

import logging
from typing import Callable, Dict

import numpy as np
import tvm
from tvm import relay
from tvm.relay.qnn.op.canonicalizations import create_integer_lookup_op
from tvm.relay.qnn.op.legalizations import hardswish_func
from tvm.relay.qnn.op.op import register_qnn_legalize

logger = logging.getLogger(__name__)

# Above TVM's level 10: ours replaces TVM's registration for these ops.
LEVEL = 11
INDEX_DTYPE = "int32"

# The unary QNN ops TVM 0.19 legalizes to a table lookup, and the function each table holds.
TABLE_OPS: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "qnn.sqrt": np.sqrt,
    "qnn.rsqrt": lambda arr: 1 / np.sqrt(arr),
    "qnn.exp": np.exp,
    "qnn.sigmoid": lambda arr: 1 / (1 + np.exp(-arr)),
    "qnn.hardswish": hardswish_func,
    "qnn.tanh": np.tanh,
    "qnn.log": np.log,
    "qnn.abs": np.abs,
}

_registered = False


def int32_index_lookup(floating_point_func: Callable[[np.ndarray], np.ndarray]):
    """A QNN legalization: TVM's lookup table for ``floating_point_func``, read with an int32
    index (the uint8 reinterpretation of the input, cast)."""

    def legalize(attrs, inputs, types):  # pylint: disable=unused-argument
        lookup = create_integer_lookup_op(
            input_arg=inputs[0], floating_point_func=floating_point_func,
            in_scale=inputs[1], in_zero_point=inputs[2],
            out_scale=inputs[3], out_zero_point=inputs[4],
            in_dtype=types[0].dtype, out_dtype=types[0].dtype)
        table, index = lookup.args  # take(table, reinterpret(x, "uintN"), axis=0, mode="fast")
        return relay.take(table, relay.cast(index, INDEX_DTYPE), axis=0, mode="fast")

    return legalize


def register() -> None:
    """Replace TVM's table-lookup legalizations of :data:`TABLE_OPS` (once per process)."""
    global _registered  # pylint: disable=global-statement
    if _registered:
        return
    for op_name, func in TABLE_OPS.items():
        register_qnn_legalize(op_name, int32_index_lookup(func), level=LEVEL)
    _registered = True
    logger.debug("QNN table lookups indexed in %s: %s", INDEX_DTYPE, ", ".join(TABLE_OPS))


def lookup_index_dtypes(mod: tvm.IRModule) -> list:
    """The index dtypes of every ``take`` in ``mod``'s functions (for tests)."""
    found = []

    def visit(node):
        if isinstance(node, relay.Call) and getattr(node.op, "name", "") == "take":
            found.append(node.args[1].checked_type.dtype)

    for func in mod.functions.values():
        if isinstance(func, relay.Function):
            relay.analysis.post_order_visit(func, visit)
    return found
