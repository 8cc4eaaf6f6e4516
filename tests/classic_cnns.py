"""Seven classic CNN families as their papers define them, float, for the PT2E import tests.

MobileNetV2, RegNetX-400MF, MobileNetV3-large, EfficientNet-B0, MnasNet 1.0 (B1, as torchvision's
``mnasnet1_0``), ShuffleNetV2 x1.0 and GoogLeNet: our own definitions (torchvision cannot be
installed beside the CPU torch wheel), with random weights. ShuffleNetV2 and GoogLeNet follow
torchvision's definitions module for module (GoogLeNet's 3x3 convs where the paper has 5x5, its
``F.relu`` after each batch norm, ShuffleNetV2's ``chunk`` and channel shuffle), because what
X86InductorQuantizer quantizes depends on them: after a functional ``F.relu`` it leaves the conv's
output float into the ``cat``, where after an ``nn.ReLU`` module it quantizes it.

Every family takes ``width`` (channel multiplier, rounded to multiples of 8 as the papers' code
does) and ``depth`` (blocks per stage multiplier, ``ceil(depth * repeats)`` as EfficientNet's
compound scaling, at least two): the tests build them at ``width=0.25, depth=0``: every stage with
its first two blocks (the first changes stride or width, the second is the stride-1 block with its
residual add or channel split; later blocks repeat the second's layer shapes; ShuffleNetV2 keeps
three, see there), every kernel, activation, squeeze-excitation, pooling and classifier kept, so
that a whole flow stays short on 2 cores. ``FAMILIES`` maps the test names to them.
Dropout and in-place activations are where torchvision has them (dropout is the identity in an
exported inference program; in place it exports as ``aten.dropout_``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn


def divisible(value: float, divisor: int = 8) -> int:
    """``value`` rounded to a multiple of ``divisor``, never 10% below it (the papers' code)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def repeats(count: int, depth: float) -> int:
    """Blocks kept of a stage of ``count``: ``ceil(depth * count)``, but at least two (or all when
    fewer): the first block changes the stride or width, the second is the stride-1 block with its
    residual add or channel split, and blocks 3 .. n repeat the second's layer shapes."""
    return min(count, max(2, math.ceil(count * depth)))


class ConvBNAct(nn.Sequential):
    """conv (no bias, "same" padding) -> batch norm -> activation (none when ``act`` is None)."""

    def __init__(self, cin: int, cout: int, kernel: int = 1, stride: int = 1, groups: int = 1,
                 act: Callable[[], nn.Module] | None = nn.ReLU) -> None:
        layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        super().__init__(*layers, *([act(inplace=True)] if act is not None else []))  # as torchvision's


class SqueezeExcite(nn.Module):
    """pool -> 1x1 reduce -> act -> 1x1 expand -> gate -> scale the input."""

    def __init__(self, channels: int, squeeze: int, act: Callable[[], nn.Module], gate: Callable[[], nn.Module]):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce, self.act = nn.Conv2d(channels, squeeze, 1), act()
        self.expand, self.gate = nn.Conv2d(squeeze, channels, 1), gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.expand(self.act(self.reduce(self.pool(x)))))


