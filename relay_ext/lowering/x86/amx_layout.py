"""The int8 conv layout AMX needs, chosen by Relay's x86 layout pass where the target has AMX.

Relay turns every int8 ``nn.conv2d`` on x86 into ``contrib_conv2d_NCHWc`` with the channel blocks
of TOPI's fallback configuration (``_get_default_config_int8``): 16 input channels per data block
(``NCHW16c``), weights ``OIHW4i16o4i``. An AMX tile row is 64 bytes, so
:mod:`meta_rules.cpu.amx_conv` needs 64 input channels per data block: ``NCHW64c`` data and
``OIHW16i16o4i`` weights (each 16x16x4 weight block one tile), output ``NCHW16c`` as before.

:func:`install` wraps that fallback configuration in TOPI's layout pass: for a target whose LLVM
features include ``amx-tile`` and ``amx-int8``, a conv the AMX rule can take (3x3 or 1x1, stride 1
or 2, dilation 1, one group, input channels a multiple of 64, output channels of 32) gets
64-channel input blocks and 16-channel output blocks, except a 1x1 conv, which keeps 16-channel
input blocks: the AMX rule repacks them inside its kernel (:func:`reads_16_channel_blocks`);
every other conv, and every conv of any other target, keeps TOPI's choice. Relay inserts the
layout transforms between convs of different blocks (before each AMX 3x3 conv, fused with the
zero-point pad that precedes it anyway).

It also keeps TOPI's own AMX code out of such a target: TOPI's x86 ``dense`` and
``batch_matmul`` schedules switch to their AMX variants when the target has ``amx-int8``, and on
TVM 0.19 those crash or fail to build (docs/cpu.md); they are told the target has no AMX, and use
their VNNI schedules.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from tvm.target import Target

from meta_rules.cpu.amx_intrinsics import KERNELS, REPACKED_BLOCK, STRIDES
from meta_rules.cpu.amx_tiles import OC_TILES, TILE_BYTES, TILE_ROWS, target_has_amx

logger = logging.getLogger(__name__)

AMX_IC_BLOCK = TILE_BYTES  # input channels per data block: one tile row of uint8
OC_BLOCK = TILE_ROWS  # output channels per block: one accumulator tile's 16 int32 columns
AMX_STRIDES = tuple((stride, stride) for stride in STRIDES)
AMX_KERNELS = tuple((kernel, kernel) for kernel in KERNELS)
_topi_default_config: Optional[Callable[..., Any]] = None


def amx_eligible(in_channels: int, out_channels: int, kernel: tuple, strides: tuple,
                 dilation: tuple, groups: int = 1) -> bool:
    """Whether :mod:`meta_rules.cpu.amx_conv` can take a conv of this shape."""
    return (groups == 1 and tuple(kernel) in AMX_KERNELS and tuple(strides) in AMX_STRIDES
            and tuple(dilation) == (1, 1) and in_channels % AMX_IC_BLOCK == 0
            and out_channels % (OC_TILES * OC_BLOCK) == 0)


def reads_16_channel_blocks(kernel: tuple) -> bool:
    """Whether an AMX-eligible conv keeps its input in TOPI's 16-channel blocks, for the AMX rule
    to repack inside its kernel (:func:`meta_rules.cpu.amx_conv.schedule_amx_conv`) instead of
    a layout transform into 64-channel blocks before it: every 1x1 conv (stride 1 or 2). Where
    its parallel loop takes bands of rows (:func:`meta_rules.cpu.amx_conv.rows_outermost`: the
    input outweighs the weights) each band is copied once, by the thread that computes it;
    elsewhere the kernel copies the whole input first. Either way the layout transform (a task
    of its own, with a thread-pool hand-off) is gone. Whole models, no-search builds with and
    without, outputs identical (docs/cpu.md): the banded copies ResNet-50 0.97x, MobileNetV2
    0.93x, ResNet-18 0.99x; the whole copies level (0.99-1.01x), with 18 of ResNet-50's 34
    layout transforms between convs gone, 9 of MobileNetV2's 12. A 3x3 conv keeps 64-channel
    blocks: its weight tiles could not be loaded from the 16-channel blocks' weights."""
    return tuple(kernel) == (1, 1)


def _default_config_int8(cfg, data_tensor, kernel_tensor, strides, padding, dilation, out_dtype,
                         is_depthwise=False, layout="NCHW", int32_lanes=4):
    """TOPI's fallback configuration, then 64-channel input blocks for an AMX-eligible conv (16
    for one the AMX rule repacks, :func:`reads_16_channel_blocks`) and 16-channel output blocks."""
    from tvm.autotvm.task.space import SplitEntity  # pylint: disable=import-outside-toplevel

    _topi_default_config(cfg, data_tensor, kernel_tensor, strides, padding, dilation, out_dtype,
                         is_depthwise, layout, int32_lanes)
    if is_depthwise or layout != "NCHW" or len(kernel_tensor.shape) != 4:
        return
    out_channels, in_channels, kh, kw = (int(d) for d in kernel_tensor.shape)
    strides = (strides, strides) if isinstance(strides, int) else tuple(strides)
    dilation = (dilation, dilation) if isinstance(dilation, int) else tuple(dilation)
    target = Target.current(allow_none=True)
    if (str(data_tensor.dtype) == "uint8" and target is not None and target_has_amx(target)
            and amx_eligible(in_channels, out_channels, (kh, kw), strides, dilation)):
        block = REPACKED_BLOCK if reads_16_channel_blocks((kh, kw)) else AMX_IC_BLOCK
        cfg["tile_ic"] = SplitEntity([in_channels // block, block])
        cfg["tile_oc"] = SplitEntity([out_channels // OC_BLOCK, OC_BLOCK])


def _without_amx_int8(target_has_features: Callable[..., bool]) -> Callable[..., bool]:
    def has_features(keys, target=None):
        wanted = [keys] if isinstance(keys, str) else list(keys)
        if any(str(key).startswith("amx") for key in wanted):
            return False
        return target_has_features(keys, target)
    has_features.quantfuse_without_amx = True
    return has_features


def install() -> bool:
    """Wrap TOPI's fallback int8 conv configuration and hide AMX from TOPI's dense and
    batch_matmul schedules (idempotent); True once done."""
    global _topi_default_config  # pylint: disable=global-statement
    import importlib  # pylint: disable=import-outside-toplevel

    # by module path: tvm.topi.x86 re-exports functions named like its modules (dense ...)
    conv2d_alter_op = importlib.import_module("tvm.topi.x86.conv2d_alter_op")
    if _topi_default_config is None:
        _topi_default_config = conv2d_alter_op._get_default_config_int8  # pylint: disable=protected-access
        conv2d_alter_op._get_default_config_int8 = _default_config_int8  # pylint: disable=protected-access
        for name in ("tvm.topi.x86.dense", "tvm.topi.x86.batch_matmul"):
            module = importlib.import_module(name)
            if not getattr(module.target_has_features, "quantfuse_without_amx", False):
                module.target_has_features = _without_amx_int8(module.target_has_features)
    return True
