"""PyTorch 2 quantized programs (torch.export + torchao's PT2E quantization) as Relay modules.

    loaded = from_exported_program("model.pt2")     # a relay_ext.frontend.models.LoadedModel
    loaded = from_exported_program(exported_program)  # a torch.export.ExportedProgram in memory

A PT2E program (``prepare_pt2e`` / ``convert_pt2e``, then ``torch.export.export`` and
``torch.export.save``) is a QDQ graph: float ATen ops (``aten.conv2d``, ``aten.linear``,
``aten.add`` ...) between ``quantized_decomposed.quantize_per_tensor`` /
``dequantize_per_tensor`` / ``dequantize_per_channel`` calls, with int8 weights. TVM 0.19's Relay
has no importer for it (only Relax has one), so quantfuse translates the graph node by node
(:class:`~relay_ext.frontend.pt2e_graph.GraphConverter` walks it, :mod:`.pt2e_ops` holds one
converter per op): each quantize/dequantize becomes ``qnn.quantize`` / ``qnn.dequantize``, each
ATen op the Relay op that computes the same in float. The same
:func:`~relay_ext.frontend.qnn_passes.integer_ops` that makes the ONNX QDQ graphs integer (``FakeQuantizationToInteger``, means and global average
pools rounded to nearest) then turns every ``dequantize -> op -> quantize`` region into QNN ops
(``qnn.conv2d``, ``qnn.dense``, ``qnn.requantize`` ...). A non-global ``aten.avg_pool2d`` is left
to TVM's ``qnn.avg_pool2d``, which truncates: its outputs may be one step below PyTorch's.

Why this converter and not ``torch.onnx.export`` of the program into the ONNX path: measured in
docs/models.md ("PT2E programs"). The converter reads the graph's shapes, constants and quantization
parameters as they are, needs no ONNX exporter (the program's exporter needs onnxscript, which
quantfuse does not install) and leaves no conv or dense layer in float.

The reference runtime is PyTorch running the program itself (``ExportedProgram.module()``: the QDQ
graph in float, as PyTorch defines the quantized model), and ``output_scale`` is the scale of the
``dequantize_per_tensor`` that produces the program's output, or, when the output is float (the
X86InductorQuantizer quantizes the inputs of the last linear layer, not its output), the step an
8-bit min/max observer would give it (:func:`float_output_step`). Input shapes come from the
program.

Two rewrites make the whole graph integer: ``FakeQuantizationToInteger`` runs with ``use_qat``, so
the last linear layer, whose output is float, becomes ``qnn.dense`` and a dequantize; and a
residual ``add`` of a dequantized tensor and a conv's float output (PT2E's conv + add pattern)
gets int32 quantize/dequantize pairs on both operands
(:func:`~relay_ext.frontend.pt2e_ops.int32_residual_operands`), so that the conv becomes
``qnn.conv2d`` too (an add of two dequantized tensors gets them as well: one rounding of the sum).

Both quantizer dialects (:mod:`.pt2e_export`: X86InductorQuantizer's uint8 activations, the
XNNPACK-style quantizer's int8 activations and -127..127 weights) import alike: dtypes, zero points
and ranges are read from each quantize/dequantize call, nothing is told which quantizer ran. What
still rounds apart from the program: a conv's float bias is quantized to its int32 accumulator
step (sx * sw), so an output within that of a rounding boundary can land one step off.

An ATen op the converter does not know is a :class:`UnsupportedOperator` (a ValueError: one line,
exit code 2 at the command line) naming the op and the graph node. A converter failing on an op it
knows is a :class:`ConverterError` (a RuntimeError: quantfuse's bug, not the program's), and a TVM
pass failing on the converted module is TVM's error as it is: neither is said as bad input.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import torch
import tvm
from tvm import relay

from meta_rules.base.tvm_errors import tvm_error_message

from relay_ext.frontend.models import DEFAULT_SEED, LoadedModel, check_layout, convert_to_nhwc, random_input
from relay_ext.frontend.optional_deps import require_torchao
from relay_ext.frontend.pt2e_graph import ConverterError, GraphConverter, UnsupportedOperator, op_name
from relay_ext.frontend.pt2e_ops import CONVERTERS
from relay_ext.frontend.qnn_passes import check_integer_compute, integer_ops, op_counts

logger = logging.getLogger(__name__)

PT2E_SUFFIXES = (".pt2",)
REFERENCE_NAME = "PyTorch PT2E int8"
_QUANTIZE = ("quantized_decomposed.quantize_per_tensor", "quantized_decomposed.quantize_per_channel")


class ExportedProgramReference:
    """PyTorch running the exported program (its ``module()``), as the reference of a PT2E model:
    input array -> first output as numpy. ``torch_module`` is what ``bench`` times."""

    name = REFERENCE_NAME

    def __init__(self, module: torch.nn.Module) -> None:
        self.torch_module = module

    def __call__(self, data: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            output = self.torch_module(torch.from_numpy(np.ascontiguousarray(data)))
        if isinstance(output, (tuple, list)):
            output = output[0]
        return output.detach().numpy()


def is_pt2e_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a saved ExportedProgram (by its ``.pt2`` suffix)."""
    return os.fspath(path).lower().endswith(PT2E_SUFFIXES)


