"""The built-in float encoder ``TinyBert`` (hidden 64, 2 layers, 4 heads, sequence 32) quantized
with PT2E and imported:

* every linear layer is ``qnn.dense`` in both dialects; ``torch.matmul`` of two activations is
  ``qnn.batch_matmul`` where the program multiplies two quantized tensors (XNNPACK-style: the
  attention scores, whose operands are the quantized query and key; X86InductorQuantizer given a
  config for ``torch.matmul``: all four) and float where it does not (X86InductorQuantizer's
  default config quantizes no matmul);
* LayerNorm, softmax, GELU and the pooler's tanh stay float (no ``qnn.tanh`` of the pooler's int32
  accumulator);
* (slow: three builds) the untuned build is within one output step of PyTorch running the program
  (X86InductorQuantizer, both configs), two for the XNNPACK-style program.

A small attention net through ``scaled_dot_product_attention``, ``baddbmm``, ``slice`` and
``expand`` builds within one step of its program in both dialects.
"""

import numpy as np
import pytest
import torch
import tvm
from torch import nn
from tvm import relay

pytest.importorskip("torchao", reason="the PT2E path needs torchao: pip install 'quantfuse[pt2e]'")

from quantized_test_nets import pt2e_program

from relay_ext.build import compile
from relay_ext.frontend import pt2e_export, pt2e_import
from relay_ext.frontend.pt2e_transformer_ops import float_gelu, float_tanh
from relay_ext.frontend.transformer_nets import TinyBert
from relay_ext.measure.run import run_module
from relay_ext.report.accuracy import step_error

SHAPE = (1, 32, 64)
# Output steps the untuned build may be off the program, up to float rounding: one; two for the
# XNNPACK-style program, whose every linear output is requantized (docs/model-files.md).
MAX_STEPS = {"x86": 1 + 1e-3, "x86+matmul": 1 + 1e-3, "xnnpack": 2 + 1e-3}
FLOAT_OPS = ("qnn.tanh", "qnn.erf", "qnn.softmax", "qnn.sigmoid", "qnn.exp")


# dialect or config -> (float nn.batch_matmul, qnn.batch_matmul) the import has
PROGRAMS = {"x86": (4, 0), "xnnpack": (2, 2), "x86+matmul": (0, 4)}


@pytest.fixture(scope="module", params=list(PROGRAMS))
def imported(request):
    if request.param == "x86+matmul":  # what a user asks for to get the attention matmuls in int8
        program = pt2e_program(TinyBert, SHAPE, quantize_matmul=True)
    else:
        program = pt2e_program(TinyBert, SHAPE, dialect=request.param)
    return request.param, pt2e_import.from_exported_program(program)


def test_every_linear_is_qnn_dense_and_quantized_matmuls_are_integer(imported):
    name, loaded = imported
    counts = pt2e_import.op_counts(loaded.mod)
    float_matmuls, integer_matmuls = PROGRAMS[name]
    assert counts.get("qnn.dense") == 14 and not counts.get("nn.dense"), counts
    assert counts.get("nn.batch_matmul", 0) == float_matmuls, counts
    assert counts.get("qnn.batch_matmul", 0) == integer_matmuls, counts


def test_layer_norm_softmax_gelu_and_tanh_stay_float(imported):
    counts = pt2e_import.op_counts(imported[1].mod)
    assert counts.get("nn.layer_norm") == 5 and counts.get("nn.softmax") == 2 and counts.get("erf") == 2, counts
    assert not any(counts.get(op) for op in FLOAT_OPS), counts


@pytest.mark.slow
def test_untuned_build_stays_within_max_steps_of_the_program(imported):
    name, loaded = imported
    lib = compile(loaded, target="llvm", schedule="default")
    generator = np.random.default_rng(5)
    for data in [loaded.example_input] + [generator.standard_normal(SHAPE, dtype=np.float32) for _ in range(3)]:
        (out,) = run_module(lib, {loaded.input_name: data})
        error = step_error(out, loaded.run_reference(data), loaded.output_scale)
        assert error.max_steps <= MAX_STEPS[name], (name, error)


def test_float_tanh_and_gelu_compute_what_pytorch_does():
    values = np.array([-100.0, -20.0, -3.0, -0.5, -1e-4, 0.0, 1e-4, 0.5, 3.0, 20.0, 100.0], "float32")
    x = relay.var("x", shape=values.shape, dtype="float32")
    func = relay.Function([x], relay.Tuple([float_tanh(x), float_gelu(x), float_gelu(x, "tanh")]))
    outs = relay.create_executor("graph", mod=tvm.IRModule.from_expr(func), target="llvm").evaluate()(values)
    tensor = torch.from_numpy(values)
    expected = [torch.tanh(tensor), torch.nn.functional.gelu(tensor),
                torch.nn.functional.gelu(tensor, approximate="tanh")]
    for out, want in zip(outs, expected):
        np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


class AttentionVariants(nn.Module):
    """``scaled_dot_product_attention``, ``baddbmm``, ``slice``, ``expand``, ``sub`` and ``tanh``
    between quantized linears, on (1, 8, 16)."""

    def __init__(self) -> None:
        super().__init__()
        self.query, self.key, self.value = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)
        self.out = nn.Linear(16, 8)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(1, 8, 2, 8).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        context = nn.functional.scaled_dot_product_attention(
            self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x)))
        mixed = torch.baddbmm(x[:, 2:6, :].expand(2, 4, 16), x[:, 1:5, :8].expand(2, 4, 8),
                              x[:, :8, :].expand(2, 8, 16), beta=0.5, alpha=2.0)
        y = context.transpose(1, 2).reshape(1, 8, 16)[:, :4, :] + mixed[:1] - x[:, 4:, :]
        return self.out(torch.tanh(y))


@pytest.mark.parametrize("dialect", pt2e_export.DIALECTS)
def test_attention_variants_build_within_a_step_of_the_program(dialect):
    loaded = pt2e_import.from_exported_program(pt2e_program(AttentionVariants, (1, 8, 16), dialect=dialect))
    assert pt2e_import.op_counts(loaded.mod).get("qnn.dense") == 4
    lib = compile(loaded, target="llvm", schedule="default")
    generator = np.random.default_rng(5)
    for data in (loaded.example_input, generator.standard_normal((1, 8, 16), dtype=np.float32)):
        (out,) = run_module(lib, {loaded.input_name: data})
        assert step_error(out, loaded.run_reference(data), loaded.output_scale).max_steps <= 1 + 1e-3
