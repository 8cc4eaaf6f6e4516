"""A float PyTorch model quantized the way PyTorch 2 documents it: torch.export + torchao's PT2E.

    program = quantize_pt2e(model, example, calibration_batches)   # a torch.export.ExportedProgram
    torch.export.save(program, "model.pt2")                          # what `--model model.pt2` takes

The steps (``pip install 'quantfuse[pt2e]'`` for torchao): ``torch.export.export(model, example)``
captures the float model, ``prepare_pt2e`` with torchao's ``X86InductorQuantizer`` (its default
config: uint8 activations from histogram observers, int8 symmetric per-channel weights) inserts
observers, the calibration batches run through it, ``convert_pt2e`` writes the
quantize/dequantize calls (weights folded to int8), and a second ``torch.export.export`` makes the
program that is saved and imported (:func:`relay_ext.frontend.pt2e_import.from_exported_program`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from relay_ext.frontend.optional_deps import require_torchao

logger = logging.getLogger(__name__)


def quantize_pt2e(model: nn.Module, example: np.ndarray, calibration_batches: Sequence[np.ndarray]) -> Any:
    """``model`` (float, put in eval mode) quantized with PT2E and X86InductorQuantizer, calibrated
    on ``calibration_batches``, exported for the input shape of ``example``: an ExportedProgram."""
    pt2e = require_torchao()
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    if not calibration_batches:
        raise ValueError("quantize_pt2e needs at least one calibration batch")
    inputs = (torch.from_numpy(np.ascontiguousarray(example, dtype=np.float32)),)
    quantizer = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
    with torch.no_grad():
        captured = torch.export.export(model.eval(), inputs).module()
        prepared = pt2e.prepare_pt2e(captured, quantizer)
        for batch in calibration_batches:
            prepared(torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32)))
        converted = pt2e.convert_pt2e(prepared)
        program = torch.export.export(converted, inputs)
    logger.info("quantized %s with PT2E (%d calibration batches)", type(model).__name__, len(calibration_batches))
    return program


def save_program(program: Any, path: str | os.PathLike) -> Path:
    """``torch.export.save(program, path)``; returns ``path``."""
    path = Path(path)
    torch.export.save(program, str(path))
    return path
