"""PyTorch float models to quantized ONNX (QDQ or QOperator), the way an ONNX Runtime user
quantizes them.

    path = export_quantized("resnet50", "/tmp/resnet50_int8.onnx", image_size=224)
    path = export_quantized("resnet18", "/tmp/resnet18_qop.onnx", quant_format=QOPERATOR)

:func:`export_quantized` takes one of quantfuse's built-in models with the weights
:func:`relay_ext.frontend.models.load` gives it (same seed), exports the float network with PyTorch's
TorchScript-based ONNX exporter (batch norms folded into the convs), runs ONNX Runtime's
pre-processing (shape inference, graph optimization) and quantizes it with ONNX Runtime's
``quantize_static`` in QDQ format: uint8 activations, int8 weights (per channel by default),
MinMax calibration on the random batches ``load`` calibrates PyTorch's model with. So a benchmark
can time ONNX Runtime's int8 execution of the same network, and TVM can import the ONNX file
(:func:`relay_ext.frontend.onnx_import.from_onnx`). ``quant_format=QOPERATOR`` writes the same
quantization in ONNX Runtime's QOperator format instead (``QLinearConv``, ``QLinearAdd``,
``QGemm``, ...), as model zoos ship it.

:func:`export_float_onnx` and :func:`quantize_qdq` are the two steps, for any ``nn.Module``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from relay_ext.frontend import eager_quantization, models
from relay_ext.frontend.optional_deps import require_onnx, require_onnxruntime_quantization

logger = logging.getLogger(__name__)

DEFAULT_OPSET = 13  # the first with per-axis QuantizeLinear/DequantizeLinear; TVM 0.19 reads it
QDQ, QOPERATOR = "QDQ", "QOperator"  # ONNX Runtime's QuantFormat names


def export_float_onnx(
    model: nn.Module,
    example_input: np.ndarray,
    path: str | os.PathLike,
    input_name: str = models.DEFAULT_INPUT_NAME,
    opset: int = DEFAULT_OPSET,
) -> Path:
    """Export a float ``nn.Module`` in eval mode to ONNX with a fixed input shape (that of
    ``example_input``), through PyTorch's TorchScript-based exporter (``dynamo=False``: no
    onnxscript needed), one input named ``input_name`` and one output named ``output``."""
    require_onnx()
    path = Path(path)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)  # "legacy TorchScript-based ONNX export"
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        torch.onnx.export(
            model.eval(),
            (torch.from_numpy(np.ascontiguousarray(example_input)),),
            str(path),
            input_names=[input_name],
            output_names=["output"],
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
    return path


def quantize_qdq(
    float_path: str | os.PathLike,
    path: str | os.PathLike,
    calibration_batches: Sequence[np.ndarray],
    input_name: str = models.DEFAULT_INPUT_NAME,
    per_channel: bool = True,
    quant_format: str = QDQ,
    reduce_range: bool = False,
) -> Path:
    """ONNX Runtime's pre-processing and static quantization of a float ONNX model, in QDQ format
    (``quant_format`` :data:`QOPERATOR`: QOperator format): uint8 activations, int8 weights (per
    output channel when ``per_channel``; 7-bit when ``reduce_range``, which keeps ONNX Runtime's
    int8 kernels from saturating on CPUs without VNNI), MinMax calibration on
    ``calibration_batches`` (each of the model's input shape)."""
    quantization = require_onnxruntime_quantization()
    if quant_format not in (QDQ, QOPERATOR):
        raise ValueError(f"quant_format must be {QDQ!r} or {QOPERATOR!r}, got {quant_format!r}")
    path = Path(path)
    batches = [{input_name: np.ascontiguousarray(batch, dtype=np.float32)} for batch in calibration_batches]
    if not batches:
        raise ValueError("quantize_qdq needs at least one calibration batch")

    class Batches(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self._batches = iter(batches)

        def get_next(self) -> dict | None:
            return next(self._batches, None)

    with tempfile.TemporaryDirectory() as scratch, _quiet_onnxruntime_quantization():
        preprocessed = Path(scratch) / "preprocessed.onnx"
        quantization.quant_pre_process(os.fspath(float_path), str(preprocessed))
        quantization.quantize_static(
            str(preprocessed),
            str(path),
            Batches(),
            quant_format=getattr(quantization.QuantFormat, quant_format),
            activation_type=quantization.QuantType.QUInt8,
            weight_type=quantization.QuantType.QInt8,
            per_channel=per_channel,
            reduce_range=reduce_range,
            calibrate_method=quantization.CalibrationMethod.MinMax,
        )
    logger.info("quantized %s to %s (%s, %d calibration batches)", float_path, path, quant_format, len(batches))
    return path


def export_quantized(
    name: str,
    path: str | os.PathLike,
    batch_size: int = 1,
    image_size: int = 224,
    seed: int = models.DEFAULT_SEED,
    per_channel: bool = True,
    quant_format: str = QDQ,
) -> Path:
    """Export the built-in model ``name`` (weights of :func:`relay_ext.frontend.models.load` with the same
    ``seed``) to ONNX and quantize it with ONNX Runtime in ``quant_format`` (QDQ by default, see
    the module doc), calibrated on the same random samples as ``load``'s PyTorch model. Returns
    ``path``."""
    spec = models._model_spec(name)  # pylint: disable=protected-access
    models._check_load_arguments(spec, batch_size, image_size, "NCHW")  # pylint: disable=protected-access
    input_shape = spec.input_shape(batch_size, image_size)
    float_model = eager_quantization.seeded_float_model(spec.build, seed)
    samples = torch.cat(eager_quantization.random_batches(input_shape, models.CALIBRATION_BATCHES,
                                                         seed + 1))
    calibration = [batch.numpy() for batch in samples.split(batch_size) if len(batch) == batch_size]
    path = Path(path)
    with tempfile.TemporaryDirectory() as scratch:
        float_path = export_float_onnx(float_model, calibration[0], Path(scratch) / f"{name}_float.onnx")
        return quantize_qdq(float_path, path, calibration, per_channel=per_channel,
                            quant_format=quant_format)


@contextlib.contextmanager
def _quiet_onnxruntime_quantization() -> Iterator[None]:
    """ONNX Runtime's quantization tools log warnings and progress through the root logger; keep
    them out of the caller's output while it runs."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        root.setLevel(level)
