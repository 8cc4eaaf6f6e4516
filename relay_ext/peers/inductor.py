"""PyTorch 2's own int8 fast path, a peer runtime of ``quantfuse bench``: a PT2E program compiled
by ``torch.compile`` (Inductor) with freezing on.

    program = builtin_pt2e_program("mobilenet_v2", image_size=224)  # torchao PT2E, X86InductorQuantizer
    compiled = compile_inductor(program.module(), example_input)     # compiled once, run once

This is what PyTorch documents for x86 int8 inference: ``torch.export`` of the float network,
torchao's ``prepare_pt2e`` / ``convert_pt2e`` with ``X86InductorQuantizer``
(:func:`relay_ext.frontend.pt2e_export.quantize_pt2e`), then ``torch.compile`` with
``torch._inductor.config.freezing = True``, which folds the weights into constants so that
Inductor's quantization passes fuse the dequantize/conv/quantize groups into oneDNN int8 kernels
(without freezing the program runs its float ops). Running the same program eagerly (bench's
"eager" row, :mod:`relay_ext.peers.pytorch`) is much slower and is not what a PT2E user deploys.

Where it cannot run, :class:`InductorUnavailable` says why in one line: torchao's quantizer fails
on the network (torchao 0.18 under torch 2.13 raises "Input partition has more than one output
node" on torchvision's ResNet blocks, conv + batch norm + in-place add + ReLU), torchao is missing,
or Inductor finds no C++ compiler. :class:`InductorPeer` is bench's row.

Its output is checked against the same program run eagerly, which computes each quantized op in
float from the dequantized tensors: where the CPU has VNNI the two agree to a step. Without VNNI,
oneDNN's uint8 x int8 kernels (``jit_uni_int8:avx2`` on AVX2) multiply with ``vpmaddubsw``, whose
16-bit pair sums saturate, and the compiled program strays further; the same program with weights
quantized to 7 bits agrees again (the check's note says so,
:class:`~relay_ext.peers.base.Saturation`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from relay_ext.frontend import eager_quantization, models
from relay_ext.frontend.optional_deps import MissingDependency
from relay_ext.peers.base import (Peer, PeerModel, PeerUnavailable, Prepared, Saturation,
                                  distribution_version, first_line)
from relay_ext.peers.pytorch import program_module, run_torch_module, torch_timer
from relay_ext.report.accuracy import step_error

logger = logging.getLogger(__name__)

INDUCTOR = "PyTorch Inductor int8"
# Above this many output steps from the program run eagerly, Inductor's result is not rounding.
ROUNDING_STEPS = 1


class InductorUnavailable(PeerUnavailable):
    """The Inductor row cannot run here; the message says why in one line."""


def cpp_compiler_problem() -> str | None:
    """Why Inductor cannot compile C++ code here (no compiler found, as Inductor searches for one:
    ``torch._inductor.config.cpp.cxx``, ``$CXX``), None when it can."""
    from torch._inductor import cpp_builder  # pylint: disable=import-outside-toplevel

    try:
        cpp_builder.get_cpp_compiler()
    except Exception as error:  # pylint: disable=broad-except - InvalidCxxCompiler and kin
        return f"no C++ compiler for Inductor ({first_line(error)}); install g++ or set CXX"
    return None


def quantized_program(float_model: nn.Module, example: np.ndarray,
                      calibration_batches: list[np.ndarray]) -> Any:
    """``float_model`` through torchao's PT2E flow (:func:`relay_ext.frontend.pt2e_export.quantize_pt2e`),
    or :class:`InductorUnavailable` with torchao's reason (missing, or its quantizer failing on the
    network)."""
    from relay_ext.frontend.pt2e_export import quantize_pt2e  # pylint: disable=import-outside-toplevel

    try:
        return quantize_pt2e(float_model, example, calibration_batches)
    except MissingDependency as error:
        raise InductorUnavailable(first_line(error)) from error
    except Exception as error:  # pylint: disable=broad-except - torchao raises anything
        raise InductorUnavailable(f"torchao's X86InductorQuantizer fails on this network: "
                                  f"{first_line(error)}") from error


def builtin_pt2e_program(name: str, batch_size: int = 1, image_size: int = 224,
                         seed: int = models.DEFAULT_SEED) -> Any:
    """The built-in model ``name``'s float network, with the weights
    :func:`relay_ext.frontend.models.load` gives it (same ``seed``), quantized through PT2E and
    calibrated on the same random batches as ``load``'s PyTorch model (split to ``batch_size``).
    :class:`InductorUnavailable` when torchao cannot quantize it."""
    spec = models._model_spec(name)  # pylint: disable=protected-access
    models._check_load_arguments(spec, batch_size, image_size, "NCHW")  # pylint: disable=protected-access
    input_shape = spec.input_shape(batch_size, image_size)
    float_model = float_network(name, seed)
    samples = torch.cat(eager_quantization.random_batches(input_shape, models.CALIBRATION_BATCHES,
                                                         seed + 1))
    calibration = [batch.numpy() for batch in samples.split(batch_size) if len(batch) == batch_size]
    return quantized_program(float_model, calibration[0], calibration)


def float_network(name: str, seed: int = models.DEFAULT_SEED) -> nn.Module:
    """The built-in model ``name``'s float network with its seeded weights, in eval mode."""
    return eager_quantization.seeded_float_model(models._model_spec(name).build, seed)  # pylint: disable=W0212


