"""Small networks written for the import tests, and the two ways users quantize them.

* :class:`ResidualConvNet` and :class:`SmallMLP`: float networks exported to ONNX and quantized
  QDQ with ONNX Runtime (:func:`qdq_onnx`).
* :class:`MobileNetV2Style` (and :class:`ResidualConvNet`): quantized with PT2E, torch.export and
  torchao (:func:`pt2e_program`), and with FX graph mode for the same network's TorchScript.
* :class:`SwishEfficientNet`: EfficientNet-B0 as a third party writes it (swish as
  ``x * sigmoid(x)``, squeeze-excitation, batch norms as modules of their own), for ONNX Runtime's
  QDQ quantization (:func:`qdq_onnx`).
* :class:`EfficientNetStyle`: quantized with PyTorch's FX graph mode (:func:`fx_quantized_torchscript`)
  the way efficientnet-pytorch's EfficientNet-B0 is: its convs pad "same" in their own
  ``forward`` (``Conv2dStaticSamePadding``), so FX sees functional convs and leaves the batch
  norms after them unfused (``quantized::batch_norm2d``, ``quantized::batch_norm2d_relu``); a
  depthwise conv, hardswish and a squeeze-excitation block (pool, two 1x1 convs, sigmoid, mul).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import tvm
from torch import nn
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

from relay_ext.frontend import models
from relay_ext.report.accuracy import step_error
from relay_ext.frontend import eager_quantization, onnx_export
from relay_ext.measure.run import run_module

CALIBRATION_BATCHES = 4


class ResidualConvNet(nn.Module):
    """conv-bn-relu, conv-bn, residual add + relu, strided conv, global pool, linear."""

    def __init__(self, channels: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.down = nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1)
        self.fc = nn.Linear(2 * channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(x + self.bn2(self.conv2(x)))
        x = torch.relu(self.down(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class SmallMLP(nn.Module):
    """Three linear layers with ReLUs (MatMul/Gemm in ONNX)."""

    def __init__(self, features: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(features, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class SamePadConv2d(nn.Conv2d):
    """efficientnet-pytorch's ``Conv2dStaticSamePadding``: pad, then the functional conv."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, groups: int = 1):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, groups=groups, bias=False)
        extra = kernel_size - 1
        self.pad = nn.ZeroPad2d((extra // 2, extra - extra // 2, extra // 2, extra - extra // 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(self.pad(x), self.weight, self.bias, self.stride, (0, 0), self.dilation, self.groups)


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, reduced: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, reduced, 1)
        self.relu = nn.ReLU()
        self.expand = nn.Conv2d(reduced, channels, 1)
        self.gate = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.expand(self.relu(self.reduce(self.pool(x)))))


