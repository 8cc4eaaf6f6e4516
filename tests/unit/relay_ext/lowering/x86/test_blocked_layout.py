"""One blocked layout along a quantized CNN: no layout_transform kernel between two convs."""

import numpy as np
import pytest
import torch
from tvm.target import Target

from relay_ext.frontend import models
from relay_ext.lowering.x86 import blocked_layout
from relay_ext.measure.run import run_module
from relay_ext.report.layout_transforms import layout_transforms_of_module
from tests.quantized_test_nets import MobileNetV2Style, ResidualConvNet, fx_quantized_torchscript
from amx_reference import AMX  # as the build keeps it
from conftest import AVX2
from helpers import VNNI

AMX_COPIES = ("the AMX 3x3 convs read 64-channel input blocks and every AMX conv writes 16-channel "
              "output blocks (1x1 convs read 16 and repack inside): a copy before each AMX 3x3 conv "
              "remains (docs/cpu.md)")


def _loaded(build, directory, image_size=16) -> models.LoadedModel:
    module, shape = fx_quantized_torchscript(image_size, build=build)
    path = directory / "net.pt"
    torch.jit.save(module, str(path))
    return models.from_torchscript(path, {"input": shape})


@pytest.fixture(scope="module")
def mobilenet_block(tmp_path_factory) -> models.LoadedModel:
    """A MobileNetV2 inverted residual (16 channels, 64 in the depthwise conv), int8."""
    return _loaded(lambda: MobileNetV2Style(channels=16), tmp_path_factory.mktemp("mobilenet"))


@pytest.fixture(scope="module")
def mobilenet_24_channels(tmp_path_factory) -> models.LoadedModel:
    """The same block of 24 channels: TVM's x86 legalization pads the stem's and the projection's
    output channels to 32 and slices them back to 24 after the conv."""
    return _loaded(lambda: MobileNetV2Style(channels=24), tmp_path_factory.mktemp("mobilenet24"))


@pytest.fixture(scope="module")
def resnet_block(tmp_path_factory) -> models.LoadedModel:
    """A ResNet basic block of 64 channels (AMX-eligible 3x3 convs) and a strided conv, int8."""
    return _loaded(lambda: ResidualConvNet(channels=64), tmp_path_factory.mktemp("resnet"))


def test_depthwise_blocks_follow_the_int8_convs():
    assert blocked_layout.depthwise_block(144, "int16") == 16
    assert blocked_layout.depthwise_block(144, "uint8") == 16
    assert blocked_layout.depthwise_block(24, "int16") is None  # TOPI's choice
    assert blocked_layout.depthwise_block(144, "float32") is None  # float models unchanged


@pytest.mark.parametrize("target", [AVX2, VNNI, AMX])
def test_a_mobilenet_v2_block_has_no_copy_between_convs(mobilenet_block, target):
    loaded = mobilenet_block
    count = layout_transforms_of_module(loaded.mod, loaded.params, Target(target))
    assert count.between_convs == 0, count.line()
    assert count.at_input == 1


@pytest.mark.parametrize("target", [AVX2, VNNI, AMX])
def test_padded_output_channels_need_no_copy_between_convs(mobilenet_24_channels, target):
    """The 24 channels stay padded to 32 up to the next conv (relay_ext.lowering.padded_channels):
    no slice in the flat layout and re-blocking by 8 or 12 in between."""
    loaded = mobilenet_24_channels
    count = layout_transforms_of_module(loaded.mod, loaded.params, Target(target))
    assert count.between_convs == 0, count.line()


@pytest.mark.parametrize("target", [AVX2, VNNI, pytest.param(
    AMX, marks=pytest.mark.xfail(strict=True, reason=AMX_COPIES))])
def test_a_resnet_block_has_no_copy_between_convs(resnet_block, target):
    loaded = resnet_block
    count = layout_transforms_of_module(loaded.mod, loaded.params, Target(target))
    assert count.between_convs == 0, count.line()


def test_the_depthwise_block_leaves_outputs_unchanged(mobilenet_block, monkeypatch):
    from relay_ext.build import compile  # pylint: disable=redefined-builtin

    loaded = mobilenet_block
    blocked = run_module(compile(loaded, target=AVX2, schedule="default").lib, loaded.inputs)[0]
    monkeypatch.setattr(blocked_layout, "depthwise_block", lambda channels, dtype: None)
    before = compile(loaded, target=AVX2, schedule="default")
    count = layout_transforms_of_module(loaded.mod, loaded.params, Target(AVX2))
    assert count.between_convs > 0  # TOPI's own blocks: copies around each depthwise conv
    np.testing.assert_array_equal(run_module(before.lib, loaded.inputs)[0], blocked)


# The built-ins at 224x224 whose copies between convs remain: the AMX layout and, without VNNI,
# MobileNetV2's 24-channel stage (above).
_REMAINING = {("resnet18", AMX): AMX_COPIES, ("resnet50", AMX): AMX_COPIES}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet_v2"])
@pytest.mark.parametrize("target", [AVX2, VNNI, AMX])
def test_builtin_models_at_224_have_no_copy_between_convs(name, target, request):
    if (name, target) in _REMAINING:
        request.applymarker(pytest.mark.xfail(strict=True, reason=_REMAINING[(name, target)]))
    loaded = models.load(name, image_size=224)
    count = layout_transforms_of_module(loaded.mod, loaded.params, Target(target))
    assert (count.at_input, count.at_output) == (1, 1)
    assert count.between_convs == 0, count.line()


@pytest.mark.slow
def test_on_amx_only_the_3x3_convs_inputs_are_copied_between_convs():
    """Every 1x1 conv reads the 16-channel blocks the convs write (repacked in its kernel): what
    remains between ResNet-50's convs is one zero-point pad + copy before each of its 16 3x3
    convs (the pad runs there on every target)."""
    loaded = models.load("resnet50", image_size=224)
    count = layout_transforms_of_module(loaded.mod, loaded.params, Target(AMX))
    between = [placed for placed in count.tasks if placed.where == "between convs"]
    assert sum(placed.runs for placed in between) == count.between_convs == 16, count.line()
    assert all(placed.task.startswith("fused_nn_pad_layout_transform") for placed in between)
