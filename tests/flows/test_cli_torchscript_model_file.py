"""A TorchScript model a user brings, through the command line: an FX-quantized EfficientNet-style
net (unfused batch norms, depthwise conv, hardswish, squeeze-excitation) goes through ``fusion``, a
short ``tune`` and ``bench``, within 3 output quantization steps of PyTorch. (The ONNX files:
test_cli_onnx_model_files.py.)"""

import pytest

from quantized_test_nets import fx_quantized_torchscript
from conftest import AVX2, needs_c_compiler, needs_avx2_host
from helpers import fusion_tune_and_bench


@needs_avx2_host
@needs_c_compiler
def test_fx_quantized_file_through_fusion_tune_and_bench(tmp_path, capsys, monkeypatch):
    module, shape = fx_quantized_torchscript(16)
    path = tmp_path / "efficientnet_style.pt"
    module.save(str(path))
    fusion_tune_and_bench(["--model", str(path), "--input-shape", ",".join(map(str, shape)),
                           "--target", AVX2], "PyTorch int8", tmp_path / "work", capsys,
                          monkeypatch)
