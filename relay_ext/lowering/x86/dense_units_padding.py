"""int8 dense layers whose output units are not a multiple of 16, padded to one for VNNI.

TOPI's x86 int8 dense with VNNI (``dense_int8``, weights packed ``NC16n4c``, ``vpdpbusd``) needs
the output units in blocks of 16 (and the reduction in blocks of 4): TOPI's layout pass
(``_alter_dense_layout``) picks it only then. A classifier of 1000 classes (ResNet, MobileNetV2)
misses it by 8 units and gets the generic ``dense_pack`` instead, whose products go through
``vpmaddwd`` on sign-extended 16-bit lanes: ResNet-50's 2048 -> 1000 dense ran 0.14 ms where
OpenVINO's took 0.10 (docs/cpu.md).

Where that happens, :func:`install` pads the weights with zero rows up to the next multiple of 16
and slices the extra outputs off right after the dense, in QNN's x86 legalization (so the untuned
build, task extraction and the tuned build all see it)::

    qnn.dense(x, w[1000, K], zx, zw, sx, sw)
      ->  strided_slice(qnn.dense(x, concat(w, zeros[8, K]), zx, zw', sx, sw'), end=1000, axes=[1])

``zw'`` and ``sw'`` are the per-channel zero points and scales padded the same way (a scalar stays
as it is). The 1000 outputs kept are the same sums as before, bit for bit; the padded ones are
dropped before anything reads them. It is made only:

* for an llvm target with AVX-512 VNNI (``avx512vnni``: the AVX-512 VNNI and AMX hosts), where
  ``dense_int8`` multiplies with ``vpdpbusd``;
* for a ``qnn.dense`` of 2-D data whose units are not a multiple of 16 and whose reduction is a
  multiple of 4 (``dense_int8``'s other condition);
* for a dense of at least :data:`MIN_WEIGHTS` weights: the slice after it is a kernel of its own
  (Relay fuses the dense's epilogue into it, not into the dense), a few microseconds, as much as
  VNNI saves on a small dense (the built-in MLP's 256 -> 10 layer; not measured).

It wraps whatever QNN's ``cpu`` dense legalization is when installed (TVM's, or
:mod:`.saturation_free_int8`'s) and hands it the padded dense.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import numpy as np
from tvm import relay
from tvm.relay.qnn.op import legalizations
from tvm.target import Target
from tvm.target.codegen import target_has_features

logger = logging.getLogger(__name__)

UNITS_BLOCK = 16  # dense_int8's output block (NC16n4c)
REDUCTION_BLOCK = 4  # and its reduction block: four bytes per vpdpbusd lane
MIN_WEIGHTS = 1 << 16  # ResNet-18's classifier has 512 x 1000

_installed: dict[str, Callable[..., Any]] = {}


def pads_units(target: Optional[Target], data_shape: tuple, units: int, reduction: int) -> bool:
    """Whether a ``qnn.dense`` of ``data_shape`` x ``(units, reduction)`` weights gets its units
    padded to a multiple of 16 for ``target``."""
    if target is None or target.kind.name != "llvm" or len(data_shape) != 2:
        return False
    if (units % UNITS_BLOCK == 0 or reduction % REDUCTION_BLOCK != 0
            or units * reduction < MIN_WEIGHTS):
        return False
    try:
        return bool(target_has_features("avx512vnni", target))
    except Exception:  # not an x86 target: LLVM knows no such feature
        return False


def padded_units(units: int) -> int:
    """``units`` rounded up to the next multiple of 16."""
    return -(-units // UNITS_BLOCK) * UNITS_BLOCK


def _pad_rows(expr: relay.Expr, tensor_type: relay.TensorType, rows: int,
              value: float) -> relay.Expr:
    """``expr`` (weights or a per-channel vector) with ``rows`` more rows of ``value``: in numpy
    for a constant, with ``nn.pad`` (which constant folding folds) otherwise."""
    widths = [(0, rows)] + [(0, 0)] * (len(tensor_type.shape) - 1)
    if isinstance(expr, relay.Constant):
        array = np.pad(expr.data.numpy(), widths, constant_values=value)
        return relay.const(array.astype(tensor_type.dtype), tensor_type.dtype)
    return relay.nn.pad(expr, widths, pad_value=value)


def _per_channel(tensor_type: relay.TensorType) -> bool:
    return len(tensor_type.shape) == 1 and int(tensor_type.shape[0]) > 1


def _padded(attrs, inputs, types, inner: Callable[..., Any]) -> Optional[relay.Expr]:
    data_type, weight_type = types[0], types[1]
    units, reduction = (int(d) for d in weight_type.shape)
    if not pads_units(Target.current(allow_none=True), tuple(data_type.shape), units, reduction):
        return None
    extra = padded_units(units) - units
    data, weight, input_zero_point, weight_zero_point, input_scale, weight_scale = inputs
    weight = _pad_rows(weight, weight_type, extra, 0)
    new_types = list(types)
    new_types[1] = relay.TensorType((units + extra, reduction), weight_type.dtype)
    if _per_channel(types[3]):
        weight_zero_point = _pad_rows(weight_zero_point, types[3], extra, 0)
        new_types[3] = relay.TensorType((units + extra,), types[3].dtype)
    if _per_channel(types[5]):  # a padded unit's scale: 1, never read
        weight_scale = _pad_rows(weight_scale, types[5], extra, 1.0)
        new_types[5] = relay.TensorType((units + extra,), types[5].dtype)
    out_type = types[6]
    new_types[6] = relay.TensorType((out_type.shape[0], units + extra), out_type.dtype)
    new_attrs = {key: attrs[key] for key in attrs.keys()}
    new_attrs["units"] = units + extra
    dense = relay.qnn.op.dense(data, weight, input_zero_point, weight_zero_point, input_scale,
                               weight_scale, **new_attrs)
    legal = inner(dense.attrs, dense.args, new_types)
    logger.debug("qnn.dense %s: units padded %d -> %d for VNNI", tuple(weight_type.shape), units,
                 units + extra)
    return relay.strided_slice(legal if legal is not None else dense, begin=[0], end=[units],
                               axes=[1])


def install() -> bool:
    """Wrap QNN's ``cpu`` dense legalization in place at the time of the call (idempotent); True
    once done."""
    if _installed:
        return True
    inner = legalizations.qnn_dense_legalize.dispatch_dict["cpu"]

    def legalize(attrs, inputs, types):
        padded = _padded(attrs, inputs, types, inner)
        return padded if padded is not None else inner(attrs, inputs, types)

    legalizations.qnn_dense_legalize.register("cpu", legalize, override=True)
    _installed["cpu"] = inner
    return True
