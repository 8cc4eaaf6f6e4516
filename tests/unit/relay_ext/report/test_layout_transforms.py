"""Placing a build's layout_transform kernels: between two convs, at the input, at the output."""

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_ext.report.fusion import FusionReport
from relay_ext.report.fusion_table import fusion_markdown, layout_line
from relay_ext.report.layout_transforms import (AT_INPUT, AT_OUTPUT, BETWEEN_CONVS, Kernel,
                                                PlacedTransform, count_layout_transforms,
                                                kernels_of_function, layout_transforms_of_graph_json)


def _blocked_convs() -> tvm.IRModule:
    """NCHW -> NCHW4c (input), conv out NCHW8c, -> NCHW4c (between), conv + relu, -> NCHW (output)."""
    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(1, 8, 8, 8), dtype="float32")
    w1 = relay.const(rng.standard_normal((2, 2, 3, 3, 4, 8)).astype("float32"))
    w2 = relay.const(rng.standard_normal((1, 4, 3, 3, 4, 8)).astype("float32"))
    conv = dict(kernel_size=(3, 3), padding=(1, 1), data_layout="NCHW4c", kernel_layout="OIHW4i8o",
                out_layout="NCHW8c")
    y = relay.nn.contrib_conv2d_nchwc(relay.layout_transform(x, "NCHW", "NCHW4c"), w1, channels=16, **conv)
    y = relay.nn.contrib_conv2d_nchwc(relay.layout_transform(y, "NCHW8c", "NCHW4c"), w2, channels=8, **conv)
    y = relay.layout_transform(relay.nn.relu(y), "NCHW8c", "NCHW")
    return tvm.IRModule.from_expr(relay.Function([x], y))


def _fused(mod: tvm.IRModule) -> relay.Function:
    with tvm.transform.PassContext(opt_level=3):
        return relay.transform.FuseOps(fuse_opt_level=2)(relay.transform.InferType()(mod))["main"]


def test_a_fused_graph_places_each_transform():
    kernels = kernels_of_function(_fused(_blocked_convs()))
    assert [k.is_conv for k in kernels].count(True) == 2
    count = count_layout_transforms(kernels)
    assert (count.between_convs, count.at_input, count.at_output) == (1, 1, 1)
    assert PlacedTransform("fused_layout_transform", BETWEEN_CONVS, 1) in count.tasks
    assert count.line().startswith("layout_transform: 1 between convs (fused_layout_transform)")
    assert count.to_dict()["between_convs"] == 1


def test_a_build_graph_gives_the_same_count():
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(_blocked_convs(), target="llvm")
    count = layout_transforms_of_graph_json(lib.get_graph_json())
    assert (count.between_convs, count.at_input, count.at_output) == (1, 1, 1)


def test_a_transform_on_a_branch_between_convs_counts_each_run():
    # conv -> add(conv, transform(conv)) -> conv, and the same transform task run twice
    kernels = [Kernel("fused_conv2d", []), Kernel("fused_layout_transform", [0]),
               Kernel("fused_nn_pool", [0]), Kernel("fused_add", [1, 2]),
               Kernel("fused_layout_transform", [3]), Kernel("fused_conv2d_1", [4]),
               Kernel("fused_layout_transform_reshape", [5])]
    count = count_layout_transforms(kernels)
    assert (count.between_convs, count.at_input, count.at_output) == (2, 0, 1)
    assert count.tasks[0] == PlacedTransform("fused_layout_transform", BETWEEN_CONVS, 2)
    assert "fused_layout_transform x2" in count.line()


def test_ops_decide_over_names():
    kernels = [Kernel("fused_x", [], ["layout_transform"]), Kernel("fused_y", [0], ["nn.conv2d"]),
               Kernel("fused_conv2d_name_only", [1], ["layout_transform", "reshape"])]
    count = count_layout_transforms(kernels)
    assert [(t.task, t.where) for t in count.tasks] == [("fused_x", AT_INPUT), ("fused_conv2d_name_only", AT_OUTPUT)]


def test_kernels_out_of_order_are_refused():
    with pytest.raises(ValueError, match="topological order"):
        count_layout_transforms([Kernel("a", [1]), Kernel("b", [])])


def test_the_fusion_report_shows_the_count():
    count = count_layout_transforms(kernels_of_function(_fused(_blocked_convs())))
    report = FusionReport("llvm", ["ours"], [], count)
    assert layout_line(report) == count.line()
    assert count.line() in fusion_markdown(report, "t")
    assert report.to_dict()["layout_transforms"]["at_input"] == 1
    assert layout_line(FusionReport("llvm", ["ours"], [])) is None
