"""Both PT2E quantizer dialects through the same import, with no word of which made the program:

* ``x86``: torchao's X86InductorQuantizer (uint8 activations, a conv feeding a residual add left
  float);
* ``xnnpack``: the XNNPACK-style quantizer (int8 activations, symmetric per-channel int8 weights
  in -127..127, every conv and add output quantized), what ExecuTorch users produce.

* (slow: two whole builds) a small ResNet-like net (conv-bn-relu stem, an identity residual
  block, a strided block with a 1x1 conv shortcut, average pool, linear) at 16x16: TVM's untuned
  build within one output step of PyTorch running the program on two inputs;
* the residual adds are int32 sums requantized once
  (:func:`relay_ext.frontend.pt2e_ops.int32_residual_operands`), not ``qnn.add``, which rounds each
  operand to the output step before adding: on two conv outputs added (XNNPACK quantizes both),
  ``qnn.add`` left one output in nine a step off PyTorch's float sum;
* ReLU6 of an int8 tensor whose 6 lies past 127 steps builds (TVM wrote the bound as an int8
  literal it cannot hold).
"""

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("torchao", reason="the PT2E path needs torchao: pip install 'quantfuse[pt2e]'")

from quantized_test_nets import pt2e_program
from relay_ext.build import compile
from relay_ext.frontend import pt2e_export, pt2e_import
from relay_ext.measure.run import run_module
from relay_ext.report.accuracy import step_error

SHAPE = (1, 3, 16, 16)
MAX_STEPS = 1 + 1e-3  # one whole step, up to float rounding
ACTIVATION_DTYPE = {"x86": torch.uint8, "xnnpack": torch.int8}


class Block(nn.Module):
    """Two 3x3 conv-bn, residual add, ReLU; a strided 1x1 conv-bn shortcut when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.shortcut = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.shortcut is None else self.shortcut(x)
        out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(out + identity)


class SmallResNet(nn.Module):
    """Stem, identity block, strided block, 2x2 average pool to 1x1 after a stride-2 pool, linear."""

    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.Sequential(Block(width, width, 1), Block(width, 2 * width, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


class TwoConvsAdded(nn.Module):
    """relu(conv-bn(x) + conv-bn(x)): an add of two quantized tensors of different steps."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.left = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width))
        self.right = nn.Sequential(nn.Conv2d(3, width, 1, bias=False), nn.BatchNorm2d(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.left(x) + self.right(x))


class ConvReLU6(nn.Module):
    """conv, ReLU6, conv: ReLU6 of an int8 tensor whose 6 is past its 127 steps (as in MobileNetV2)."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.first = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1), nn.ReLU6())
        self.second = nn.Conv2d(width, width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


@pytest.fixture(scope="module", params=pt2e_export.DIALECTS)
def program(request):
    return request.param, pt2e_program(SmallResNet, SHAPE, dialect=request.param)


def _activation_dtypes(program) -> set:
    return {node.args[-1] for node in program.graph_module.graph.nodes
            if node.op == "call_function" and pt2e_import.op_name(node.target) == "quantized_decomposed.quantize_per_tensor"}


def test_the_program_is_of_its_dialect(program):
    dialect, exported = program
    assert _activation_dtypes(exported) == {ACTIVATION_DTYPE[dialect]}


def test_residual_adds_are_int32_sums_not_qnn_add(program):
    counts = pt2e_import.op_counts(pt2e_import.from_exported_program(program[1]).mod)
    assert not counts.get("qnn.add") and counts.get("add") == 2, counts


@pytest.mark.slow
def test_untuned_build_is_within_1_step_of_the_program(program):
    loaded = pt2e_import.from_exported_program(program[1])
    lib = compile(loaded, target="llvm", schedule="default", opt_level=2)
    generator = np.random.default_rng(5)
    for data in (loaded.example_input, generator.standard_normal(SHAPE, dtype=np.float32)):
        (out,) = run_module(lib, {loaded.input_name: data})
        assert step_error(out, loaded.run_reference(data), loaded.output_scale).max_steps <= MAX_STEPS


def test_an_add_of_two_quantized_tensors_rounds_once_as_pytorch():
    loaded = pt2e_import.from_exported_program(pt2e_program(TwoConvsAdded, SHAPE, dialect="xnnpack"))
    lib = compile(loaded, target="llvm", schedule="default", opt_level=2)
    for data in (loaded.example_input, np.random.default_rng(5).standard_normal(SHAPE, dtype=np.float32)):
        (out,) = run_module(lib, {loaded.input_name: data})
        error = step_error(out, loaded.run_reference(data), loaded.output_scale)
        # A conv's bias rounded to its int32 step moves one output in thousands (docs/model-files.md).
        assert error.max_steps <= MAX_STEPS and error.fraction_equal >= 0.99, error


def test_relu6_of_an_int8_tensor_builds():
    loaded = pt2e_import.from_exported_program(pt2e_program(ConvReLU6, SHAPE, dialect="xnnpack"))
    lib = compile(loaded, target="llvm", schedule="default", opt_level=2)
    (out,) = run_module(lib, {loaded.input_name: loaded.example_input})
    assert step_error(out, loaded.run_reference(), loaded.output_scale).max_steps <= MAX_STEPS


def test_an_unknown_dialect_is_refused_in_one_line():
    with pytest.raises(ValueError, match="unknown PT2E quantizer dialect 'arm'; choose one of x86, xnnpack"):
        pt2e_export.quantize_pt2e(SmallResNet(), np.zeros(SHAPE, np.float32), [np.zeros(SHAPE, np.float32)],
                                  dialect="arm")


def test_quantize_matmul_is_the_x86_quantizers_option():
    with pytest.raises(ValueError, match="quantize_matmul is an option of the x86 dialect's quantizer, not 'xnnpack'"):
        pt2e_export.quantize_pt2e(SmallResNet(), np.zeros(SHAPE, np.float32), [np.zeros(SHAPE, np.float32)],
                                  dialect="xnnpack", quantize_matmul=True)
