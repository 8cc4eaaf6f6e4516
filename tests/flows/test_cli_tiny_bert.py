"""The built-in ``tiny_bert`` encoder (quantized QDQ by ONNX Runtime from its ONNX export) through
``quantfuse fusion`` on the A100, a short ``tune`` and ``bench`` on this host against the peers."""

import json

import pytest

from conftest import A100, AVX2, needs_c_compiler, needs_avx2_host
from helpers import fusion_tune_and_bench
from relay_ext import cli
from relay_ext.frontend.onnx_reference import OnnxRuntimeReference

pytest.importorskip("onnxruntime")
MODEL = ["--model", "tiny_bert"]
# One step: the adds of dequantized tensors round once, as ONNX Runtime's (docs/known-tvm-issues.md)
MAX_STEPS = 1
SOFTMAX_REDUCTIONS = {"T_softmax_maxelem", "T_softmax_expsum"}


@pytest.mark.slow
def test_fusion_on_the_a100_leaves_only_softmax_reductions(capsys):
    assert cli.main(["fusion", *MODEL, "--target", A100, "--variants", "ours", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    failed = {t["name"]: t["variants"]["ours"]["failed"] for t in report["tasks"] if t["variants"]["ours"]["failed"]}
    assert report["totals"]["ours"]["tasks_failed"] == len(failed) == 0, failed
    names = [t["name"] for t in report["tasks"]]
    assert any("dense" in name for name in names) and any("batch_matmul" in name for name in names), names
    # the only global buffers left are softmax's own reductions (row max, sum of exponentials),
    # which a fused epilogue cannot remove
    left = {t["name"]: set(t["variants"]["ours"]["buffers"]) for t in report["tasks"]
            if t["variants"]["ours"]["intermediates"]}
    assert all("softmax" in name and buffers <= SOFTMAX_REDUCTIONS for name, buffers in left.items()), left


@pytest.mark.slow
@needs_avx2_host
@needs_c_compiler
def test_tune_and_bench_against_the_peers(tmp_path, capsys, monkeypatch):
    fusion_tune_and_bench([*MODEL, "--target", AVX2], "ONNX Runtime int8", tmp_path / "work", capsys,
                          monkeypatch, max_steps=MAX_STEPS, compared_with=OnnxRuntimeReference.name,
                          fusion=False)
