"""relay_ext/lowering/x86/shared_widening.py: a uint8 tensor that an int16 conv reads widened and
other ops read as it is, widened once, in the op before it.

A ResNet identity block in QNN (a conv whose uint8 output feeds the next conv and the residual
add) is prefolded and built for AVX2 with and without the rewrite: the uint8 tensor keeps one
reader, no kernel is left that only widens, and the outputs stay the same.
"""

import re

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_ext.build import compile
from relay_ext.lowering.config import BUILD_OPTIONS
from relay_ext.lowering.prefold import prefold
from relay_ext.lowering.targets import normalize_target
from relay_ext.lowering.x86 import shared_widening, x86_codegen
from relay_ext.measure.run import run_module
from relay_ext.report.layout_transforms import kernels_of_graph_json
from conftest import AVX2
from helpers import needs_host_for

CHANNELS, SIZE = 32, 14
WIDENING_ONLY = re.compile(r"fused_(cast|subtract|cast_subtract)(_\d+)?$")  # a kernel that only widens


def _identity_block(zero_point: int, residual: str = "add") -> tvm.IRModule:
    """conv -> requantize (uint8 ``x``, ``zero_point``) -> 3x3 conv -> requantize, added to ``x``
    (``residual="add"``) or to a max pool of ``x`` (``"pool"``: a reader that is no
    elementwise op)."""
    generator = np.random.default_rng(0)
    data = relay.var("data", shape=(1, CHANNELS, SIZE, SIZE), dtype="uint8")

    def conv(x, in_zero_point, kernel):
        weights = generator.integers(-128, 128, (CHANNELS, CHANNELS, kernel, kernel)).astype("int8")
        out = relay.qnn.op.conv2d(x, relay.const(weights), relay.const(in_zero_point), relay.const(0),
                                  relay.const(0.05), relay.const(0.01), kernel_size=(kernel, kernel),
                                  channels=CHANNELS, padding=(kernel // 2,) * 2, out_dtype="int32")
        return relay.qnn.op.requantize(out, relay.const(0.0005), relay.const(0), relay.const(0.05),
                                       relay.const(zero_point), out_dtype="uint8")

    x = conv(data, 3, 1)
    y = conv(x, zero_point, 3)
    other = x if residual == "add" else relay.nn.max_pool2d(x, (3, 3), padding=(1, 1))
    out = relay.qnn.op.add(y, other, relay.const(0.05), relay.const(zero_point), relay.const(0.05),
                           relay.const(zero_point), relay.const(0.1), relay.const(zero_point))
    return tvm.IRModule.from_expr(relay.Function([data], out))


def _widened_beside_other_readers(mod: tvm.IRModule) -> int:
    """uint8 tensors of ``mod`` read both through a cast to int16 and by some other op."""
    readers = shared_widening._readers(mod["main"])  # pylint: disable=protected-access
    return sum(1 for source, calls in readers.items()
               if len(calls) > 1 and str(source.checked_type.dtype) == "uint8"
               and any(getattr(c.op, "name", "") == "cast" and str(c.attrs.dtype) == "int16"
                       for c in calls))


def _prefolded(mod: tvm.IRModule, target: str) -> tvm.IRModule:
    x86_codegen.install()
    return prefold(mod, {}, normalize_target(target), BUILD_OPTIONS)


@pytest.mark.parametrize("zero_point", [0, 9], ids=["cast", "cast-minus-zero-point"])
def test_the_tensor_the_conv_and_the_residual_read_is_widened_once(zero_point, monkeypatch):
    mod = _identity_block(zero_point)
    assert _widened_beside_other_readers(_prefolded(mod, AVX2)) == 0
    monkeypatch.setattr(shared_widening, "rewrite", lambda mod, target: mod)
    assert _widened_beside_other_readers(_prefolded(mod, AVX2)) == 1


def test_a_reader_that_is_no_elementwise_op_keeps_the_tensor_as_it_is():
    """A max pool reads the uint8 tensor in its own kernel: the op before keeps writing uint8."""
    assert _widened_beside_other_readers(_prefolded(_identity_block(9, "pool"), AVX2)) == 1


def test_targets_that_make_no_int16_convs_are_left_alone():
    mod = relay.transform.InferType()(_identity_block(9))
    assert shared_widening.rewrite(mod, normalize_target("llvm")) is mod


def _kernels(lib) -> list:
    return [kernel.name for kernel in kernels_of_graph_json(lib.get_graph_json())]


@needs_host_for(AVX2)
@pytest.mark.parametrize("zero_point", [0, 9], ids=["cast", "cast-minus-zero-point"])
def test_the_block_loses_its_widening_kernel_and_keeps_its_outputs(zero_point, monkeypatch):
    mod = _identity_block(zero_point)
    data = np.random.default_rng(1).integers(0, 256, (1, CHANNELS, SIZE, SIZE)).astype("uint8")
    shared = compile(mod, {}, AVX2, schedule="default")
    monkeypatch.setattr(shared_widening, "rewrite", lambda mod, target: mod)
    apart = compile(mod, {}, AVX2, schedule="default")
    only_widening = [name for name in _kernels(apart.lib) if WIDENING_ONLY.search(name)]
    assert len(only_widening) == 1, _kernels(apart.lib)
    assert len(_kernels(shared.lib)) == len(_kernels(apart.lib)) - 1
    assert not any(WIDENING_ONLY.search(name) for name in _kernels(shared.lib))
    (out_shared,), (out_apart,) = (run_module(b, {"data": data}) for b in (shared, apart))
    assert np.array_equal(out_shared, out_apart)
