"""The custom rule quantfuse_padded_layout (meta_rules/cpu/padded_layout_rule.py), the padding
bounds it reads (meta_rules/analysis/padding_blocks.py) and the converter's annotation that hands
it the model input's copy (relay_ext/lowering/tir_converter.py)."""

import numpy as np
import pytest
import tvm
from tvm import relay, tir

from meta_rules.analysis.padding_blocks import padding_bounds
from meta_rules.cpu.padded_layout_rule import RULE_NAME, blocks_channels, border_partition
from relay_ext.lowering.config import BUILD_OPTIONS
from relay_ext.lowering.tasks import lowered_tasks
from relay_ext.schedules.rule_designs import task_design
from helpers import assert_only_cpu_keys_change, only_design_after_postprocs

CPU = "llvm -num-cores 2"  # runs on every x86 host
SCALE, ZERO_POINT = 0.0625, 64


def input_copy(size=20, pad=3):
    """The first kernel of a quantized CNN: quantize the float image, pad it with the zero point
    (QNN's explicit pad), pad 3 channels to 4, transform to the first conv's channel blocks."""
    x = relay.var("x", shape=(1, 3, size, size), dtype="float32")
    q = relay.qnn.op.quantize(x, relay.const(SCALE), relay.const(ZERO_POINT), out_dtype="uint8")
    padded = relay.nn.pad(q, ((0, 0), (0, 0), (pad, pad), (pad, pad)), pad_value=ZERO_POINT)
    four = relay.nn.pad(padded, ((0, 0), (0, 1), (0, 0), (0, 0)))
    out = relay.layout_transform(four, "NCHW", "NCHW4c")
    return tvm.IRModule.from_expr(relay.Function([x], out))


def the_task(mod, variant="ours"):
    tasks = lowered_tasks(mod, {}, tvm.target.Target(CPU), variant)
    assert len(tasks) == 1
    return tasks[0]


def layout_block(mod: tvm.IRModule) -> tir.Block:
    found = []
    tir.stmt_functor.post_order_visit(mod["main"].body, lambda n: found.append(n) if isinstance(
        n, tir.Block) and n.name_hint == "T_layout_trans" else None)
    return found[0]


@pytest.mark.parametrize("src,dst,handed", [
    ("NCHW", "NCHW4c", True),      # the model input's copy into the first conv's blocks
    ("NCHW", "NCHW16c", True),
    ("NCHW16c", "NCHW64c", False),  # the other layout rule's
    ("NCHW4c", "NCHW", False),
    ("NCHW", "NHWC", False),
])
def test_the_rule_takes_transforms_into_channel_blocks_from_a_layout_without_them(src, dst, handed):
    assert blocks_channels(src, dst) == handed


@pytest.mark.parametrize("extent,lower,upper,parts", [
    (230, 3, 227, [3, 224]),
    (58, 1, 57, [1, 56]),
    (230, None, 227, [227]),
    (230, 3, None, [3]),
    (230, 0, 230, []),       # bounds that cut nothing
    (230, None, None, []),
])
def test_the_loop_is_cut_where_the_padding_ends(extent, lower, upper, parts):
    assert border_partition(extent, lower, upper) == parts


def test_the_bounds_are_read_from_the_bound_checks_the_tightest_first():
    h, w = tir.Var("h", "int64"), tir.Var("w", "int64")
    inside = tir.all(3 <= h, h < 227, 3 <= w, w < 227)
    value = tir.if_then_else(w < 230, tir.if_then_else(inside, tir.const(1, "uint8"),
                                                      tir.const(64, "uint8")),
                             tir.const(0, "uint8"))
    assert padding_bounds(value, w) == (3, 227)
    assert padding_bounds(tir.const(0, "uint8") + w.astype("uint8"), w) == (None, None)


def test_ours_hands_the_input_copy_to_the_rule_and_upstream_does_not():
    ours = layout_block(the_task(input_copy()).dispatched[0])
    assert str(ours.annotations["schedule_rule"]) == RULE_NAME
    upstream = layout_block(the_task(input_copy(), "upstream").dispatched[0])
    assert str(upstream.annotations["schedule_rule"]) == "None"


def test_a_float_copy_is_not_handed_to_the_rule():
    x = relay.var("x", shape=(1, 4, 8, 8), dtype="float32")
    padded = relay.nn.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.layout_transform(padded, "NCHW",
                                                                             "NCHW4c")))
    block = layout_block(the_task(mod).dispatched[0])
    assert str(block.annotations["schedule_rule"]) == "None"


def _default_build(mod):
    with tvm.transform.PassContext(opt_level=3):
        return relay.build(mod, target=CPU)


@pytest.mark.parametrize("size,pad", [(20, 3), (9, 1), (12, 0)])
def test_the_rule_splits_the_borders_off_and_computes_what_tvm_does(size, pad):
    mod = input_copy(size, pad)
    target = tvm.target.Target(CPU)
    sch = only_design_after_postprocs(the_task(mod).dispatched[0], target)
    names = [inst.kind.name for inst in sch.trace.insts]
    assert names.count("ComputeInline") >= 5  # quantize's steps and both pads, into the copy
    assert names.count("LoopPartition") == (1 if pad else 0)
    assert "T.parallel" in sch.mod.script()
    with tvm.transform.PassContext(opt_level=3, config=BUILD_OPTIONS):
        lib = tvm.build(sch.mod, target=target)
    data = np.random.default_rng(0).uniform(-6, 10, (1, 3, size, size)).astype("float32")
    side = size + 2 * pad
    out = tvm.nd.empty((1, 1, side, side, 4), "uint8")
    lib(tvm.nd.array(data), out)
    reference = tvm.contrib.graph_executor.GraphModule(_default_build(mod)["default"](tvm.cpu()))
    reference.set_input("x", data)
    reference.run()
    np.testing.assert_array_equal(out.numpy(), reference.get_output(0).numpy())
    quantized = np.clip(np.round(data / SCALE) + ZERO_POINT, 0, 255)
    expected = np.pad(quantized, ((0, 0), (0, 0), (pad, pad), (pad, pad)),
                      constant_values=ZERO_POINT)
    expected = np.pad(expected, ((0, 0), (0, 1), (0, 0), (0, 0)))
    expected = expected.reshape(1, 1, 4, side, side).transpose(0, 1, 3, 4, 2)
    assert np.abs(out.numpy().astype(int) - expected).max() <= 1  # numpy rounds half to even


def test_the_no_search_build_takes_the_rule_design():
    task = the_task(input_copy())
    design = task_design(task, tvm.target.Target(CPU), "ours")
    assert design.has_record and design.design == "layout rule"


def test_for_a_gpu_the_rule_leaves_the_block_as_none_did():
    assert_only_cpu_keys_change(the_task(input_copy()).dispatched[0], RULE_NAME)
