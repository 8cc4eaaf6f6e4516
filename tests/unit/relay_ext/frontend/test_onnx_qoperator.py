"""relay_ext.frontend.onnx_qoperator: ONNX files quantized in QOperator format (QLinearConv,
QLinearAdd, QGemm, ...) rewritten as their QDQ equivalent, imported as integer QNN and built within
a step of ONNX Runtime running the file as given.

The files are quantized with 7-bit weights (reduce_range) so that ONNX Runtime's own QLinear
kernels do not saturate on CPUs without VNNI: then they are a reference to the step on any CPU."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from quantized_test_nets import ResidualConvNet, _calibration, qdq_onnx, worst_steps
import relay_ext
from relay_ext.frontend import eager_quantization, onnx_export, onnx_import, onnx_qoperator
from relay_ext.frontend.onnx_reference import OnnxRuntimeReference, onnxruntime_session
from relay_ext.report.accuracy import step_error
from conftest import AVX2

IMAGE_SHAPE = (1, 3, 16, 16)
TOKENS_SHAPE = (1, 8, 16)
TOLERANCE = 1e-3


class SqueezeExciteMobileNet(nn.Module):
    """MobileNetV3's pieces: stem conv-bn-relu6 (stride 2), depthwise conv-bn-relu,
    squeeze-excitation (pool, 1x1 conv, relu, 1x1 conv, sigmoid, mul), 1x1 projection with the
    residual add, head conv with swish as x * sigmoid(x), global pool, linear."""

    def __init__(self, channels: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU6())
        self.depthwise = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False),
                                       nn.BatchNorm2d(channels), nn.ReLU())
        self.squeeze = nn.Conv2d(channels, channels // 2, 1)
        self.excite = nn.Conv2d(channels // 2, channels, 1)
        self.project = nn.Sequential(nn.Conv2d(channels, channels, 1, bias=False), nn.BatchNorm2d(channels))
        self.head = nn.Conv2d(channels, 2 * channels, 1)
        self.classifier = nn.Linear(2 * channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.depthwise(x)
        gate = torch.sigmoid(self.excite(torch.relu(self.squeeze(F.adaptive_avg_pool2d(y, 1)))))
        x = x + self.project(y * gate)
        x = self.head(x)
        x = x * torch.sigmoid(x)
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class MatMulNet(nn.Module):
    """Token features times a weight matrix (MatMul with a constant), ReLU, then the tokens'
    scores against each other (MatMul of two activations)."""

    def __init__(self, features: int = 16, hidden: int = 32) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features, hidden) / features ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(torch.matmul(x, self.weight))
        return torch.matmul(h, h.transpose(1, 2))


class ConcatPoolNet(nn.Module):
    """Two conv branches (one with leaky ReLU) concatenated, average-pooled, linear, softmax:
    QLinearLeakyRelu, QLinearConcat, QLinearAveragePool and QLinearSoftmax."""

    def __init__(self, channels: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.left = nn.Conv2d(3, channels, 3, padding=1)
        self.right = nn.Conv2d(3, channels, 1)
        self.fc = nn.Linear(2 * channels * 4 * 4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.cat([F.leaky_relu(self.left(x), 0.1), self.right(x)], 1)
        return torch.softmax(self.fc(torch.flatten(F.avg_pool2d(x, 4), 1)), -1)


NETS = {"resnet_like": (ResidualConvNet, IMAGE_SHAPE), "mobilenet_like": (SqueezeExciteMobileNet, IMAGE_SHAPE),
        "matmul": (MatMulNet, TOKENS_SHAPE), "concat_pool": (ConcatPoolNet, IMAGE_SHAPE)}


def qoperator_onnx(build, shape, path, seed: int = 0):
    """``build()`` (seeded weights) exported to ONNX and quantized by ONNX Runtime in QOperator
    format, 7-bit weights, calibrated on random batches of ``shape``."""
    model = eager_quantization.seeded_float_model(build, seed)
    calibration = _calibration(shape, seed + 1)
    float_path = onnx_export.export_float_onnx(model, calibration[0], path.with_suffix(".float.onnx"))
    return onnx_export.quantize_qdq(float_path, path, calibration, quant_format=onnx_export.QOPERATOR,
                                    reduce_range=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("qoperator")
    return {name: qoperator_onnx(build, shape, root / f"{name}.onnx") for name, (build, shape) in NETS.items()}


def _inputs(shape, count: int = 4):
    return [np.random.default_rng(seed).standard_normal(shape, dtype=np.float32) for seed in range(count)]


# --- the rewrite --------------------------------------------------------------------------------


def test_the_files_are_qoperator(files):
    ops = {name: onnx_qoperator.qoperator_ops(onnx.load(path)) for name, path in files.items()}
    assert {"QLinearConv", "QLinearAdd", "QLinearGlobalAveragePool", "QGemm"} <= set(ops["resnet_like"])
    assert {"QLinearConv", "QLinearMul", "QLinearSigmoid", "QLinearAdd"} <= set(ops["mobilenet_like"])
    assert set(ops["matmul"]) == {"QLinearMatMul"}
    assert {"QLinearLeakyRelu", "QLinearConcat", "QLinearAveragePool", "QLinearSoftmax"} <= set(ops["concat_pool"])


@pytest.mark.parametrize("name", list(NETS))
def test_rewritten_graph_has_the_qdq_structure(files, name):
    """Every float op the rewrite makes reads DequantizeLinear outputs and feeds a QuantizeLinear,
    one per QOperator node; none is left, nor the com.microsoft domain."""
    model = onnx.load(files[name])
    counts = onnx_qoperator.qoperator_ops(model)
    rewritten = onnx_qoperator.to_qdq(model)
    onnx.checker.check_model(rewritten)
    assert not onnx_qoperator.is_qoperator(rewritten) and onnx_qoperator.is_qoperator(model)
    assert onnx_qoperator.MICROSOFT not in {entry.domain for entry in rewritten.opset_import}
    producers = {output: node for node in rewritten.graph.node for output in node.output}
    consumers: dict[str, list] = {}
    for node in rewritten.graph.node:
        for value in node.input:
            consumers.setdefault(value, []).append(node)
    float_ops = {"QLinearConv": "Conv", "QLinearMatMul": "MatMul", "QGemm": "Gemm", "QLinearAdd": "Add",
                 "QLinearMul": "Mul", "QLinearGlobalAveragePool": "GlobalAveragePool", "QLinearSigmoid": "Sigmoid",
                 "QLinearLeakyRelu": "LeakyRelu", "QLinearConcat": "Concat", "QLinearAveragePool": "AveragePool",
                 "QLinearSoftmax": "Softmax"}
    for qop, count in counts.items():
        made = [node for node in rewritten.graph.node if node.op_type == float_ops[qop] and node.name.endswith("_float")]
        assert len(made) == count, (qop, made)
        for node in made:
            assert all(producers[value].op_type == "DequantizeLinear" for value in node.input if value), node
            assert [c.op_type for c in consumers[node.output[0]]] == ["QuantizeLinear"], node
    # the input is untouched
    assert onnx_qoperator.qoperator_ops(model) == counts


@pytest.mark.parametrize("name", list(NETS))
def test_rewrite_computes_what_onnxruntime_qlinear_kernels_compute(files, name):
    """ONNX Runtime's QLinear kernels on the file (QLinearAdd's and the average pools' rounding,
    QLinearSigmoid's table, QLinearSoftmax ...) against the QDQ equivalent evaluated as written."""
    path = files[name]
    rewritten = onnxruntime_session(onnx_qoperator.to_qdq(onnx.load(path)).SerializeToString(), optimized=False)
    as_given = onnxruntime_session(path)
    shape = NETS[name][1]
    for data in _inputs(shape):
        expected = rewritten.run(None, {"input": data})[0]
        np.testing.assert_array_equal(as_given.run(None, {"input": data})[0], expected)