def from_exported_program(
    program: Any,
    layout: str = "NCHW",
    seed: int = DEFAULT_SEED,
    name: str | None = None,
) -> LoadedModel:
    """Import a PT2E-quantized ``torch.export`` program with one float32 input for TVM, its ops
    made integer.

    ``program`` is a path to a file written by ``torch.export.save`` or an ``ExportedProgram``.
    The input's shape is the program's (static shapes only). The example input is a random normal
    batch from ``seed``; ``layout="NHWC"`` converts the convs as
    :func:`relay_ext.frontend.models.load` does.

    Raises FileNotFoundError for a missing file,
    :class:`~relay_ext.frontend.optional_deps.MissingDependency` without torchao, and ValueError
    (one line) for a file that is not an exported program, a program that is not quantized, has
    dynamic or more than one input, or calls an op the converter lacks (:class:`UnsupportedOperator`).
    """
    require_torchao()
    check_layout(layout)
    if isinstance(program, (str, os.PathLike)):
        name = name or os.path.splitext(os.path.basename(os.fspath(program)))[0]
        program = load_program(program)
    elif not isinstance(program, torch.export.ExportedProgram):
        raise ValueError(f"expected a torch.export.ExportedProgram or a .pt2 path, got {type(program).__name__}")
    name = name or "exported_program"
    mod, input_name, input_shape, scale = to_relay(program, name)
    # use_qat: PT2E leaves the output of the last linear layer float (no quantize after it).
    mod = integer_ops(mod, use_qat=True)
    check_integer_compute(mod, name)
    if layout == "NHWC":
        mod = convert_to_nhwc(mod)
    reference = ExportedProgramReference(program.module())
    example_input = random_input(input_shape, seed)
    if scale is None:
        scale = float_output_step(reference(example_input))
    logger.info("imported %s (PT2E): input %s %s, output scale %s, layout %s",
                name, input_name, input_shape, scale, layout)
    return LoadedModel(
        name=name,
        torchscript=None,
        mod=mod,
        params={},
        input_name=input_name,
        input_shape=input_shape,
        example_input=example_input,
        output_scale=scale,
        layout=layout,
        quantized=True,
        reference=reference,
        reference_name=REFERENCE_NAME,
    )


def float_output_step(output: np.ndarray) -> float:
    """The step of a program whose output is float (X86InductorQuantizer quantizes the last linear
    layer's inputs, not its output): the scale an 8-bit min/max observer would give the output,
    ``(max - min) / 255`` of PyTorch's output on the example input. Steps of TVM's distance from
    PyTorch are counted in it, as for a dequantized output."""
    output = np.asarray(output, dtype=np.float64)
    spread = float(output.max() - output.min()) if output.size else 0.0
    return spread / 255 if spread > 0 else 1.0


def load_program(path: str | os.PathLike) -> Any:
    """``torch.export.load(path)``, with a missing or foreign file as one-line errors."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"PT2E model file not found: {path}")
    # torch.export.load logs the traceback of a failed first attempt (a warning) before its
    # fallback; the error below says what the user needs in one line.
    export_logger = logging.getLogger("torch.export")
    level = export_logger.level
    export_logger.setLevel(logging.ERROR)
    try:
        return torch.export.load(path)
    except Exception as error:  # zipfile, pickle, serialization errors
        raise ValueError(
            f"{path} is not a program saved with torch.export.save: {tvm_error_message(error, limit=300)}"
        ) from error
    finally:
        export_logger.setLevel(level)


# --- the graph to Relay --------------------------------------------------------------------------


def to_relay(program: Any, name: str) -> tuple[tvm.IRModule, str, tuple[int, ...], float | None]:
    """The program as a Relay module with qnn.quantize/qnn.dequantize and float ops (not yet
    integer), its input's name and shape, and the output's quantization scale (None when the
    output is not dequantized)."""
    converter = GraphConverter(program, name, CONVERTERS)
    if not any(node.op == "call_function" and op_name(node.target) in _QUANTIZE
               for node in converter.graph_module.graph.nodes):
        raise ValueError(
            f"{name} is a float program (no quantized_decomposed.quantize_per_tensor calls): quantize it "
            "first with torchao's prepare_pt2e / convert_pt2e, then torch.export it (docs/models.md)"
        )
    body = converter.convert()
    func = relay.Function([converter.input_var], body)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(func))
    return mod, converter.input_name, converter.input_shape, converter.output_scale


__all__ = ["ConverterError", "ExportedProgramReference", "op_counts", "UnsupportedOperator", "from_exported_program",
           "is_pt2e_file", "load_program", "op_name", "require_torchao", "to_relay", "PT2E_SUFFIXES", "REFERENCE_NAME"]
