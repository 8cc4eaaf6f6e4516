"""relay_ext.frontend.pt2e_cat: PT2E ``cat`` / ``stack`` of float operands (conv + ReLU outputs the
quantizer leaves unquantized, halves of a ``chunk``, a mix) import with every conv integer and
build to what PyTorch computes from the program, within a step, whether the joined value reaches
one quantize, several alike (through a max pool), several of different parameters (ShuffleNetV2's
kept half), an average pool, or no quantize at all. The builds are slow (tests/conftest.py)."""

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("torchao", reason="the PT2E programs of these tests need torchao")

from classic_cnns import BasicConv2d, Inception, ShuffleUnit
from quantized_test_nets import pt2e_program, worst_steps
from relay_ext.build import compile
from relay_ext.frontend import pt2e_cat, pt2e_import
from relay_ext.frontend.qnn_passes import FLOAT_COMPUTE_OPS
from relay_ext.measure.run import run_module

SHAPE = (1, 8, 8, 8)
MAX_STEPS = 1 + 1e-3  # one output step, up to float rounding


class _Head(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.fc = nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.mean([2, 3]))


class ShuffleUnits(nn.Module):
    """torchvision's ShuffleNetV2 units: a stride-2 one, then three stride-1 ones (``chunk``, the
    kept half concatenated with a conv + ReLU of the other half, the channel shuffle), whose kept
    halves stay float into the next unit."""

    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.stem = BasicConv2d(8, 8, kernel_size=3, padding=1)
        self.units = nn.Sequential(ShuffleUnit(8, channels, 2), *(ShuffleUnit(channels, channels, 1) for _ in range(3)))
        self.head = _Head(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.units(self.stem(x)))


class Inceptions(nn.Module):
    """Two of torchvision's inception modules (four float conv + ReLU branches concatenated, one
    behind a max pool of the input), a max pool between them; the second's output averaged."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = BasicConv2d(8, 8, kernel_size=3, padding=1)
        self.first, self.pool, self.second = Inception(8, 2, 2, 2, 2, 2, 2), nn.MaxPool2d(3, 2, ceil_mode=True), \
            Inception(8, 2, 2, 2, 2, 2, 2)
        self.head = _Head(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.second(self.pool(self.first(self.stem(x)))))


class FloatCatOutput(nn.Module):
    """A cat of two float conv + ReLU outputs that is the program's output: no quantize after it."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = BasicConv2d(8, 8, kernel_size=3, padding=1)
        self.left, self.right = BasicConv2d(8, 4, kernel_size=1), BasicConv2d(8, 4, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        return torch.cat((self.left(x), self.right(x)), 1)


class Stacked(nn.Module):
    """``stack`` of two float conv + ReLU outputs, averaged, then a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.branch = BasicConv2d(8, 8, kernel_size=3, padding=1), BasicConv2d(8, 8, kernel_size=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        return self.fc(torch.stack((x, self.branch(x)), 1).mean([3, 4]).flatten(1))


def _nodes(program, name: str) -> list:
    return [node for node in program.graph_module.graph.nodes
            if node.op == "call_function" and pt2e_import.op_name(node.target) == name]


@pytest.fixture(scope="module")
def imported():
    """build -> (its PT2E program, the import with its op counts), made once per build."""
    made = {}

    def get(build):
        if build not in made:
            program = pt2e_program(build, SHAPE)
            loaded = pt2e_import.from_exported_program(program)
            made[build] = program, loaded, pt2e_import.op_counts(loaded.mod)
        return made[build]

    return get


@pytest.mark.parametrize("build", [ShuffleUnits, Inceptions, Stacked, FloatCatOutput])
def test_every_conv_is_integer_and_joins_float_operands_as_integers(build, imported):
    program, _, counts = imported(build)
    joins = _nodes(program, "aten.cat") + _nodes(program, "aten.stack")
    assert any(not pt2e_cat.is_dequantized(arg) for node in joins for arg in node.args[0])  # a float operand
    assert counts.get("qnn.conv2d") == len(_nodes(program, "aten.conv2d")), counts
    assert not any(counts.get(op) for op in FLOAT_COMPUTE_OPS), counts
    if build is FloatCatOutput:  # no quantize after it: left float, as PyTorch computes it
        assert counts.get("concatenate") == 1 and not counts.get("qnn.concatenate"), counts
    else:
        assert not counts.get("concatenate") and counts.get("qnn.concatenate") == len(joins), counts


def test_following_quantizes_tells_alike_quantizes_from_differing_ones(imported):
    inception = imported(Inceptions)[0]
    first, second = _nodes(inception, "aten.cat")
    quantizes, commuting = pt2e_cat.following_quantizes(first)  # a quantize, and a max pool then one alike
    assert commuting and len(quantizes) >= 2 and len({q.args[1:] for q in quantizes}) == 1
    assert not pt2e_cat.following_quantizes(second)[1]  # averaged before it is quantized
    stride_two, *stride_one = _nodes(imported(ShuffleUnits)[0], "aten.cat")
    assert pt2e_cat.following_quantizes(stride_two)[1]
    quantizes, _ = pt2e_cat.following_quantizes(stride_one[0])
    assert len({q.args[1:] for q in quantizes}) > 1  # this unit's and the next's


@pytest.mark.parametrize("build", [ShuffleUnits, Inceptions, Stacked, FloatCatOutput])
def test_the_build_is_within_a_step_of_the_program(build, imported):
    _, loaded, _ = imported(build)
    lib = compile(loaded, target="llvm", schedule="default", opt_level=2)
    if build is FloatCatOutput:  # a float output: as PyTorch computes it, up to float rounding
        (out,) = run_module(lib, {loaded.input_name: loaded.example_input})
        np.testing.assert_allclose(out, loaded.run_reference(loaded.example_input), atol=1e-4)
    else:
        assert worst_steps(loaded, lib, extra_inputs=1) <= MAX_STEPS
