"""Seven classic CNN families (tests/classic_cnns.py: MobileNetV2, RegNetX-400MF, MobileNetV3-large,
EfficientNet-B0, MnasNet 1.0, ShuffleNetV2 x1.0, GoogLeNet; the last two as torchvision defines
them, at width 0.25 with the first two blocks of every stage (ShuffleNetV2 three), 16x16)
quantized as a user would with torchao's PT2E flow and X86InductorQuantizer (the families tier
also with the XNNPACK-style quantizer: int8 activations, symmetric per-channel weights), saved
with torch.export.save:

* (each) the import makes every conv and linear of the program a QNN op (none left float), the
  ``cat`` s of float conv outputs included (GoogLeNet's inception modules, ShuffleNetV2's units:
  relay_ext/frontend/pt2e_cat.py);
* (families, each) TVM's untuned build is within 1 output quantization step of PyTorch running
  the program, on the example input and a random one (a build of the whole net: 1-4 minutes each
  on 2 shared cores);
* (families, each) ``quantfuse fusion`` on the A100 leaves 0 tasks with a global intermediate
  (variant ours);
* (families, each) ``quantfuse tune`` (4 trials) and ``bench`` on the AVX2 target: the tuned build
  within 3 steps of the program.

The untuned, fusion and tune tests are the ``families`` marker (``make test-families``: minutes per
family on 2 cores, outside CI); the imports run in the slow tier. On AVX2 the families' builds were
15-26 steps off until TVM's saturating ``vpmaddubsw`` convs were split
(relay_ext/lowering/x86/saturation_free_int8.py, docs/known-tvm-issues.md).
"""

import re

import numpy as np
import pytest
import torch

pytest.importorskip("torchao", reason="the PT2E path needs torchao: pip install 'quantfuse[pt2e]'")

from classic_cnns import FAMILIES
from conftest import A100, AVX2, needs_avx2_host
from helpers import fusion_tune_and_bench
from quantized_test_nets import pt2e_program
from relay_ext import cli
from relay_ext.frontend import pt2e_import
from relay_ext.frontend.pt2e_export import DIALECTS
from relay_ext.frontend.qnn_passes import FLOAT_COMPUTE_OPS, QNN_COMPUTE_OPS
from relay_ext.report.accuracy import step_error
from relay_ext.build import compile
from relay_ext.measure.run import run_module

SHAPE = (1, 3, 16, 16)
WIDTH, DEPTH, CLASSES = 0.25, 0, 10
MAX_STEPS = 1 + 1e-3  # the untuned build: one whole step, up to float rounding


def _build(family: str):
    return lambda: FAMILIES[family](width=WIDTH, depth=DEPTH, classes=CLASSES)


@pytest.fixture(scope="module")
def program_file(tmp_path_factory):
    """family -> its PT2E program saved with torch.export.save (made once per family)."""
    root = tmp_path_factory.mktemp("classic_pt2e")
    files = {}

    def get(family: str, dialect: str = "x86"):
        if (family, dialect) not in files:
            files[family, dialect] = root / f"{family}.{dialect}.pt2"
            torch.export.save(pt2e_program(_build(family), SHAPE, dialect=dialect), str(files[family, dialect]))
        return files[family, dialect]

    return get


def _convs_and_denses(program) -> int:
    return sum(node.op == "call_function" and pt2e_import.op_name(node.target) in ("aten.conv2d", "aten.linear")
               for node in program.graph_module.graph.nodes)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_import_makes_every_conv_and_linear_integer(family, program_file):
    loaded = pt2e_import.from_exported_program(program_file(family))
    counts = pt2e_import.op_counts(loaded.mod)
    assert not any(counts.get(op) for op in FLOAT_COMPUTE_OPS), counts
    program = pt2e_import.load_program(program_file(family))
    assert sum(counts.get(op, 0) for op in QNN_COMPUTE_OPS) == _convs_and_denses(program), counts


@pytest.mark.families
@needs_avx2_host
@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_untuned_build_is_within_a_step_of_the_program(family, dialect, program_file):
    loaded = pt2e_import.from_exported_program(program_file(family, dialect))
    counts = pt2e_import.op_counts(loaded.mod)
    assert not any(counts.get(op) for op in FLOAT_COMPUTE_OPS), counts  # every conv and linear integer
    lib = compile(loaded, target=AVX2, schedule="default", opt_level=2)
    generator = np.random.default_rng(3)
    for data in (loaded.example_input, generator.standard_normal(SHAPE, dtype=np.float32)):
        (out,) = run_module(lib, {loaded.input_name: data})
        assert step_error(out, loaded.run_reference(data), loaded.output_scale).max_steps <= MAX_STEPS


@pytest.mark.families
@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fusion_on_the_a100_keeps_no_global_intermediate(family, dialect, program_file, capsys):
    assert cli.main(["fusion", "--model", str(program_file(family, dialect)), "--target", A100,
                     "--variants", "ours"]) == 0
    total = re.search(r"^TOTAL\s+(\d+) tasks\s+(.*)$", capsys.readouterr().out, re.M)
    assert total and int(total[1]) > 0, total
    assert total[2].strip() == "0 (0 B) in 0 tasks", total[0]  # no global intermediate, no failed task


@pytest.mark.families
@needs_avx2_host
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_tune_and_bench_within_3_steps(family, program_file, tmp_path, capsys, monkeypatch):
    fusion_tune_and_bench(["--model", str(program_file(family)), "--target", AVX2],
                          f"{pt2e_import.REFERENCE_NAME}, eager", tmp_path / "work", capsys, monkeypatch,
                          compared_with=pt2e_import.REFERENCE_NAME, fusion=False)
