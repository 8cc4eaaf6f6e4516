"""relay_ext/lowering/x86/dense_units_padding.py: int8 dense layers padded to 16-unit blocks.

A classifier's 1000 units miss TOPI's VNNI dense (``dense_int8``, 16-unit blocks) by 8; padded,
the dense gets it, and the outputs kept are the same sums.
"""

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_ext.build import compile
from relay_ext.lowering.x86 import dense_units_padding as padding
from relay_ext.lowering.x86 import x86_codegen
from relay_ext.measure.run import run_module
from helpers import needs_host_for

AVX2 = "llvm -mcpu=core-avx2"
VNNI = "llvm -mcpu=cascadelake"


@pytest.mark.parametrize("target, data_shape, units, reduction, pads", [
    (VNNI, (1, 512), 1000, 512, True),
    (VNNI, (4, 2048), 40, 2048, True),
    (VNNI, (1, 512), 1008, 512, False),    # already a multiple of 16
    (VNNI, (1, 514), 1000, 514, False),    # dense_int8 wants the reduction in fours too
    (VNNI, (1, 2, 512), 1000, 512, False),  # 3-D data: TOPI's layout pass takes 2-D only
    (VNNI, (1, 256), 10, 256, False),      # too small to pay for the slice's kernel
    (AVX2, (1, 512), 1000, 512, False),    # no VNNI: no dense_int8 to gain
    ("llvm -mcpu=cascadelake -mattr=-avx512vnni", (1, 512), 1000, 512, False),
    ("cuda", (1, 512), 1000, 512, False),
    (None, (1, 512), 1000, 512, False),
])
def test_which_dense_layers_are_padded(target, data_shape, units, reduction, pads):
    target = tvm.target.Target(target) if target else None
    assert padding.pads_units(target, data_shape, units, reduction) == pads


def test_padded_units_is_the_next_multiple_of_16():
    assert [padding.padded_units(n) for n in (1, 16, 17, 1000, 1008)] == [16, 16, 32, 1008, 1008]


def _dense(units=40, reduction=2048, batch=2, data_dtype="uint8", per_channel=True, zero_points=(3, 0),
           weight=None):
    generator = np.random.default_rng(0)
    info = np.iinfo(data_dtype)
    data = generator.integers(info.min, info.max + 1, (batch, reduction)).astype(data_dtype)
    weights = generator.integers(-128, 128, (units, reduction)).astype("int8")
    zx, zw = zero_points
    var = relay.var("data", shape=data.shape, dtype=data_dtype)
    scale = (relay.const(generator.uniform(0.01, 0.02, units).astype("float32")) if per_channel
             else relay.const(0.015))
    zw_expr = relay.const(np.full(units, zw, "int32")) if per_channel else relay.const(zw)
    weight_expr = weight if weight is not None else relay.const(weights)
    body = relay.qnn.op.dense(var, weight_expr, relay.const(zx), zw_expr, relay.const(0.5), scale,
                              units=units, out_dtype="int32")
    params = [var] + ([weight] if weight is not None else [])
    mod = tvm.IRModule.from_expr(relay.Function(params, body))
    expected = (data.astype(np.int64) - zx) @ (weights.astype(np.int64) - zw).T
    return mod, data, weights, expected


def _legalized(mod: tvm.IRModule, target: str) -> relay.Function:
    x86_codegen.install()
    with tvm.target.Target(target):
        return relay.transform.InferType()(relay.qnn.transform.Legalize()(relay.transform.InferType()(mod)))["main"]


def _calls(function: relay.Function, name: str) -> list:
    found = []
    relay.analysis.post_order_visit(
        function, lambda e: found.append(e) if isinstance(e, relay.Call) and getattr(e.op, "name", "") == name
        else None)
    return found


def test_a_vnni_target_gets_the_padded_dense_and_a_slice_after_it():
    mod, _, _, _ = _dense()
    legal = _legalized(mod, VNNI)
    (dense,) = _calls(legal, "qnn.dense")
    assert [int(d) for d in dense.args[1].checked_type.shape] == [48, 2048]
    assert [int(d) for d in dense.args[3].checked_type.shape] == [48]  # per-channel zero points
    assert [int(d) for d in dense.args[5].checked_type.shape] == [48]  # and scales
    assert np.all(dense.args[1].data.numpy()[40:] == 0)
    (slice_,) = _calls(legal, "strided_slice")
    assert [int(d) for d in legal.body.checked_type.shape] == [2, 40]
    assert slice_.args[0] == dense or _calls(slice_.args[0], "qnn.dense")


def test_an_avx2_target_keeps_the_dense_as_it_is():
    mod, _, _, _ = _dense()
    legal = _legalized(mod, AVX2)
    assert not _calls(legal, "strided_slice")
    assert all(int(call.args[1].checked_type.shape[0]) == 40 for call in _calls(legal, "qnn.dense"))


@needs_host_for(VNNI)
@pytest.mark.parametrize("case", [
    dict(),                                              # uint8 x int8, per-channel scales
    dict(per_channel=False, zero_points=(3, 5)),         # scalar scale and weight zero point
    dict(data_dtype="int8", zero_points=(-5, 0)),        # int8 data: TVM shifts it to uint8 first
    dict(units=1000, reduction=512, batch=1),            # a classifier's shape
])
def test_the_padded_dense_is_exact(case):
    mod, data, _, expected = _dense(**case)
    built = compile(mod, {}, VNNI, schedule="default")
    (out,) = run_module(built, {"data": data})
    assert out.shape == expected.shape and np.array_equal(out, expected)


@needs_host_for(VNNI)
def test_weights_bound_as_parameters_are_padded_too():
    weight = relay.var("weight", shape=(40, 2048), dtype="int8")
    mod, data, weights, expected = _dense(weight=weight)
    assert _calls(_legalized(mod, VNNI), "nn.pad")
    built = compile(mod, {"weight": weights}, VNNI, schedule="default")
    (out,) = run_module(built, {"data": data})
    assert np.array_equal(out, expected)


def test_task_extraction_sees_the_vnni_dense():
    """The dense task is TOPI's dense_int8: weights packed in 16-unit blocks of 4-byte groups."""
    from tvm import meta_schedule as ms

    x86_codegen.install()
    mod, _, _, _ = _dense(units=1000, reduction=512, batch=1)
    with tvm.transform.PassContext(opt_level=3):
        tasks = ms.relay_integration.extract_tasks(mod, tvm.target.Target(f"{VNNI} -num-cores 2"), {})
    (dense,) = [task for task in tasks if "dense" in task.task_name]
    main = dense.dispatched[0]["main"]
    weights = [buffer for buffer in main.buffer_map.values() if buffer.dtype == "int8"]
    assert [[int(d) for d in b.shape] for b in weights] == [[63, 128, 16, 4]]
