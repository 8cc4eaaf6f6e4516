"""The ONNX models users bring, through the command line: QDQ files (a residual conv net, an MLP)
each go through ``fusion``, a short ``tune`` and ``bench``, within 3 output quantization steps of
ONNX Runtime; a built-in model's bench times an ONNX Runtime export too; bad ONNX input is one line
and exit code 2. (The FX-quantized TorchScript file: test_cli_torchscript_model_file.py.)"""

import re
import sys

import numpy as np
import pytest

from quantized_test_nets import ResidualConvNet, SmallMLP, qdq_onnx
from relay_ext import cli
from relay_ext.frontend import onnx_export
from relay_ext.frontend.onnx_reference import OnnxRuntimeReference
from relay_ext.workdir.files import REPORT_FILE
from conftest import AVX2, needs_c_compiler, needs_avx2_host
from helpers import fusion_tune_and_bench, one_error_line

pytestmark = needs_avx2_host


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    """name -> the QDQ ONNX file."""
    root = tmp_path_factory.mktemp("model_files")
    return {"residual_qdq": qdq_onnx(ResidualConvNet, (1, 3, 16, 16), root / "residual.onnx"),
            "mlp_qdq": qdq_onnx(SmallMLP, (1, 64), root / "mlp.onnx")}


@needs_c_compiler
@pytest.mark.parametrize("name", ["residual_qdq", "mlp_qdq"])
def test_fusion_tune_and_bench(name, model_files, tmp_path, capsys, monkeypatch):
    fusion_tune_and_bench(["--model", str(model_files[name]), "--target", AVX2],
                          "ONNX Runtime int8", tmp_path / "work", capsys, monkeypatch,
                          compared_with=OnnxRuntimeReference.name)
    # ONNX Runtime's own int8 run is compared with the same reference, in the output and the report
    out = (tmp_path / "work" / REPORT_FILE).read_text()
    assert re.search(rf"ONNX Runtime int8 vs {re.escape(OnnxRuntimeReference.name)}: max [\d.]+ output", out), out


def test_bench_of_a_built_in_model_times_an_onnx_runtime_export_too(tiny_tuned, capsys):
    from conftest import TINY_32

    work_dir, _ = tiny_tuned
    assert cli.main(["bench", *TINY_32, "--target", AVX2, "--work-dir", str(work_dir),
                     "--repeats", "2", "--number", "2", "--threads", "1",
                     "--keep-slower-records"]) == 0  # the rule is tested in test_cli_bench.py
    out = capsys.readouterr().out
    assert re.search(r"^ONNX Runtime int8\s+[\d.]+", out, re.M), out
    assert "TVM tuned vs PyTorch int8" in out  # steps are counted against PyTorch, its source
    report = (work_dir / REPORT_FILE).read_text()
    assert "| ONNX Runtime int8 |" in report and "not compared in steps" in report
    assert (work_dir / "tiny_resnet_32_qdq.onnx").exists()


# --- bad input ----------------------------------------------------------------------------------


def test_missing_onnxruntime_is_one_line(model_files, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # "import onnxruntime" fails
    path = model_files["mlp_qdq"]
    assert cli.main(["fusion", "--model", str(path), "--target", AVX2]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "onnxruntime", "pip install 'quantfuse[onnx]'")


def test_float_onnx_model_is_one_line(tmp_path, capsys):
    path = onnx_export.export_float_onnx(SmallMLP().eval(), np.zeros((1, 64), np.float32),
                                         tmp_path / "float.onnx")
    assert cli.main(["fusion", "--model", str(path), "--target", AVX2]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "float ONNX model", "quantize_static")


def test_dynamic_onnx_input_needs_input_shape(model_files, tmp_path, capsys):
    import onnx

    model = onnx.load(str(model_files["residual_qdq"]))
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "dynamic.onnx"
    onnx.save(model, str(path))
    assert cli.main(["fusion", "--model", str(path), "--target", AVX2]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "dynamic", "--input-shape")
    assert cli.main(["fusion", "--model", str(path), "--input-shape", "1,3,16,16",
                     "--target", AVX2, "--variants", "ours", "--json"]) == 0
