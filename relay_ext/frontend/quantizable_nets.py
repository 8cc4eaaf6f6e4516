"""Float networks written for PyTorch eager-mode quantization.

These are our own definitions of ResNet-18/50, MobileNetV2, a small MLP and a tiny residual
network (torchvision cannot be installed beside the CPU torch wheel). They follow torchvision's
"quantizable" variants: a ``QuantStub``/``DeQuantStub`` pair around the network, one ReLU module per
use (so conv+bn+relu can be fused), and ``FloatFunctional`` for residual adds. Each network has a
``fuse_model()`` that fuses its conv+bn(+relu) and linear+relu groups in place.

:mod:`relay_ext.frontend.models` quantizes, calibrates and traces them.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.ao.nn.quantized import FloatFunctional
from torch.ao.quantization import DeQuantStub, QuantStub, fuse_modules


class ConvBN(nn.Sequential):
    """conv -> batch norm (-> ReLU), fusable into one quantized conv."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        groups: int = 1,
        relu: bool = True,
    ) -> None:
        layers: list[nn.Module] = [
            nn.Conv2d(
                in_channels,
                out_channels,
                kernel_size,
                stride=stride,
                padding=(kernel_size - 1) // 2,
                groups=groups,
                bias=False,
            ),
            nn.BatchNorm2d(out_channels),
        ]
        if relu:
            layers.append(nn.ReLU())
        super().__init__(*layers)

    def fuse(self) -> None:
        fuse_modules(self, [[str(i) for i in range(len(self))]], inplace=True)


def _fuse_children(module: nn.Module) -> None:
    for child in module.modules():
        if isinstance(child, ConvBN):
            child.fuse()


class BasicBlock(nn.Module):
    """ResNet-18/34 block: two 3x3 convs, residual add + ReLU."""

    expansion = 1

    def __init__(self, in_channels: int, channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = ConvBN(in_channels, channels, 3, stride=stride)
        self.conv2 = ConvBN(channels, channels, 3, relu=False)
        self.downsample = _downsample(in_channels, channels * self.expansion, stride)
        self.skip_add_relu = FloatFunctional()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.conv2(self.conv1(x))
        return self.skip_add_relu.add_relu(out, identity)


class Bottleneck(nn.Module):
    """ResNet-50 block: 1x1 reduce, 3x3, 1x1 expand, residual add + ReLU."""

    expansion = 4

    def __init__(self, in_channels: int, channels: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = ConvBN(in_channels, channels, 1)
        self.conv2 = ConvBN(channels, channels, 3, stride=stride)
        self.conv3 = ConvBN(channels, channels * self.expansion, 1, relu=False)
        self.downsample = _downsample(in_channels, channels * self.expansion, stride)
        self.skip_add_relu = FloatFunctional()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.conv3(self.conv2(self.conv1(x)))
        return self.skip_add_relu.add_relu(out, identity)


def _downsample(in_channels: int, out_channels: int, stride: int) -> ConvBN | None:
    if stride == 1 and in_channels == out_channels:
        return None
    return ConvBN(in_channels, out_channels, 1, stride=stride, relu=False)


class ResNet(nn.Module):
    """torchvision's ResNet layout (7x7 stem, max pool, four stages, global pool, fc)."""

    def __init__(
        self, block: type[BasicBlock] | type[Bottleneck], stage_depths: list[int], num_classes: int = 1000
    ) -> None:
        super().__init__()
        self.quant = QuantStub()
        self.stem = ConvBN(3, 64, 7, stride=2)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        stages: list[nn.Module] = []
        in_channels = 64
        for index, depth in enumerate(stage_depths):
            channels = 64 * 2**index
            stride = 1 if index == 0 else 2
            blocks = []
            for block_index in range(depth):
                blocks.append(block(in_channels, channels, stride if block_index == 0 else 1))
                in_channels = channels * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(in_channels, num_classes)
        self.dequant = DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.stem(self.quant(x)))
        x = self.avgpool(self.stages(x))
        return self.dequant(self.fc(torch.flatten(x, 1)))

    def fuse_model(self) -> None:
        _fuse_children(self)


def resnet18(num_classes: int = 1000) -> ResNet:
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes)


def resnet50(num_classes: int = 1000) -> ResNet:
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 project, residual add when shapes allow."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = in_channels * expand_ratio
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBN(in_channels, hidden, 1))
        layers += [
            ConvBN(hidden, hidden, 3, stride=stride, groups=hidden),
            ConvBN(hidden, out_channels, 1, relu=False),
        ]
        self.conv = nn.Sequential(*layers)
        # Only blocks that add get a FloatFunctional: an unused one has no calibrated scale.
        self.skip_add = FloatFunctional() if stride == 1 and in_channels == out_channels else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.skip_add is not None:
            return self.skip_add.add(x, self.conv(x))
        return self.conv(x)


# (expand ratio, output channels, repeats, first stride), as in the MobileNetV2 paper, width 1.0.
_MOBILENET_V2_STAGES = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


class MobileNetV2(nn.Module):
    """MobileNetV2 (width 1.0) with ReLU in place of ReLU6, as torchvision's quantizable variant."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.quant = QuantStub()
        layers: list[nn.Module] = [ConvBN(3, 32, 3, stride=2)]
        in_channels = 32
        for expand_ratio, out_channels, repeats, stride in _MOBILENET_V2_STAGES:
            for index in range(repeats):
                layers.append(
                    InvertedResidual(in_channels, out_channels, stride if index == 0 else 1, expand_ratio)
                )
                in_channels = out_channels
        layers.append(ConvBN(in_channels, 1280, 1))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.classifier = nn.Linear(1280, num_classes)
        self.dequant = DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(self.quant(x)))
        return self.dequant(self.classifier(torch.flatten(x, 1)))

    def fuse_model(self) -> None:
        _fuse_children(self)


class MLP(nn.Module):
    """Three fully connected layers on a feature vector; linear+ReLU pairs are fused."""

    def __init__(self, in_features: int = 256, hidden: int = 512, num_classes: int = 10) -> None:
        super().__init__()
        self.quant = QuantStub()
        self.fc1 = nn.Linear(in_features, hidden)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(hidden, hidden // 2)
        self.relu2 = nn.ReLU()
        self.fc3 = nn.Linear(hidden // 2, num_classes)
        self.dequant = DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu1(self.fc1(self.quant(x)))
        x = self.relu2(self.fc2(x))
        return self.dequant(self.fc3(x))

    def fuse_model(self) -> None:
        fuse_modules(self, [["fc1", "relu1"], ["fc2", "relu2"]], inplace=True)


class TinyResNet(nn.Module):
    """Three 3x3 convs with one residual add + ReLU, global pool and a linear: a tiny tuning target."""

    def __init__(self, channels: int = 8, num_classes: int = 10) -> None:
        super().__init__()
        self.quant = QuantStub()
        self.stem = ConvBN(3, channels, 3)
        self.conv1 = ConvBN(channels, channels, 3)
        self.conv2 = ConvBN(channels, channels, 3, relu=False)
        self.skip_add_relu = FloatFunctional()
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(channels, num_classes)
        self.dequant = DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(self.quant(x))
        x = self.skip_add_relu.add_relu(self.conv2(self.conv1(x)), x)
        x = self.avgpool(x)
        return self.dequant(self.fc(torch.flatten(x, 1)))

    def fuse_model(self) -> None:
        _fuse_children(self)
