"""Small Relay QNN graphs built directly with relay.qnn.op, for tests that need exact shapes."""

import numpy as np
import tvm
from tvm import relay


def qnn_conv2d_nhwc(height: int, in_channels: int, out_channels: int, kernel: int) -> tvm.IRModule:
    """uint8/int8 NHWC qnn.conv2d followed by qnn.requantize to uint8, weights fixed (seed 0)."""
    data = relay.var("data", shape=(1, height, height, in_channels), dtype="int8")
    weight = np.random.default_rng(0).integers(-8, 8, (kernel, kernel, in_channels, out_channels))
    conv = relay.qnn.op.conv2d(
        data, relay.const(weight.astype("int8")), relay.const(0), relay.const(0),
        relay.const(0.05), relay.const(0.02), kernel_size=(kernel, kernel), channels=out_channels,
        padding=(kernel // 2, kernel // 2), data_layout="NHWC", kernel_layout="HWIO",
        out_dtype="int32")
    out = relay.qnn.op.requantize(conv, relay.const(0.001), relay.const(0), relay.const(0.1),
                                  relay.const(3), out_dtype="uint8", axis=3)
    return tvm.IRModule.from_expr(relay.Function([data], out))