class InvertedResidual(nn.Module):
    """MobileNetV2 / MnasNet / MobileNetV3 / EfficientNet's block: 1x1 expansion (when the ratio is
    not 1), k x k depthwise, optional squeeze-excitation, 1x1 linear projection, residual add."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, hidden: int,
                 act: Callable[[], nn.Module], se: nn.Module | None = None) -> None:
        super().__init__()
        layers: list[nn.Module] = [] if hidden == cin else [ConvBNAct(cin, hidden, 1, act=act)]
        layers.append(ConvBNAct(hidden, hidden, kernel, stride, groups=hidden, act=act))
        if se is not None:
            layers.append(se)
        layers.append(ConvBNAct(hidden, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x) if self.residual else self.block(x)


class _Classified(nn.Module):
    """features -> global average pool -> flatten -> classifier."""

    features: nn.Module
    classifier: nn.Module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class MobileNetV2(_Classified):
    """Sandler et al. 2018, Table 2: (expansion, channels, repeats, stride) per stage, ReLU6."""

    STAGES = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
              (6, 320, 1, 1)]

    def __init__(self, width: float = 1.0, depth: float = 1.0, classes: int = 1000) -> None:
        super().__init__()
        cin = divisible(32 * width)
        layers: list[nn.Module] = [ConvBNAct(3, cin, 3, 2, act=nn.ReLU6)]
        for expansion, channels, count, stride in self.STAGES:
            cout = divisible(channels * width)
            for index in range(repeats(count, depth)):
                layers.append(InvertedResidual(cin, cout, 3, stride if index == 0 else 1, cin * expansion, nn.ReLU6))
                cin = cout
        last = divisible(1280 * max(1.0, width))
        self.features = nn.Sequential(*layers, ConvBNAct(cin, last, 1, act=nn.ReLU6))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))


class MnasNet(_Classified):
    """Tan et al. 2019, MnasNet-A1 without squeeze-excitation (torchvision's ``mnasnet1_0``, B1):
    stem, a separable conv, (expansion, kernel, channels, repeats, stride) stages, ReLU; the pool
    is a ``mean`` over the spatial dims."""

    STAGES = [(3, 3, 24, 3, 2), (3, 5, 40, 3, 2), (6, 5, 80, 3, 2), (6, 3, 96, 2, 1), (6, 5, 192, 4, 2),
              (6, 3, 320, 1, 1)]

    def __init__(self, width: float = 1.0, depth: float = 1.0, classes: int = 1000) -> None:
        super().__init__()
        stem, separable = divisible(32 * width), divisible(16 * width)
        layers: list[nn.Module] = [ConvBNAct(3, stem, 3, 2), ConvBNAct(stem, stem, 3, groups=stem),
                                   ConvBNAct(stem, separable, 1, act=None)]
        cin = separable
        for expansion, kernel, channels, count, stride in self.STAGES:
            cout = divisible(channels * width)
            for index in range(repeats(count, depth)):
                layers.append(InvertedResidual(cin, cout, kernel, stride if index == 0 else 1, cin * expansion, nn.ReLU))
                cin = cout
        self.features = nn.Sequential(*layers, ConvBNAct(cin, 1280, 1))
        self.classifier = nn.Sequential(nn.Dropout(0.2, inplace=True), nn.Linear(1280, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean([2, 3]))


class MobileNetV3Large(_Classified):
    """Howard et al. 2019, Table 1: (kernel, expansion size, channels, SE, hardswish, stride) per
    block, SE gated by hardsigmoid, a 1x1 conv to 960, then linear-hardswish-dropout-linear."""

    BLOCKS = [(3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2), (3, 72, 24, False, False, 1),
              (5, 72, 40, True, False, 2), (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
              (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1), (3, 184, 80, False, True, 1),
              (3, 184, 80, False, True, 1), (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
              (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1), (5, 960, 160, True, True, 1)]

    def __init__(self, width: float = 1.0, depth: float = 1.0, classes: int = 1000) -> None:
        super().__init__()
        cin = divisible(16 * width)
        layers: list[nn.Module] = [ConvBNAct(3, cin, 3, 2, act=nn.Hardswish)]
        kept: dict[int, int] = {}  # a stage is the run of blocks of one output width
        for kernel, expanded, channels, se, hardswish, stride in self.BLOCKS:
            stage_size = sum(block[2] == channels for block in self.BLOCKS)
            kept[channels] = kept.get(channels, 0) + 1
            if kept[channels] > repeats(stage_size, depth):
                continue
            cout, hidden = divisible(channels * width), divisible(expanded * width)
            act = nn.Hardswish if hardswish else nn.ReLU
            gate = SqueezeExcite(hidden, divisible(hidden / 4), nn.ReLU, nn.Hardsigmoid) if se else None
            layers.append(InvertedResidual(cin, cout, kernel, stride, hidden, act, gate))
            cin = cout
        self.features = nn.Sequential(*layers, ConvBNAct(cin, 6 * cin, 1, act=nn.Hardswish))
        self.classifier = nn.Sequential(nn.Linear(6 * cin, 1280), nn.Hardswish(inplace=True), nn.Dropout(0.2, inplace=True),
                                        nn.Linear(1280, classes))


class EfficientNetB0(_Classified):
    """Tan & Le 2019, Table 1: MBConv (expansion, kernel, channels, repeats, stride) stages with
    squeeze-excitation (a quarter of the block's input width), SiLU (swish) everywhere."""

    STAGES = [(1, 3, 16, 1, 1), (6, 3, 24, 2, 2), (6, 5, 40, 2, 2), (6, 3, 80, 3, 2), (6, 5, 112, 3, 1),
              (6, 5, 192, 4, 2), (6, 3, 320, 1, 1)]

    def __init__(self, width: float = 1.0, depth: float = 1.0, classes: int = 1000) -> None:
        super().__init__()
        cin = divisible(32 * width)
        layers: list[nn.Module] = [ConvBNAct(3, cin, 3, 2, act=nn.SiLU)]
        for expansion, kernel, channels, count, stride in self.STAGES:
            cout = divisible(channels * width)
            for index in range(repeats(count, depth)):
                se = SqueezeExcite(cin * expansion, max(1, cin // 4), nn.SiLU, nn.Sigmoid)
                layers.append(InvertedResidual(cin, cout, kernel, stride if index == 0 else 1, cin * expansion,
                                               nn.SiLU, se))
                cin = cout
        last = divisible(1280 * max(1.0, width))
        self.features = nn.Sequential(*layers, ConvBNAct(cin, last, 1, act=nn.SiLU))
        self.classifier = nn.Sequential(nn.Dropout(0.2, inplace=True), nn.Linear(last, classes))


class RegNetX(_Classified):
    """Radosavovic et al. 2020, RegNetX-400MF (d=22, w0=24, wa=24.48, wm=2.54, g=16, b=1): the
    per-block widths of the linear rule quantized to ``w0 * wm^k``, grouped into stages; X blocks
    (1x1, 3x3 group conv, 1x1, residual add then ReLU, a 1x1 projection where the shape changes)."""

    def __init__(self, width: float = 1.0, depth: float = 1.0, classes: int = 1000,
                 d: int = 22, w0: float = 24, wa: float = 24.48, wm: float = 2.54, group: int = 16) -> None:
        super().__init__()
        steps = [round(math.log((w0 + wa * j) / w0, wm)) for j in range(d)]
        block_widths = [int(round(w0 * wm ** s / 8) * 8) for s in steps]
        stages = [(w, block_widths.count(w)) for w in sorted(set(block_widths))]
        stem = divisible(32 * width)
        layers: list[nn.Module] = [ConvBNAct(3, stem, 3, 2)]
        cin = stem
        for stage_width, count in stages:
            cout = divisible(stage_width * width)
            groups_width = min(group, cout)
            cout = max(groups_width, int(round(cout / groups_width) * groups_width))
            for index in range(repeats(count, depth)):
                layers.append(_XBlock(cin, cout, 2 if index == 0 else 1, groups_width))
                cin = cout
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(cin, classes)


class _XBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, group_width: int) -> None:
        super().__init__()
        self.body = nn.Sequential(ConvBNAct(cin, cout, 1), ConvBNAct(cout, cout, 3, stride, cout // group_width),
                                  ConvBNAct(cout, cout, 1, act=None))
        self.shortcut = ConvBNAct(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else None
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu((x if self.shortcut is None else self.shortcut(x)) + self.body(x))


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """torchvision's channel shuffle: view as (groups, channels per group), transpose, flatten."""
    batch, channels, height, width = x.size()
    x = x.view(batch, groups, channels // groups, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(batch, -1, height, width)


class ShuffleUnit(nn.Module):
    """torchvision's ShuffleNetV2 ``InvertedResidual``: stride 1 splits the channels with ``chunk``
    and concatenates the kept half with ``branch2`` of the other; stride 2 concatenates ``branch1``
    (3x3 depthwise, 1x1) and ``branch2`` (1x1, 3x3 depthwise, 1x1) of the whole input; then the
    channel shuffle."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        half = cout // 2
        self.stride = stride
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(cin, cin, 3, stride, 1, bias=False, groups=cin), nn.BatchNorm2d(cin),
                nn.Conv2d(cin, half, 1, 1, 0, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(cin if stride > 1 else half, half, 1, 1, 0, bias=False), nn.BatchNorm2d(half),
            nn.ReLU(inplace=True),
            nn.Conv2d(half, half, 3, stride, 1, bias=False, groups=half), nn.BatchNorm2d(half),
            nn.Conv2d(half, half, 1, 1, 0, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """Ma et al. 2018, 1x, as torchvision's ``shufflenet_v2_x1_0`` defines it: ``conv1`` (3x3, 24,
    stride 2) and a max pool, stages of 4, 8, 4 :class:`ShuffleUnit` (116, 232, 464 channels),
    ``conv5`` (1x1 to 1024), ``x.mean([2, 3])``, ``fc``. At least three units per stage are kept:
    from the third on, a unit's kept half is the previous unit's float, unquantized output."""

    def __init__(self, width: float = 1.0, depth: float = 1.0, classes: int = 1000) -> None:
        super().__init__()
        cin = 24
        self.conv1 = nn.Sequential(nn.Conv2d(3, cin, 3, 2, 1, bias=False), nn.BatchNorm2d(cin), nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        stages: list[nn.Module] = []
        for channels, count in ((116, 4), (232, 8), (464, 4)):
            cout = divisible(channels * width)
            kept = max(3, repeats(count, depth))  # the third unit takes a float half the second left
            units = [ShuffleUnit(cin, cout, 2)] + [ShuffleUnit(cout, cout, 1) for _ in range(kept - 1)]
            stages.append(nn.Sequential(*units))
            cin = cout
        self.stage2, self.stage3, self.stage4 = stages
        self.conv5 = nn.Sequential(nn.Conv2d(cin, 1024, 1, 1, 0, bias=False), nn.BatchNorm2d(1024), nn.ReLU(inplace=True))
        self.fc = nn.Linear(1024, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stage4(self.stage3(self.stage2(self.maxpool(self.conv1(x)))))
        return self.fc(self.conv5(x).mean([2, 3]))


class BasicConv2d(nn.Module):
    """torchvision's GoogLeNet conv: conv (no bias) -> batch norm (eps 0.001) -> ``F.relu`` in place."""

    def __init__(self, cin: int, cout: int, **kwargs: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.relu(self.bn(self.conv(x)), inplace=True)


class Inception(nn.Module):
    """torchvision's inception module: 1x1 | 1x1 -> 3x3 | 1x1 -> 3x3 (torchvision's, where the
    paper has 5x5) | 3x3 max pool (stride 1, ceil mode) -> 1x1, concatenated."""

    def __init__(self, cin: int, c1: int, r3: int, c3: int, r5: int, c5: int, pool: int) -> None:
        super().__init__()
        self.branch1 = BasicConv2d(cin, c1, kernel_size=1)
        self.branch2 = nn.Sequential(BasicConv2d(cin, r3, kernel_size=1), BasicConv2d(r3, c3, kernel_size=3, padding=1))
        self.branch3 = nn.Sequential(BasicConv2d(cin, r5, kernel_size=1), BasicConv2d(r5, c5, kernel_size=3, padding=1))
        self.branch4 = nn.Sequential(nn.MaxPool2d(kernel_size=3, stride=1, padding=1, ceil_mode=True),
                                     BasicConv2d(cin, pool, kernel_size=1))
        self.channels = c1 + c3 + c5 + pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class GoogLeNet(_Classified):
    """Szegedy et al. 2015, Table 1, as torchvision's ``googlenet`` defines it (``transform_input``
    off, no auxiliary classifiers: they run in training only): :class:`BasicConv2d` stem (7x7
    stride 2, 1x1, 3x3), max pools with ceil mode, :class:`Inception` modules 3a-3b, 4a-4e, 5a-5b,
    global average pool, flatten, dropout, linear."""

    STAGES = [[(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64)],
              [(192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64),
               (112, 144, 288, 32, 64, 64), (256, 160, 320, 32, 128, 128)],
              [(256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)]]

    def __init__(self, width: float = 1.0, depth: float = 1.0, classes: int = 1000) -> None:
        super().__init__()
        scaled = lambda c: divisible(c * width)  # noqa: E731
        layers: list[nn.Module] = [
            BasicConv2d(3, scaled(64), kernel_size=7, stride=2, padding=3), nn.MaxPool2d(3, stride=2, ceil_mode=True),
            BasicConv2d(scaled(64), scaled(64), kernel_size=1),
            BasicConv2d(scaled(64), scaled(192), kernel_size=3, padding=1), nn.MaxPool2d(3, stride=2, ceil_mode=True)]
        cin = scaled(192)
        for index, stage in enumerate(self.STAGES):
            if index:
                layers.append(nn.MaxPool2d(3 if index == 1 else 2, stride=2, ceil_mode=True))
            for config in stage[:repeats(len(stage), depth)]:
                layers.append(Inception(cin, *(scaled(c) for c in config)))
                cin = layers[-1].channels
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(cin, classes))


FAMILIES: dict[str, type[nn.Module]] = {
    "mobilenet_v2": MobileNetV2, "regnet_x_400mf": RegNetX, "mobilenet_v3_large": MobileNetV3Large,
    "efficientnet_b0": EfficientNetB0, "mnasnet1_0": MnasNet, "shufflenet_v2_x1_0": ShuffleNetV2,
    "googlenet": GoogLeNet,
}
