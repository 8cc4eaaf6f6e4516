"""The models users bring, through the command line: QDQ ONNX files (a residual conv net, an MLP)
and an FX-quantized TorchScript file (EfficientNet-style: unfused batch norms, depthwise conv,
hardswish, squeeze-excitation) each go through ``fusion``, a short ``tune`` and ``bench``, within
3 output quantization steps of their own runtime; bad ONNX input is one line and exit code 2."""

import re
import sys

import numpy as np
import pytest

from quantized_test_nets import (ResidualConvNet, SmallMLP, fx_quantized_torchscript, qdq_onnx,
                                 worst_steps)
from relay_ext import cli
from relay_ext.cli import commands as cli_commands
from relay_ext.cli.inputs import load_model
from relay_ext.cli.parser import build_parser
from relay_ext.frontend import onnx_export
from relay_ext.lowering import targets
from relay_ext.tuning import compile_model
from relay_ext.tuning.work_dir import CHART_FILE, REPORT_FILE, open_tuned_database
from conftest import AVX2
from helpers import one_error_line, small_search

MAX_STEPS = 3
TOLERANCE = 1e-3  # whole steps, up to float rounding
TRIALS = 4

pytestmark = pytest.mark.skipif(bool(targets.missing_features(AVX2)),
                                reason=f"runs code built for {AVX2}, which this host cannot")


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    """name -> (file, the --input-shape it needs or None, the reference runtime's table row)."""
    root = tmp_path_factory.mktemp("model_files")
    fx_module, fx_shape = fx_quantized_torchscript(16)
    fx_module.save(str(root / "efficientnet_style.pt"))
    return {
        "residual_qdq": (qdq_onnx(ResidualConvNet, (1, 3, 16, 16), root / "residual.onnx"), None,
                         "ONNX Runtime int8"),
        "mlp_qdq": (qdq_onnx(SmallMLP, (1, 64), root / "mlp.onnx"), None, "ONNX Runtime int8"),
        "fx_efficientnet": (root / "efficientnet_style.pt", ",".join(map(str, fx_shape)),
                            "PyTorch int8"),
    }


@pytest.mark.parametrize("name", ["residual_qdq", "mlp_qdq", "fx_efficientnet"])
def test_fusion_tune_and_bench(name, model_files, tmp_path, capsys, monkeypatch):
    path, shape, reference = model_files[name]
    model = ["--model", str(path), *(["--input-shape", shape] if shape else []), "--target", AVX2]
    work_dir = tmp_path / "work"

    assert cli.main(["fusion", *model, "--variants", "ours"]) == 0
    assert re.search(r"TOTAL\s+\d+ tasks", capsys.readouterr().out)

    monkeypatch.setattr(cli_commands, "search_strategy", small_search)
    assert cli.main(["tune", *model, "--work-dir", str(work_dir), "--trials", str(TRIALS),
                     "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"{TRIALS} records in .*tasks have a valid measurement", out), out

    assert cli.main(["bench", *model, "--work-dir", str(work_dir), "--repeats", "2",
                     "--number", "2", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^{reference}\s+[\d.]+", out, re.M), out  # the reference's own row
    steps = float(re.search(rf"TVM tuned vs {reference}: max ([\d.]+) output quantization", out)[1])
    assert steps <= MAX_STEPS + TOLERANCE, out
    assert f"| {reference} |" in (work_dir / REPORT_FILE).read_text()
    assert (work_dir / CHART_FILE).stat().st_size > 1000

    # The tuned build agrees with the reference on more inputs than bench's one.
    loaded = load_model(build_parser().parse_args(["fusion", *model]))
    lib = compile_model(open_tuned_database(work_dir), loaded.mod, loaded.params, AVX2)
    assert worst_steps(loaded, lib) <= MAX_STEPS + TOLERANCE


def test_bench_of_a_built_in_model_times_an_onnx_runtime_export_too(tiny_tuned, capsys):
    from conftest import TINY_32

    work_dir, _ = tiny_tuned
    assert cli.main(["bench", *TINY_32, "--target", AVX2, "--work-dir", str(work_dir),
                     "--repeats", "2", "--number", "2", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^ONNX Runtime int8\s+[\d.]+", out, re.M), out
    assert "TVM tuned vs PyTorch int8" in out  # steps are counted against PyTorch, its source
    report = (work_dir / REPORT_FILE).read_text()
    assert "| ONNX Runtime int8 |" in report and "not compared in steps" in report
    assert (work_dir / "tiny_resnet_32_qdq.onnx").exists()


# --- bad input ----------------------------------------------------------------------------------


def test_missing_onnxruntime_is_one_line(model_files, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # "import onnxruntime" fails
    path = model_files["mlp_qdq"][0]
    assert cli.main(["fusion", "--model", str(path), "--target", AVX2]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "onnxruntime", "pip install 'quantfuse[onnx]'")


def test_float_onnx_model_is_one_line(tmp_path, capsys):
    path = onnx_export.export_float_onnx(SmallMLP().eval(), np.zeros((1, 64), np.float32),
                                         tmp_path / "float.onnx")
    assert cli.main(["fusion", "--model", str(path), "--target", AVX2]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "float ONNX model", "quantize_static")


def test_dynamic_onnx_input_needs_input_shape(model_files, tmp_path, capsys):
    import onnx

    model = onnx.load(str(model_files["residual_qdq"][0]))
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "dynamic.onnx"
    onnx.save(model, str(path))
    assert cli.main(["fusion", "--model", str(path), "--target", AVX2]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "dynamic", "--input-shape")
    assert cli.main(["fusion", "--model", str(path), "--input-shape", "1,3,16,16",
                     "--target", AVX2, "--variants", "ours", "--json"]) == 0
