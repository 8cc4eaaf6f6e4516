"""PyTorch 2 quantized programs (torch.export + torchao PT2E, saved as .pt2) through the command
line: a MobileNetV2-style net and a residual net go through ``fusion``, a short ``tune`` and
``bench``, within 3 output quantization steps of PyTorch running the program; the MobileNetV2-style
net's fusion report has the tasks of its TorchScript (FX-quantized) import; bad input (an op the
import lacks, a float program, no torchao) is one line and exit code 2."""

import sys

import pytest
import torch
from torch import nn

pytest.importorskip("torchao", reason="the PT2E path needs torchao: pip install 'quantfuse[pt2e]'")

from quantized_test_nets import MobileNetV2Style, ResidualConvNet, fx_quantized_torchscript, pt2e_program
from relay_ext import cli
from relay_ext.frontend import models, pt2e_import
from relay_ext.lowering import targets
from conftest import AVX2
from helpers import fusion_tune_and_bench, one_error_line

SHAPE = (1, 3, 16, 16)
needs_avx2 = pytest.mark.skipif(bool(targets.missing_features(AVX2)),
                                reason=f"runs code built for {AVX2}, which this host cannot")


@pytest.fixture(scope="module")
def programs():
    """name -> the PT2E-quantized ExportedProgram."""
    return {"mobilenet_v2_style": pt2e_program(MobileNetV2Style, SHAPE),
            "residual": pt2e_program(ResidualConvNet, SHAPE)}


@pytest.fixture(scope="module")
def program_files(programs, tmp_path_factory):
    """name -> the program saved with torch.export.save."""
    root = tmp_path_factory.mktemp("pt2e")
    files = {}
    for name, program in programs.items():
        files[name] = root / f"{name}.pt2"
        torch.export.save(program, str(files[name]))
    return files


def test_import_makes_convs_and_dense_integer(programs):
    loaded = models.from_exported_program(programs["mobilenet_v2_style"])
    counts = pt2e_import.op_counts(loaded.mod)
    assert counts.get("qnn.conv2d") == MobileNetV2Style.CONVS, counts
    assert counts.get("qnn.dense") == 1 and not counts.get("nn.conv2d") and not counts.get("nn.dense"), counts
    assert loaded.input_shape == SHAPE and loaded.output_scale and loaded.output_scale > 0
    assert loaded.reference_name == pt2e_import.REFERENCE_NAME


@needs_avx2
@pytest.mark.parametrize("name", ["mobilenet_v2_style", "residual"])
def test_fusion_tune_and_bench(name, program_files, tmp_path, capsys, monkeypatch):
    # bench's row of the program run eagerly is labelled so (PyTorch Inductor's row compiles it)
    fusion_tune_and_bench(["--model", str(program_files[name]), "--target", AVX2],
                          f"{pt2e_import.REFERENCE_NAME}, eager", tmp_path / "work", capsys,
                          monkeypatch, compared_with=pt2e_import.REFERENCE_NAME)


def _same_anchor(anchor: str) -> str:
    # The PT2E import pools to 1x1 with global_avg_pool2d (made integer, rounded); TVM's PyTorch
    # frontend with adaptive_avg_pool2d (rounded in float): the same pooling task.
    return "global_avg_pool2d" if anchor in ("nn.adaptive_avg_pool2d", "nn.global_avg_pool2d") else anchor


@needs_avx2
def test_fusion_report_matches_the_torchscript_import(programs, tmp_path):
    from relay_ext.report.fusion import fusion_report

    module, shape = fx_quantized_torchscript(SHAPE[-1], build=MobileNetV2Style)
    module.save(str(tmp_path / "mobilenet_v2_style.pt"))
    torchscript = models.from_torchscript(tmp_path / "mobilenet_v2_style.pt", {"input": shape})
    pt2e = models.from_exported_program(programs["mobilenet_v2_style"])
    reports = [fusion_report(loaded.mod, loaded.params, AVX2, ["ours"]) for loaded in (pt2e, torchscript)]
    rows = [[(_same_anchor(task.anchor), task.variants["ours"].intermediates) for task in report.tasks]
            for report in reports]
    assert rows[0] == rows[1]
    assert sum(anchor.endswith("conv2d_NCHWc") or "Depthwise" in anchor or "int8" in anchor
               for anchor, _ in rows[0]) == MobileNetV2Style.CONVS, rows[0]


# --- bad input ----------------------------------------------------------------------------------


class _WithGelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.conv(x))


def test_unsupported_op_is_one_line(tmp_path, capsys):
    path = tmp_path / "gelu.pt2"
    torch.export.save(pt2e_program(_WithGelu, (1, 3, 8, 8)), str(path))
    assert cli.main(["fusion", "--model", str(path), "--target", AVX2]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "aten.gelu", "graph node 'gelu'")


def test_float_program_is_one_line(tmp_path, capsys):
    path = tmp_path / "float.pt2"
    torch.export.save(torch.export.export(ResidualConvNet().eval(), (torch.zeros(SHAPE),)), str(path))
    assert cli.main(["fusion", "--model", str(path), "--target", AVX2]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "float program", "prepare_pt2e")


def test_missing_torchao_is_one_line(program_files, capsys, monkeypatch):
    for module in [name for name in sys.modules if name.split(".")[0] == "torchao"]:
        monkeypatch.setitem(sys.modules, module, None)  # "import torchao..." fails
    path = program_files["residual"]
    assert cli.main(["fusion", "--model", str(path), "--target", AVX2]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "torchao", "pip install 'quantfuse[pt2e]'")


def test_a_file_that_is_not_a_program_is_one_line(tmp_path, capsys):
    path = tmp_path / "text.pt2"
    path.write_text("not a program")
    assert cli.main(["fusion", "--model", str(path), "--target", AVX2]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "not a program saved with torch.export.save")


def test_input_shape_must_match_the_program(program_files, capsys):
    path = program_files["residual"]
    assert cli.main(["fusion", "--model", str(path), "--input-shape", "1,3,32,32",
                     "--target", AVX2]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "1,3,16,16")
