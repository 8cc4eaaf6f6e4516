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
from conftest import AVX2, needs_c_compiler, needs_avx2_host
from helpers import fusion_tune_and_bench, one_error_line

SHAPE = (1, 3, 16, 16)


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


@needs_avx2_host
@needs_c_compiler
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


@needs_avx2_host
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
    # + 1: on AVX2 the classifier runs as a 1x1 int16 conv (relay_ext/lowering/x86/int16_pair_conv.py)
    assert sum(anchor.endswith("conv2d_NCHWc") or "Depthwise" in anchor or "int8" in anchor
               for anchor, _ in rows[0]) == MobileNetV2Style.CONVS + 1, rows[0]


# --- bad input ----------------------------------------------------------------------------------


class _WithCumsum(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(self.conv(x), dim=1)


def test_unsupported_op_is_one_line(tmp_path, capsys):
    path = tmp_path / "cumsum.pt2"
    torch.export.save(pt2e_program(_WithCumsum, (1, 3, 8, 8)), str(path))
    assert cli.main(["fusion", "--model", str(path), "--target", AVX2]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "aten.cumsum", "graph node 'cumsum'")


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


def test_unsupported_arguments_are_one_line_naming_the_op_and_node(tmp_path, capsys):
    program = pt2e_program(_WithCumsum, (1, 3, 8, 8))
    graph = program.graph_module.graph
    cumsum = next(node for node in graph.nodes if pt2e_import.op_name(node.target) == "aten.cumsum")
    cumsum.target = torch.ops.aten.dropout.default  # dropout(x, p, train=True): not an inference program
    cumsum.args = (cumsum.args[0], 0.5, True)
    program.graph_module.recompile()
    with pytest.raises(pt2e_import.UnsupportedOperator, match=r"aten.dropout \(graph node 'cumsum'\): dropout in training"):
        models.from_exported_program(program)


def test_a_converter_bug_is_not_said_as_bad_input(programs, program_files, monkeypatch, capsys):
    from relay_ext.frontend import pt2e_ops

    def broken(converter, node):
        raise KeyError("a converter's own mistake")

    monkeypatch.setitem(pt2e_ops.CONVERTERS, "aten.linear", broken)
    with pytest.raises(pt2e_import.ConverterError, match=r"failed on aten.linear \(graph node 'linear'\): KeyError"):
        models.from_exported_program(programs["residual"])
    assert not issubclass(pt2e_import.ConverterError, ValueError)  # the CLI's bad input is ValueError
    code = cli.main(["fusion", "--model", str(program_files["residual"]), "--target", AVX2])
    assert code == cli.EXIT_FAILED, code  # quantfuse's failure, not exit 2 ("unsupported operator")
    err = capsys.readouterr().err
    assert "aten.linear" in err and "not supported" not in err, err
