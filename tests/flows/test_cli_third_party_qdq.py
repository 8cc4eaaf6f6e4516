"""An EfficientNet-B0 written as a third party writes it (depthwise convs, swish as
x*sigmoid(x), squeeze-excitation, batch norms as modules of their own), exported to ONNX and
quantized QDQ by ONNX Runtime's quantize_static (per-channel int8 weights, uint8 activations,
calibrated on random data), through ``quantfuse fusion`` on the A100 and a small ``tune`` on this
host (AVX2), within 3 output steps of ONNX Runtime."""

import json
import re

import pytest

from conftest import A100, AVX2, needs_c_compiler, needs_avx2_host
from helpers import small_search
from quantized_test_nets import SwishEfficientNet, qdq_onnx, worst_steps
from relay_ext import cli
from relay_ext.cli import commands as cli_commands

SHAPE = (1, 3, 32, 32)
CALIBRATION_SEEDS = [0, 1]  # the weights and random calibration batches of qdq_onnx


@pytest.fixture(scope="module")
def qdq_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("third_party_qdq")
    return {seed: qdq_onnx(SwishEfficientNet, SHAPE, root / f"efficientnet_swish_{seed}.onnx", seed=seed)
            for seed in CALIBRATION_SEEDS}


@pytest.mark.parametrize("seed", CALIBRATION_SEEDS)
def test_fusion_on_the_a100_measures_every_task(seed, qdq_files, capsys):
    assert cli.main(["fusion", "--model", str(qdq_files[seed]), "--target", A100,
                     "--variants", "ours", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    failed = {t["name"]: t["variants"]["ours"]["failed"] for t in report["tasks"]
              if t["variants"]["ours"]["failed"]}
    assert report["totals"]["ours"]["tasks_failed"] == len(failed) == 0, failed
    names = [t["name"] for t in report["tasks"]]
    # swish and the SE gate became integer: ONNX Runtime's QDQ sigmoid is TVM's table lookup (take)
    assert any("take" in name for name in names), names
    assert sum("conv2d" in name for name in names) >= 5, names  # stem, depthwise, SE, project, head
    assert report["totals"]["ours"]["tasks_with_intermediates"] == 0, report["totals"]


@needs_avx2_host
@needs_c_compiler
def test_a_small_tune_on_the_host_matches_onnx_runtime(qdq_files, tmp_path, capsys, monkeypatch):
    import relay_ext

    model_args = ["--model", str(qdq_files[0]), "--target", AVX2]
    monkeypatch.setattr(cli_commands, "search_strategy", small_search)
    work_dir = tmp_path / "work"
    assert cli.main(["tune", *model_args, "--work-dir", str(work_dir), "--trials", "4",
                     "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"4 records in .*tasks have a valid measurement", out), out

    loaded = relay_ext.load_model(qdq_files[0])
    lib = relay_ext.compile(loaded, target=AVX2, records=work_dir, choose_per_task=False).lib
    assert worst_steps(loaded, lib) <= 3 + 1e-3
