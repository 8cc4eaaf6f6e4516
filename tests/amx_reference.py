"""The AMX conv workload (NCHWc int8 conv for the AMX target) and its numpy reference."""

import numpy as np
import tvm
from tvm import te, topi


AMX = "llvm -mcpu=cascadelake -mattr=+amx-tile,+amx-int8 -num-cores 2"


def conv_module(channels=64, height=8, ic_block=64, stride=1, kernel=3, out_channels=None):
    """TOPI's int8 NCHWc conv (as Relay's x86 layout pass makes it) and a requantize-like epilogue;
    ``out_channels`` defaults to ``channels``."""
    out_channels = out_channels or channels
    data = te.placeholder((1, channels // ic_block, height, height, ic_block), "uint8", "data")
    weight = te.placeholder((out_channels // 16, channels // ic_block, kernel, kernel,
                             ic_block // 4, 16, 4), "int8", "weight")
    pad = (kernel - 1) // 2
    conv = topi.nn.conv2d_NCHWc_int8(data, weight, (stride, stride), (pad, pad), (1, 1),
                                     f"NCHW{ic_block}c", "NCHW16c", "int32")
    out = te.compute(conv.shape, lambda *i: tvm.tir.max(tvm.tir.min(
        conv(*i) // 256, 127), -128).astype("int8"), name="requantize")
    return tvm.IRModule({"main": te.create_prim_func([data, weight, out])})


def reference(data, weight, stride=1, kernel=3):
    """numpy's NCHW[x]c int8 conv (padding (kernel - 1) // 2, input-channel block from the data's
    last axis, groups of 4) and conv_module's requantize epilogue."""
    _, blocks, height, width, ic_block = data.shape
    pad = (kernel - 1) // 2
    height, width = (height + 2 * pad - kernel) // stride + 1, (width + 2 * pad - kernel) // stride + 1
    padded = np.pad(data.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad), (0, 0)))
    acc = np.zeros((1, weight.shape[0], height, width, 16), np.int64)
    for kh in range(kernel):
        for kw in range(kernel):
            window = padded[0, :, kh:kh + stride * (height - 1) + 1:stride,
                            kw:kw + stride * (width - 1) + 1:stride].reshape(
                blocks, height, width, ic_block // 4, 4)
            acc[0] += np.einsum("bhwfs,obfcs->ohwc", window,
                                weight[:, :, kh, kw].astype(np.int64))
    return np.clip(acc // 256, -128, 127).astype(np.int8)
