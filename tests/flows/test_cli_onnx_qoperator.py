"""QOperator ONNX files (ONNX Runtime's quantize_static with QuantFormat.QOperator: QLinearConv,
depthwise included, QLinearAdd, QLinearGlobalAveragePool, QGemm) through the command line:
``fusion`` on the A100 is clean (no failed task, no global intermediate under quantfuse's rules)
and ``bench`` checks TVM within a step of the file's meaning, beside ONNX Runtime on the file as
given and OpenVINO on its QDQ equivalent."""

import json
import re

import pytest

from conftest import A100, AVX2, needs_c_compiler, needs_avx2_host
from quantized_test_nets import MobileNetV2Style, ResidualConvNet, _calibration
from relay_ext import cli
from relay_ext.frontend import eager_quantization, onnx_export
from relay_ext.frontend.onnx_reference import OnnxRuntimeReference

pytestmark = pytest.mark.slow
SHAPE = (1, 3, 32, 32)


@pytest.fixture(scope="module")
def qoperator_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("qoperator_files")
    files = {}
    for name, build in (("resnet_like", ResidualConvNet), ("mobilenet_like", MobileNetV2Style)):
        model = eager_quantization.seeded_float_model(build, 0)
        calibration = _calibration(SHAPE, 1)
        float_path = onnx_export.export_float_onnx(model, calibration[0], root / f"{name}.float.onnx")
        files[name] = onnx_export.quantize_qdq(float_path, root / f"{name}.onnx", calibration,
                                               quant_format=onnx_export.QOPERATOR, reduce_range=True)
    return files


@pytest.mark.parametrize("name", ["resnet_like", "mobilenet_like"])
def test_fusion_on_the_a100_is_clean(name, qoperator_files, capsys):
    assert cli.main(["fusion", "--model", str(qoperator_files[name]), "--target", A100,
                     "--variants", "ours", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    totals = report["totals"]["ours"]
    assert totals["tasks_failed"] == 0 and totals["tasks_with_intermediates"] == 0, totals
    assert sum("conv2d" in task["name"] for task in report["tasks"]) >= 3


@needs_avx2_host
@needs_c_compiler
def test_bench_on_a_qoperator_file(qoperator_files, capsys):
    assert cli.main(["bench", "--model", str(qoperator_files["resnet_like"]), "--target", AVX2,
                     "--repeats", "2", "--number", "2", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    reference = re.escape(OnnxRuntimeReference.QOPERATOR_NAME)
    steps = re.search(rf"TVM no-search vs {reference}: max ([\d.]+) output", out)
    assert steps and float(steps.group(1)) <= 1, out
    ort = re.search(rf"ONNX Runtime int8 vs {reference}: max ([\d.]+) output", out)
    assert ort and float(ort.group(1)) <= 1, out  # 7-bit weights: its kernels do not saturate
    assert re.search(r"^ONNX Runtime int8\s+[\d.]+", out, re.M), out
