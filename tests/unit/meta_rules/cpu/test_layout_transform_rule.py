"""The custom rule quantfuse_layout_transform (meta_rules/cpu/layout_transform_rule.py) and the
converter's annotation that hands it a layout transform (relay_ext/lowering/tir_converter.py)."""

import numpy as np
import pytest
import tvm
from tvm import relay, tir

from meta_rules.cpu.layout_transform_rule import RULE_NAME, source_run
from relay_ext.lowering.tasks import lowered_tasks
from helpers import assert_only_cpu_keys_change, only_design_after_postprocs

CPU = "llvm -num-cores 2"  # runs on every x86 host


def pad_and_transform(src="NCHW16c", dst="NCHW64c", channels=64, size=14):
    """What Relay puts before an AMX conv: QNN's explicit pad, then the layout transform."""
    block = int(src[4:-1])
    x = relay.var("x", shape=(1, channels // block, size, size, block), dtype="uint8")
    padded = relay.nn.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)))
    return tvm.IRModule.from_expr(relay.Function([x], relay.layout_transform(padded, src, dst)))


def the_task(mod, variant="ours", target=CPU):
    tasks = lowered_tasks(mod, {}, tvm.target.Target(target), variant)
    assert len(tasks) == 1
    return tasks[0].dispatched[0]  # an IRModule of one PrimFunc, "main"


def layout_block(mod: tvm.IRModule) -> tir.Block:
    found = []

    def visit(node):
        if isinstance(node, tir.Block) and node.name_hint == "T_layout_trans":
            found.append(node)

    tir.stmt_functor.post_order_visit(mod["main"].body, visit)
    return found[0]


@pytest.mark.parametrize("src,dst,run", [
    ("NCHW16c", "NCHW64c", 16),   # the AMX conv's input: 4 source blocks per destination block
    ("NCHW4c", "NCHW16c", 4),
    ("NCHW64c", "NCHW16c", None),  # a destination block inside one source block: contiguous
    ("NCHW", "NCHW16c", None),     # channels from planes: no contiguous run to copy
    ("NCHW16c", "NCHW16c", None),
    ("NCHW16c", "NHWC", None),
])
def test_the_run_copied_at_once_is_the_source_block_where_it_is_narrower(src, dst, run):
    assert source_run(src, dst) == run


def test_ours_hands_a_gathering_layout_transform_to_the_rule_and_upstream_does_not():
    ours = layout_block(the_task(pad_and_transform()))
    assert str(ours.annotations["schedule_rule"]) == RULE_NAME
    upstream = layout_block(the_task(pad_and_transform(), "upstream"))
    assert str(upstream.annotations["schedule_rule"]) == "None"
    narrowing = layout_block(the_task(pad_and_transform("NCHW64c", "NCHW16c")))
    assert str(narrowing.annotations["schedule_rule"]) == "None"


def test_the_rule_copies_one_source_block_per_vector_and_the_result_is_the_transform():
    target = tvm.target.Target(CPU)
    sch = only_design_after_postprocs(the_task(pad_and_transform()), target)
    loops = [sch.get(loop) for loop in sch.get_loops(sch.get_block("T_layout_trans"))]
    assert loops[0].kind == tir.ForKind.PARALLEL
    assert loops[-1].kind == tir.ForKind.VECTORIZED and int(loops[-1].extent) == 16
    lib = tvm.build(sch.mod, target=target)
    data = np.random.default_rng(0).integers(0, 256, (1, 4, 14, 14, 16), dtype=np.uint8)
    out = tvm.nd.empty((1, 1, 16, 16, 64), "uint8")
    lib(tvm.nd.array(data), out)
    padded = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)))
    expected = padded.transpose(0, 2, 3, 1, 4).reshape(1, 16, 16, 1, 64).transpose(0, 3, 1, 2, 4)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_for_a_gpu_the_rule_leaves_the_block_as_none_did():
    assert_only_cpu_keys_change(the_task(pad_and_transform()), RULE_NAME)