class EfficientNetStyle(nn.Module):
    """Stem (same-pad conv, bn, hardswish), an inverted-residual block (depthwise same-pad conv,
    bn, hardswish, squeeze-excitation, 1x1 projection with its bn, residual add), a head (same-pad
    1x1 conv, bn, relu), global pool and a linear classifier."""

    CONVS = 6  # stem, depthwise, SE reduce, SE expand, projection, head

    def __init__(self, channels: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = SamePadConv2d(3, channels, 3, stride=2)
        self.stem_bn = nn.BatchNorm2d(channels)
        self.stem_act = nn.Hardswish()
        self.depthwise = SamePadConv2d(channels, channels, 3, groups=channels)
        self.depthwise_bn = nn.BatchNorm2d(channels)
        self.depthwise_act = nn.Hardswish()
        self.se = SqueezeExcite(channels, channels // 4)
        self.project = nn.Conv2d(channels, channels, 1, bias=False)
        self.project_bn = nn.BatchNorm2d(channels)
        self.head = SamePadConv2d(channels, 2 * channels, 1)
        self.head_bn = nn.BatchNorm2d(2 * channels)
        self.head_act = nn.ReLU()
        self.classifier = nn.Linear(2 * channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem_act(self.stem_bn(self.stem(x)))
        y = self.depthwise_act(self.depthwise_bn(self.depthwise(x)))
        y = self.project_bn(self.project(self.se(y)))
        x = self.head_act(self.head_bn(self.head(x + y)))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Swish(nn.Module):
    """``x * sigmoid(x)`` written out, as EfficientNet code written before ``nn.SiLU`` does (ONNX:
    Sigmoid and Mul)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


class MBConv(nn.Module):
    """EfficientNet's block as a third party writes it: 1x1 expansion conv, BatchNorm2d, swish (no
    expansion when ``expand == 1``), depthwise 3x3 conv, BatchNorm2d, swish, squeeze-excitation
    (pool, 1x1 conv, swish, 1x1 conv, sigmoid, mul), 1x1 projection conv, BatchNorm2d, residual
    add when the shape allows. The batch norms are modules of their own (not fused by the
    author); the exporter and ONNX Runtime's pre-processing fold them as they would a user's."""

    def __init__(self, channels_in: int, channels_out: int, expand: int, stride: int) -> None:
        super().__init__()
        hidden = channels_in * expand
        self.expand = None if expand == 1 else nn.Sequential(
            nn.Conv2d(channels_in, hidden, 1, bias=False), nn.BatchNorm2d(hidden), Swish())
        self.depthwise = nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False)
        self.depthwise_bn, self.act = nn.BatchNorm2d(hidden), Swish()
        reduced = max(1, channels_in // 4)
        self.se_reduce, self.se_expand = nn.Conv2d(hidden, reduced, 1), nn.Conv2d(reduced, hidden, 1)
        self.project = nn.Conv2d(hidden, channels_out, 1, bias=False)
        self.project_bn = nn.BatchNorm2d(channels_out)
        self.residual = stride == 1 and channels_in == channels_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x if self.expand is None else self.expand(x)
        y = self.act(self.depthwise_bn(self.depthwise(y)))
        gate = self.se_expand(self.act(self.se_reduce(F.adaptive_avg_pool2d(y, 1))))
        y = self.project_bn(self.project(y * torch.sigmoid(gate)))
        return x + y if self.residual else y


class SwishEfficientNet(nn.Module):
    """A small EfficientNet-B0 as a third party writes it: stem conv-bn-swish (stride
    2), an MBConv without expansion and with its residual add, an MBConv with expansion 4 and
    stride 2, a 1x1 head conv-bn-swish, global average pool, linear classifier."""

    def __init__(self, channels: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, 2, 1, bias=False),
                                  nn.BatchNorm2d(channels), Swish())
        self.blocks = nn.Sequential(MBConv(channels, channels, 1, 1),
                                    MBConv(channels, 2 * channels, 4, 2))
        self.head = nn.Sequential(nn.Conv2d(2 * channels, 4 * channels, 1, bias=False),
                                  nn.BatchNorm2d(4 * channels), Swish())
        self.classifier = nn.Linear(4 * channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.blocks(self.stem(x)))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion conv-bn-relu, 3x3 depthwise conv-bn-relu, 1x1 linear
    projection conv-bn, and the residual add when the shape allows it."""

    def __init__(self, channels_in: int, channels_out: int, stride: int, expansion: int = 4) -> None:
        super().__init__()
        hidden = channels_in * expansion
        self.residual = stride == 1 and channels_in == channels_out
        self.layers = nn.Sequential(
            nn.Conv2d(channels_in, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU(),
            nn.Conv2d(hidden, hidden, 3, stride=stride, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.ReLU(),
            nn.Conv2d(hidden, channels_out, 1, bias=False), nn.BatchNorm2d(channels_out),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.layers(x) if self.residual else self.layers(x)


class MobileNetV2Style(nn.Module):
    """A small MobileNetV2: stem conv-bn-relu (stride 2), an inverted-residual block with its
    residual add, a 1x1 head conv-bn-relu, global average pool, linear classifier. ReLU as in
    torchvision's quantizable MobileNetV2 (and quantfuse's built-in one). One block, to keep the
    tuning tests' task count low."""

    CONVS = 5  # stem, expand, depthwise, project, head

    def __init__(self, channels: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU())
        self.blocks = InvertedResidual(channels, channels, 1)
        self.head = nn.Sequential(nn.Conv2d(channels, 2 * channels, 1, bias=False),
                                  nn.BatchNorm2d(2 * channels), nn.ReLU())
        self.classifier = nn.Linear(2 * channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.blocks(self.stem(x)))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _calibration(shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    generator = np.random.default_rng(seed)
    return [generator.standard_normal(shape, dtype=np.float32) for _ in range(CALIBRATION_BATCHES)]


def fx_quantized_torchscript(
    image_size: int = 16, seed: int = 0, build=EfficientNetStyle
) -> tuple[torch.jit.ScriptModule, tuple[int, ...]]:
    """``build()`` (default :class:`EfficientNetStyle`) quantized with FX graph mode (x86 qconfig
    mapping, calibration on random batches) and traced; returns it with its input shape."""
    shape = (1, 3, image_size, image_size)
    model = eager_quantization.seeded_float_model(build, seed)
    example = torch.from_numpy(_calibration(shape, seed + 1)[0])
    with (eager_quantization.quantization_engine("x86"),
          eager_quantization.quiet_torch_quantization_warnings()):
        prepared = prepare_fx(model, get_default_qconfig_mapping("x86"), (example,))
        with torch.no_grad():
            for batch in _calibration(shape, seed + 2):
                prepared(torch.from_numpy(batch))
        quantized = convert_fx(prepared)
        with torch.no_grad():
            traced = torch.jit.trace(quantized, example, check_trace=False)
    return traced.eval(), shape


def qdq_onnx(build, shape: tuple[int, ...], path: Path, seed: int = 0, per_channel: bool = True) -> Path:
    """The float network ``build()`` (seeded weights) exported to ONNX and quantized QDQ by ONNX
    Runtime, calibrated on random batches of ``shape``."""
    model = eager_quantization.seeded_float_model(build, seed)
    calibration = _calibration(shape, seed + 1)
    float_path = onnx_export.export_float_onnx(model, calibration[0], path.with_suffix(".float.onnx"))
    return onnx_export.quantize_qdq(float_path, path, calibration, per_channel=per_channel)


def pt2e_program(build, shape: tuple[int, ...], seed: int = 0, dialect: str = "x86",
                 quantize_matmul: bool = False):
    """The float network ``build()`` (seeded weights, batch norms with random statistics) quantized
    with PT2E (torch.export, torchao's X86InductorQuantizer, or the XNNPACK-style quantizer with
    ``dialect="xnnpack"``) on random batches of ``shape``: an ExportedProgram, as
    :func:`relay_ext.frontend.pt2e_export.quantize_pt2e` makes it."""
    from relay_ext.frontend import pt2e_export

    model = eager_quantization.seeded_float_model(build, seed)
    calibration = _calibration(shape, seed + 1)
    return pt2e_export.quantize_pt2e(model, calibration[0], calibration, dialect=dialect,
                                     quantize_matmul=quantize_matmul)


def worst_steps(model: models.LoadedModel, lib, extra_inputs: int = 3, seed: int = 7) -> float:
    """Largest step error of the compiled ``lib`` against the model's reference runtime, over the
    example input and ``extra_inputs`` random normal ones."""
    generator = np.random.default_rng(seed)
    inputs = [model.example_input] + [
        generator.standard_normal(model.input_shape, dtype=np.float32) for _ in range(extra_inputs)
    ]
    return max(
        step_error(run_module(lib, {model.input_name: data})[0], model.run_reference(data), model.output_scale).max_steps
        for data in inputs
    )


def conv_block_reads(tasks) -> list[tuple[str, set[str]]]:
    """For every conv compute block in the tasks' TIR: (task name, dtypes of the buffers it reads)."""
    found: list[tuple[str, set[str]]] = []
    for task in tasks:
        def visit(node, task_name=task.task_name) -> None:
            if isinstance(node, tvm.tir.Block) and "conv" in node.name_hint.lower():
                found.append((task_name, {str(region.buffer.dtype) for region in node.reads}))

        tvm.tir.stmt_functor.post_order_visit(task.dispatched[0]["main"].body, visit)
    return found