def test_unknown_microsoft_op_is_one_clear_error(files):
    model = onnx.load(files["resnet_like"])
    node = next(node for node in model.graph.node if node.op_type == "QLinearGlobalAveragePool")
    node.op_type = "QLinearReduceMean"
    with pytest.raises(ValueError, match=r"QOperator op QLinearReduceMean \(com.microsoft\) is not supported; "
                                         r"quantize the float model in QDQ format") as raised:
        onnx_qoperator.to_qdq(model)
    assert "\n" not in str(raised.value)


# --- the import ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loaded(files):
    return {name: relay_ext.load_model(path) for name, path in files.items()}


@pytest.mark.parametrize("name", list(NETS))
def test_import_is_integer_with_the_rewritten_reference(loaded, files, name):
    model = loaded[name]
    counts = onnx_import.op_counts(model.mod)
    assert not any(counts.get(op) for op in onnx_import.FLOAT_COMPUTE_OPS), counts
    qops = onnx_qoperator.qoperator_ops(onnx.load(files[name]))
    assert counts.get("qnn.conv2d", 0) == qops.get("QLinearConv", 0), counts
    assert counts.get("qnn.dense", 0) + counts.get("qnn.batch_matmul", 0) == (
        qops.get("QGemm", 0) + qops.get("QLinearMatMul", 0)), counts
    assert model.reference_name == OnnxRuntimeReference.QOPERATOR_NAME == model.reference.name
    assert model.reference.path == str(files[name]) and model.reference.graph is not None
    assert model.output_scale is not None and model.output_scale > 0


def test_import_equals_that_of_the_qdq_export_of_the_same_network(tmp_path):
    """ONNX Runtime's QDQ export of the same network, same calibration: the same Relay module."""
    import tvm

    qdq = relay_ext.load_model(qdq_onnx(ResidualConvNet, IMAGE_SHAPE, tmp_path / "residual_qdq.onnx"))
    qoperator = relay_ext.load_model(_eight_bit(tmp_path))
    assert tvm.ir.structural_equal(qdq.mod["main"], qoperator.mod["main"], map_free_vars=True)
    assert qdq.reference_name == OnnxRuntimeReference.name


def _eight_bit(tmp_path):
    """ResidualConvNet in QOperator format with the QDQ export's 8-bit weights."""
    model = eager_quantization.seeded_float_model(ResidualConvNet, 0)
    calibration = _calibration(IMAGE_SHAPE, 1)
    float_path = onnx_export.export_float_onnx(model, calibration[0], tmp_path / "residual_qop.float.onnx")
    return onnx_export.quantize_qdq(float_path, tmp_path / "residual_qop.onnx", calibration,
                                    quant_format=onnx_export.QOPERATOR)


@pytest.mark.parametrize("name", ["resnet_like", "mobilenet_like", "matmul"])
def test_untuned_build_is_within_a_step_of_onnxruntime_on_the_file(loaded, files, name):
    model = loaded[name]
    lib = relay_ext.compile(model, target=AVX2, schedule="default", opt_level=3)
    assert worst_steps(model, lib) <= 1 + TOLERANCE
    from relay_ext.measure.run import run_module

    as_given = onnxruntime_session(files[name])
    for data in _inputs(model.input_shape, 3):
        steps = step_error(run_module(lib, {model.input_name: data})[0], as_given.run(None, {"input": data})[0],
                           model.output_scale).max_steps
        assert steps <= 1 + TOLERANCE
