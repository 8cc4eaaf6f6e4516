"""One channel block for a quantized model's depthwise convs and its other convs, on every x86 target.

Relay's x86 layout pass gives each conv a channel-blocked layout from TOPI's fallback
configuration, op by op. Quantized ``conv2d`` gets 16-channel output blocks on every x86 target
(TOPI's int8 conv, ``NCHW16c``), but a depthwise conv gets the float fallback's block: the
largest divisor of its channels up to the target's 32-bit vector lanes, 8 on AVX2. On AVX2 a
MobileNetV2 then copies every activation from ``NCHW16c`` into ``NCHW8c`` before each depthwise
conv and back after it (``layout_transform`` kernels between two convs,
:mod:`relay_ext.report.layout_transforms`).

:func:`install` wraps that fallback configuration in TOPI's layout pass: a depthwise conv whose
data is not float (int8, uint8 or the int16 QNN widens them to) and whose channels are a multiple
of :data:`INT8_BLOCK` gets that block for its input and output, the block of the int8 convs around
it. Float models and other convs keep TOPI's choice. Only the layout changes, not what is
computed: the depthwise conv's TOPI compute takes any block.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

logger = logging.getLogger(__name__)

INT8_BLOCK = 16  # TOPI's int8 conv2d output block on x86 (int32_lanes of its layout pass)
_topi_default_config: Optional[Callable[..., Any]] = None


def depthwise_block(channels: int, dtype: str) -> Optional[int]:
    """The channel block a depthwise conv of ``channels`` with ``dtype`` data gets: None (TOPI's
    choice) for float data or channels that :data:`INT8_BLOCK` does not divide."""
    if str(dtype).startswith(("float", "bfloat")) or channels % INT8_BLOCK:
        return None
    return INT8_BLOCK


def _default_config(cfg, data, kernel, strides, padding, dilation, out_dtype, is_depthwise=False,
                    layout="NCHW"):
    """TOPI's fallback configuration, then the int8 block for a quantized depthwise conv."""
    from tvm.autotvm.task.space import SplitEntity  # pylint: disable=import-outside-toplevel

    _topi_default_config(cfg, data, kernel, strides, padding, dilation, out_dtype, is_depthwise,
                         layout)
    if not is_depthwise or layout != "NCHW" or len(data.shape) != 4:
        return
    channels = int(data.shape[1])
    block = depthwise_block(channels, data.dtype)
    if block is not None and int(kernel.shape[0]) == channels:
        cfg["tile_ic"] = SplitEntity([channels // block, block])
        cfg["tile_oc"] = SplitEntity([channels // block, block])


def install() -> bool:
    """Wrap TOPI's fallback configuration in the x86 conv layout pass (idempotent); True once
    done."""
    global _topi_default_config  # pylint: disable=global-statement
    import importlib  # pylint: disable=import-outside-toplevel

    conv2d_alter_op = importlib.import_module("tvm.topi.x86.conv2d_alter_op")
    if _topi_default_config is None:
        _topi_default_config = conv2d_alter_op._get_default_config  # pylint: disable=protected-access
        conv2d_alter_op._get_default_config = _default_config  # pylint: disable=protected-access
    return True
