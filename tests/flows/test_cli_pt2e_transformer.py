"""An int8 transformer encoder as a PT2E program (the built-in float ``TinyBert`` quantized with
X86InductorQuantizer, ``torch.matmul`` included, saved with torch.export.save) through the command
line: ``fusion`` on the A100 with every linear and attention matmul integer and no global buffer
but softmax's own reductions, a short ``tune`` and ``bench`` on this host, within one output step of
PyTorch running the program."""

import json

import pytest
import torch

pytest.importorskip("torchao", reason="the PT2E path needs torchao: pip install 'quantfuse[pt2e]'")

from conftest import A100, AVX2, needs_c_compiler, needs_avx2_host
from helpers import fusion_tune_and_bench
from quantized_test_nets import pt2e_program
from relay_ext import cli
from relay_ext.frontend import pt2e_import
from relay_ext.frontend.transformer_nets import TinyBert

pytestmark = pytest.mark.slow
SHAPE = (1, 32, 64)
SOFTMAX_REDUCTIONS = {"T_softmax_maxelem", "T_softmax_expsum"}


@pytest.fixture(scope="module")
def program_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("pt2e_encoder") / "tiny_bert_int8.pt2"
    torch.export.save(pt2e_program(TinyBert, SHAPE, quantize_matmul=True), str(path))
    return path


def test_fusion_on_the_a100_with_every_matmul_integer(program_file, capsys):
    counts = pt2e_import.op_counts(pt2e_import.from_exported_program(program_file).mod)
    assert counts.get("qnn.dense") == 14 and counts.get("qnn.batch_matmul") == 4, counts
    assert not counts.get("nn.dense") and not counts.get("nn.batch_matmul"), counts
    assert cli.main(["fusion", "--model", str(program_file), "--target", A100, "--variants", "ours",
                     "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["totals"]["ours"]["tasks_failed"] == 0
    left = {t["name"]: set(t["variants"]["ours"]["buffers"]) for t in report["tasks"]
            if t["variants"]["ours"]["intermediates"]}
    assert all("softmax" in name and buffers <= SOFTMAX_REDUCTIONS for name, buffers in left.items()), left


@needs_avx2_host
@needs_c_compiler
def test_tune_and_bench_within_a_step_of_the_program(program_file, tmp_path, capsys, monkeypatch):
    # bench's row of the program run eagerly is labelled so (PyTorch Inductor's row compiles it)
    fusion_tune_and_bench(["--model", str(program_file), "--target", AVX2],
                          f"{pt2e_import.REFERENCE_NAME}, eager", tmp_path / "work", capsys, monkeypatch,
                          max_steps=1, compared_with=pt2e_import.REFERENCE_NAME, fusion=False)
