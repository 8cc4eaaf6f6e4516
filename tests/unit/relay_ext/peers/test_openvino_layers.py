"""OpenVINO's per-layer counters (relay_ext/peers/openvino_layers.py) and how
benchmarks/where_time_goes.py (benchmarks/layer_timing.py) matches its conv nodes to TVM's conv
tasks, on tiny_resnet at 32."""

import collections

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("openvino", reason="OpenVINO's per-layer table needs openvino: pip install 'quantfuse[peers]'")
pytest.importorskip("onnxruntime.quantization", reason="the QDQ export needs onnxruntime: pip install 'quantfuse[onnx]'")

from benchmarks.layer_table import match, table  # noqa: E402
from benchmarks.layer_timing import conv_signature, openvino_rows  # noqa: E402
import relay_ext  # noqa: E402
from relay_ext.frontend import models  # noqa: E402
from relay_ext.frontend.eager_quantization import seeded_float_model  # noqa: E402
from relay_ext.frontend.onnx_export import export_quantized  # noqa: E402
from relay_ext.peers.openvino_layers import (ConvShape, onednn_conv_kernels,  # noqa: E402
                                                openvino_layers)
from relay_ext.lowering.targets import normalize_target  # noqa: E402
from relay_ext.lowering.tasks import lowered_tasks

MODEL, SIZE = "tiny_resnet", 32


@pytest.fixture(scope="module")
def qdq_path(tmp_path_factory):
    return export_quantized(MODEL, tmp_path_factory.mktemp("ov") / "tiny_qdq.onnx", image_size=SIZE)


@pytest.fixture(scope="module")
def profile(qdq_path):
    example = np.random.default_rng(0).standard_normal((1, 3, SIZE, SIZE)).astype(np.float32)
    return openvino_layers(qdq_path, example, threads=1, rounds=3, timing_rounds=2, number=2)


def torch_conv_shapes():
    """The float network's convolutions, as ConvShape, read from a forward pass."""
    spec = models._model_spec(MODEL)  # pylint: disable=protected-access
    net = seeded_float_model(spec.build, models.DEFAULT_SEED).eval()
    shapes = []

    def hook(mod, args, output):
        shapes.append(ConvShape(mod.in_channels, mod.out_channels, mod.groups, mod.kernel_size[0],
                                mod.stride[0], int(output.shape[2]), int(output.shape[3])))

    for mod in net.modules():
        if isinstance(mod, nn.Conv2d):
            mod.register_forward_hook(hook)
    with torch.no_grad():
        net(torch.zeros(spec.input_shape(1, SIZE)))
    return shapes


def test_openvino_conv_nodes_have_the_models_conv_shapes_and_positive_times(profile):
    convs = profile.convs()
    assert collections.Counter(layer.conv for layer in convs) == collections.Counter(torch_conv_shapes())
    assert all(layer.ms > 0 for layer in convs), [(layer.name, layer.ms) for layer in convs]
    assert all(layer.exec_type for layer in convs)
    # the residual add is fused into exactly one conv node (tiny_resnet has one shortcut)
    assert sum(layer.residual_add for layer in convs) == 1
    assert profile.model_ms > 0 and profile.others(), profile.layers


def test_every_tvm_conv_task_is_paired_with_an_openvino_node(profile):
    """On every host class TVM's convs have the network's channels, padded (also the int16 convs
    of a host without VNNI), and so do the OpenVINO nodes' signatures."""
    loaded = relay_ext.load_model(MODEL, image_size=SIZE)
    target = normalize_target("host")
    tasks = lowered_tasks(loaded.mod, loaded.params, target, "ours")
    tvm_rows = [{"task": t.task_name, "calls": int(t.weight), "signature": conv_signature(t),
                 "used_ms": 1.0, "default_ms": 1.0} for t in tasks]
    conv_tasks = [r for r in tvm_rows if r["signature"] is not None]
    assert conv_tasks
    rows = openvino_rows(profile)
    grouped = match(tvm_rows, rows)
    for task in conv_tasks:
        assert grouped.get(task["signature"]), f"{task['task']} {task['signature']}: no OpenVINO node"
    assert not [r for r in grouped.get(None, []) if r["signature"] is not None], \
        "an OpenVINO conv matched no TVM task"
    # as many OpenVINO conv nodes per shape as the model calls TVM's tasks of that shape
    calls = collections.Counter()
    for task in conv_tasks:
        calls[task["signature"]] += task["calls"]
    assert {sig: len(grouped[sig]) for sig in calls} == dict(calls)
    header, lines = table(tvm_rows, 1.0, [{"name": "OpenVINO", "rows": rows, "total": profile.model_ms}])
    assert "OpenVINO ms" in header and lines[-1][0].startswith("whole model")


def test_onednn_names_the_implementation_of_every_conv(qdq_path, profile):
    kernels = onednn_conv_kernels(qdq_path, threads=1)
    # one primitive per distinct conv (OpenVINO may share one between nodes of the same shape
    # and post-ops; tiny_resnet's three differ: the stem's input channels, conv2's residual add)
    distinct = {(layer.conv, layer.residual_add) for layer in profile.convs()}
    assert len(distinct) == 3 and sum(kernels.values()) >= len(distinct), kernels
    assert all(":" in name for name in kernels), kernels  # "brg_conv_fwd:avx512_core_vnni"
