"""A float PyTorch model quantized the way PyTorch 2 documents it: torch.export + torchao's PT2E.

    program = quantize_pt2e(model, example, calibration_batches)   # a torch.export.ExportedProgram
    torch.export.save(program, "model.pt2")                          # what `--model model.pt2` takes
    program = quantize_pt2e(model, example, calibration_batches, dialect="xnnpack")

The steps (``pip install 'quantfuse[pt2e]'`` for torchao): ``torch.export.export(model, example)``
captures the float model, ``prepare_pt2e`` with a quantizer inserts observers, the calibration
batches run through it, ``convert_pt2e`` writes the quantize/dequantize calls (weights folded to
int8), and a second ``torch.export.export`` makes the program that is saved and imported
(:func:`relay_ext.frontend.pt2e_import.from_exported_program`). The two quantizer dialects
(:data:`DIALECTS`):

* ``"x86"``: torchao's ``X86InductorQuantizer`` with its default config: uint8 activations from
  histogram observers, int8 symmetric per-channel weights; a conv feeding a residual add keeps a
  float output (Inductor fuses conv + add);
* ``"xnnpack"``: the XNNPACK-style quantizer (``get_symmetric_quantization_config(is_per_channel=
  True)``, what ExecuTorch users produce): int8 activations (-128..127), int8 symmetric
  per-channel weights in -127..127, every conv, add and average pool output quantized. torchao
  0.18 keeps it in ``torchao.testing.pt2e._xnnpack_quantizer`` (ExecuTorch has its own copy).

Both give programs of the same ``quantized_decomposed`` ops; the importer reads the dtypes and
ranges from them and needs no word of which quantizer made a program.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from relay_ext.frontend.optional_deps import require_torchao

logger = logging.getLogger(__name__)

DIALECTS = ("x86", "xnnpack")


def quantize_pt2e(model: nn.Module, example: np.ndarray, calibration_batches: Sequence[np.ndarray],
                  dialect: str = "x86", quantize_matmul: bool = False) -> Any:
    """``model`` (float, put in eval mode) quantized with PT2E and the quantizer of ``dialect``
    (:data:`DIALECTS`, module docstring), calibrated on ``calibration_batches``, exported for the
    input shape of ``example``: an ExportedProgram. ``quantize_matmul`` (``"x86"`` only): the
    quantizer also takes ``torch.matmul`` of two activations (a transformer's attention), which
    X86InductorQuantizer's default config leaves float."""
    pt2e = require_torchao()
    if dialect not in DIALECTS:
        raise ValueError(f"unknown PT2E quantizer dialect {dialect!r}; choose one of {', '.join(DIALECTS)}")
    if quantize_matmul and dialect != "x86":
        raise ValueError(f"quantize_matmul is an option of the x86 dialect's quantizer, not {dialect!r}'s")
    if not calibration_batches:
        raise ValueError("quantize_pt2e needs at least one calibration batch")
    inputs = (torch.from_numpy(np.ascontiguousarray(example, dtype=np.float32)),)
    quantizer = make_quantizer(dialect, quantize_matmul)
    with torch.no_grad():
        captured = torch.export.export(model.eval(), inputs).module()
        prepared = pt2e.prepare_pt2e(captured, quantizer)
        for batch in calibration_batches:
            prepared(torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32)))
        converted = pt2e.convert_pt2e(prepared)
        program = torch.export.export(converted, inputs)
    logger.info("quantized %s with PT2E, %s dialect (%d calibration batches)", type(model).__name__, dialect,
                len(calibration_batches))
    return program


def make_quantizer(dialect: str, quantize_matmul: bool = False) -> Any:
    """The torchao quantizer of ``dialect`` (``"x86"`` or ``"xnnpack"``), configured as the module
    docstring says; ``quantize_matmul``: the x86 one with its default config for ``torch.matmul``
    too."""
    if dialect == "x86":
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

        config = x86.get_default_x86_inductor_quantization_config()
        quantizer = x86.X86InductorQuantizer().set_global(config)
        return quantizer.set_function_type_qconfig(torch.matmul, config) if quantize_matmul else quantizer
    with warnings.catch_warnings():  # torchao marks its copy deprecated in favour of ExecuTorch's
        warnings.simplefilter("ignore")
        from torchao.testing.pt2e import _xnnpack_quantizer as xnnpack

        return xnnpack.XNNPACKQuantizer().set_global(xnnpack.get_symmetric_quantization_config(is_per_channel=True))


def save_program(program: Any, path: str | os.PathLike) -> Path:
    """``torch.export.save(program, path)``; returns ``path``."""
    path = Path(path)
    torch.export.save(program, str(path))
    return path