def compile_inductor(module: nn.Module, example_input: np.ndarray) -> Callable[[torch.Tensor], Any]:
    """``torch.compile(module)`` (Inductor), compiled now by one run on ``example_input`` with
    ``torch._inductor.config.freezing`` on and autograd off (freezing applies to inference only);
    :class:`InductorUnavailable` without a C++ compiler or when the compile fails."""
    problem = cpp_compiler_problem()
    if problem is not None:
        raise InductorUnavailable(problem)
    import torch._inductor.config as inductor_config  # pylint: disable=import-outside-toplevel

    compiled = torch.compile(module)
    data = torch.from_numpy(np.ascontiguousarray(example_input))
    try:
        with inductor_config.patch(freezing=True), torch.no_grad():
            compiled(data)
    except Exception as error:  # pylint: disable=broad-except - dynamo wraps what failed
        raise InductorUnavailable(f"torch.compile failed: {first_line(error)}") from error
    return compiled


def inductor_version() -> str:
    """torch's version, and torchao's when it is installed."""
    torchao = distribution_version("torchao")
    return f"torch {torch.__version__}" + (f", torchao {torchao}" if torchao else "")


class InductorPeer(Peer):
    """``torch.compile`` with freezing of a PT2E program: a built-in model's float network through
    torchao's PT2E flow, or a ``.pt2`` model's program itself; checked against the same program
    run eagerly."""

    name = INDUCTOR
    optional = True
    saturation = Saturation("the compiled program's oneDNN uint8 x int8 kernels",
                            "a program whose weights are quantized to 7 bits avoids it",
                            ROUNDING_STEPS)

    @property
    def version(self) -> str:
        return inductor_version()

    def available(self) -> tuple[bool, str | None]:
        problem = cpp_compiler_problem()
        return problem is None, problem

    def prepare(self, model: PeerModel, number: int, threads: int) -> Prepared:
        loaded, program = model.loaded, program_module(model)
        if loaded.builtin is None and program is None:
            raise PeerUnavailable("no PT2E program: Inductor compiles a .pt2 model or a built-in "
                                  "model quantized with torchao's PT2E flow")
        try:
            if loaded.builtin is not None:
                built = loaded.builtin
                module = builtin_pt2e_program(built.name, built.batch_size, built.image_size,
                                              built.seed).module()
                step = None  # the program's output is float: its step from the eager output
            else:
                module, step = program, loaded.output_scale
            compiled = compile_inductor(module, loaded.example_input)
            expected = run_torch_module(module, loaded.example_input)
            output = run_torch_module(compiled, loaded.example_input)
            timer = torch_timer(compiled, loaded.example_input, number)
        except InductorUnavailable:
            raise
        except Exception as error:  # pylint: disable=broad-except - a compiled program's run failing
            raise PeerUnavailable(f"PyTorch Inductor failed: {first_line(error)}") from error
        from relay_ext.frontend.pt2e_import import float_output_step  # pylint: disable=C0415

        steps = step_error(output, expected, step or float_output_step(expected)).max_steps
        return Prepared(timer, "the same PT2E program run eagerly", steps)
