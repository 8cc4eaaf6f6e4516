"""quantfuse profile: the command's arguments, its JSON and chart on tiny_resnet at 16x16 (TVM's side
only: the OpenVINO column is tested with the library, tests/unit/relay_ext/latency/test_profile.py),
and bad input as one line before anything slow runs."""

import json

import pytest

from relay_ext import cli
from relay_ext.cli import commands
from relay_ext.cli.parser import build_parser

from conftest import AVX2
from helpers import cannot_run_here

TINY_16 = ["--model", "tiny_resnet", "--image-size", "16"]


def profile_command(argv):
    """``quantfuse profile ARGV``, in this process; its exit code."""
    return cli.main(["profile", *argv])


def test_profile_prints_json_and_writes_the_chart(tmp_path, capsys):
    if cannot_run_here(AVX2):
        pytest.skip(cannot_run_here(AVX2))
    png = tmp_path / "layers.png"
    assert profile_command([*TINY_16, "--target", AVX2, "--threads", "1", "--rounds", "2",
                            "--no-openvino", "--keep-slower-records", "--json",
                            "--png", str(png)]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)  # stdout is the JSON object alone
    assert result["model"] == "tiny_resnet" and result["input_shape"] == [1, 3, 16, 16]
    assert result["schedule"] == "no-search" and result["openvino"] is None
    assert result["openvino_note"] == "not asked for"
    rows = result["rows"]
    assert rows and all(row["ms"] > 0 and row["calls"] >= 1 for row in rows)
    assert any(row["name"].startswith("fused_nn_contrib_conv2d") for row in rows), rows
    assert sum(row["ms"] for row in rows) == pytest.approx(result["layers_ms"])
    assert result["chart"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {png}" in captured.err


@pytest.mark.parametrize("argv, words", [
    (["--target", "nvidia/nvidia-a100"], "must be llvm"),
    (["--target", AVX2, "--png", "chart.jpg"], "PNG"),
    (["--target", AVX2, "--png", "/no/such/dir/chart.png"], "cannot write --png"),
    (["--target", AVX2, "--rounds", "0"], "positive"),
])
def test_bad_input_is_one_line_before_the_model_loads(argv, words, monkeypatch, capsys):
    if cannot_run_here(AVX2):
        pytest.skip(cannot_run_here(AVX2))
    monkeypatch.setattr(commands, "load_model", lambda args: pytest.fail("the model was loaded"))
    assert profile_command([*TINY_16, *argv]) == 2
    error = capsys.readouterr().err
    assert error.startswith("quantfuse: error: ") and words in error and error.count("\n") == 1, error


def test_profile_is_in_the_usage_and_its_help():
    parser = build_parser()
    assert "quantfuse profile --model" in parser.description
    with pytest.raises(SystemExit):
        parser.parse_args(["profile", "--help"])
