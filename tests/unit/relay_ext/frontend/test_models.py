"""relay_ext.frontend.models / relay_ext.report.accuracy: quantized models load (through
relay_ext.load_model), import to Relay, and agree with PyTorch within measured bounds (see
docs/models.md for the numbers and where they come from)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from torch import nn

import relay_ext
from relay_ext import accuracy
from relay_ext.frontend import models

# Largest distance from PyTorch, in output quantization steps, for TVM's stock import and
# default build (docs/models.md). The tiny model's 3 steps come from its integer average pool
# (TVM truncates, PyTorch rounds) amplified by the final linear; ResNet-18's from qnn.add's double
# rounding and conv requantization differences compounding over 20 layers.
STOCK_STEP_BOUND = {"tiny_resnet": 3.0, "mlp": 1.0, "resnet18": 3.0}
# With with_torch_rounding() only conv/dense requantization may still differ.
TORCH_ROUNDING_STEP_BOUND = 1.0
SMALL_IMAGE = 32
TOLERANCE = 1e-3  # steps are whole numbers up to float32 error


@pytest.fixture(scope="module")
def tiny() -> models.LoadedModel:
    return relay_ext.load_model("tiny_resnet", image_size=SMALL_IMAGE)


@pytest.fixture(scope="module")
def loaded(tiny: models.LoadedModel) -> dict[str, models.LoadedModel]:
    """Each registered model PyTorch quantizes, at a small size, loaded once for the whole file
    (tiny_bert, quantized by ONNX Runtime: test_transformers.py)."""
    others = [name for name in models.available_models()
              if name != tiny.name and not models.MODELS[name].through_onnx]
    return {tiny.name: tiny, **{name: relay_ext.load_model(name, image_size=SMALL_IMAGE)
                                  for name in others}}


@pytest.fixture(scope="module")
def tiny_tvm_output(tiny: models.LoadedModel) -> np.ndarray:
    """The tiny model's output from TVM's untuned build, built once."""
    return _tvm_output(tiny)


def _tvm_output(model: models.LoadedModel, mod: tvm.IRModule | None = None) -> np.ndarray:
    built = relay_ext.compile(model.mod if mod is None else mod, model.params, "llvm",
                              schedule="default", opt_level=2)
    return relay_ext.run_module(built, model.inputs)[0]


def _qnn_op_names(mod: tvm.IRModule) -> set[str]:
    names: set[str] = set()

    def visit(node: tvm.relay.Expr) -> None:
        if isinstance(node, tvm.relay.Call) and isinstance(node.op, tvm.ir.Op):
            names.add(node.op.name)

    tvm.relay.analysis.post_order_visit(mod["main"].body, visit)
    return {name for name in names if name.startswith("qnn.")}


# --- loading ------------------------------------------------------------------------------------


def test_registry_names_the_six_models() -> None:
    assert models.available_models() == ["mlp", "mobilenet_v2", "resnet18", "resnet50", "tiny_bert",
                                         "tiny_resnet"]
    assert set(models.MODELS) == set(models.available_models())


def test_every_model_loads_quantized(loaded: dict[str, models.LoadedModel]) -> None:
    for name, model in loaded.items():
        expected_shape = (1, 256) if name == "mlp" else (1, 3, SMALL_IMAGE, SMALL_IMAGE)
        assert model.input_shape == expected_shape, name
        assert model.example_input.shape == expected_shape and model.example_input.dtype == np.float32
        assert isinstance(model.torchscript, torch.jit.ScriptModule)
        assert model.quantized and model.output_scale is not None and model.output_scale > 0, name
        assert model.mod["main"].params[0].name_hint == model.input_name == "input"
        ops = _qnn_op_names(model.mod)
        assert {"qnn.quantize", "qnn.dequantize", "qnn.requantize", "qnn.dense"} <= ops, name
        if name != "mlp":
            assert "qnn.conv2d" in ops, name
        assert model.layout == "NCHW" and all(
            layout == "NCHW" for _, layout, _ in models.conv_layouts(model.mod)
        ), name


def test_output_scale_is_that_of_the_torch_output(tiny: models.LoadedModel) -> None:
    torch_output = accuracy.run_torchscript(tiny.torchscript, tiny.example_input)
    steps = torch_output / tiny.output_scale
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)


def test_load_is_deterministic(tiny: models.LoadedModel) -> None:
    again = relay_ext.load_model("tiny_resnet", image_size=SMALL_IMAGE)
    np.testing.assert_array_equal(again.example_input, tiny.example_input)
    tvm.ir.assert_structural_equal(again.mod, tiny.mod)
    for name, value in tiny.params.items():
        np.testing.assert_array_equal(again.params[name].numpy(), value.numpy())


# --- agreement with PyTorch ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mlp", "resnet18"])
def test_untuned_tvm_matches_torch_within_measured_steps(loaded: dict[str, models.LoadedModel], name: str) -> None:
    model = loaded[name]
    hash_before = tvm.ir.structural_hash(model.mod)
    error = accuracy.compare_untuned_with_reference(model)
    assert error.max_steps <= STOCK_STEP_BOUND[name] + TOLERANCE, error
    # relay.build would write "UPWARD" into the qnn.requantize attributes of the module it builds.
    assert tvm.ir.structural_hash(model.mod) == hash_before


def test_untuned_tiny_model_matches_torch_within_measured_steps(
    tiny: models.LoadedModel, tiny_tvm_output: np.ndarray
) -> None:
    torch_output = accuracy.run_torchscript(tiny.torchscript, tiny.example_input)
    error = accuracy.step_error(tiny_tvm_output, torch_output, tiny.output_scale)
    assert error.max_steps <= STOCK_STEP_BOUND["tiny_resnet"] + TOLERANCE, error


def test_tiny_model_differs_only_by_the_frontends_rounding(tiny: models.LoadedModel) -> None:
    """With the average pool and qnn.add rounding as PyTorch does, the tiny model agrees."""
    rounded = accuracy.with_torch_rounding(tiny.mod)
    torch_output = accuracy.run_torchscript(tiny.torchscript, tiny.example_input)
    error = accuracy.step_error(_tvm_output(tiny, rounded), torch_output, tiny.output_scale)
    assert error.max_steps <= TORCH_ROUNDING_STEP_BOUND + TOLERANCE, error


def test_step_error_counts_whole_steps() -> None:
    reference = np.array([0.0, 0.5, 1.0], dtype=np.float32)
    assert accuracy.quantization_step_error(reference, reference, 0.25) == 0.0
    assert accuracy.quantization_step_error(reference + [0.0, 0.5, -0.25], reference, 0.25) == pytest.approx(2.0)
    error = accuracy.step_error(reference + [0.0, 0.0, 0.25], reference, 0.25)
    assert error.fraction_equal == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="shapes differ"):
        accuracy.quantization_step_error(reference, reference[:2], 0.25)


# --- NHWC ---------------------------------------------------------------------------------------


def test_nhwc_converts_every_qnn_conv_and_keeps_the_output(
    tiny: models.LoadedModel, tiny_tvm_output: np.ndarray
) -> None:
    nhwc = relay_ext.load_model("tiny_resnet", image_size=SMALL_IMAGE, layout="NHWC")
    layouts = models.conv_layouts(nhwc.mod)
    assert len(layouts) == 3
    assert all(op == "qnn.conv2d" and data == "NHWC" and kernel == "HWIO" for op, data, kernel in layouts), layouts
    assert nhwc.layout == "NHWC" and nhwc.input_shape == tiny.input_shape  # the input stays NCHW
    np.testing.assert_array_equal(_tvm_output(nhwc), tiny_tvm_output)


def test_convert_layout_needs_opt_level_3(tiny: models.LoadedModel) -> None:
    """Why convert_to_nhwc opens its own PassContext: at the default opt level a pass pipeline
    skips ConvertLayout and the convs stay NCHW."""
    pipeline = tvm.transform.Sequential(
        [tvm.relay.transform.InferType(), tvm.relay.transform.ConvertLayout(models.NHWC_CONV_LAYOUTS)]
    )
    unchanged = pipeline(tiny.mod)
    assert {data for _, data, _ in models.conv_layouts(unchanged)} == {"NCHW"}
    converted = models.convert_to_nhwc(tiny.mod)
    assert {data for _, data, _ in models.conv_layouts(converted)} == {"NHWC"}


# --- user TorchScript files ---------------------------------------------------------------------


def test_from_torchscript_round_trip(tiny: models.LoadedModel, tmp_path) -> None:
    path = tmp_path / "tiny.pt"
    tiny.torchscript.save(str(path))
    imported = models.from_torchscript(path, {"input": tiny.input_shape})
    assert imported.name == "tiny"
    assert imported.output_scale == tiny.output_scale and imported.quantized
    tvm.ir.assert_structural_equal(imported.mod, tiny.mod)
    torch_output = accuracy.run_torchscript(imported.torchscript, tiny.example_input)
    np.testing.assert_array_equal(torch_output, accuracy.run_torchscript(tiny.torchscript, tiny.example_input))


def test_from_torchscript_nhwc(tiny: models.LoadedModel, tmp_path) -> None:
    path = tmp_path / "tiny.pt"
    tiny.torchscript.save(str(path))
    imported = models.from_torchscript(path, [("data", tiny.input_shape)], layout="NHWC")
    assert imported.input_name == "data" and set(imported.inputs) == {"data"}
    assert {data for _, data, _ in models.conv_layouts(imported.mod)} == {"NHWC"}


class _FloatConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def test_float_torchscript_is_valid_input(tmp_path) -> None:
    torch.manual_seed(0)
    path = tmp_path / "float_net.pt"
    torch.jit.trace(_FloatConvNet().eval(), torch.randn(1, 3, 8, 8)).save(str(path))
    model = models.from_torchscript(path, {"input": (1, 3, 8, 8)})
    assert not model.quantized and model.output_scale is None
    assert _qnn_op_names(model.mod) == set()
    expected = accuracy.run_torchscript(model.torchscript, model.example_input)
    np.testing.assert_allclose(_tvm_output(model), expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="no output quantization scale"):
        accuracy.compare_untuned_with_reference(model)


# --- bad input ----------------------------------------------------------------------------------


def test_unknown_model_name_lists_the_valid_names() -> None:
    with pytest.raises(ValueError, match="unknown model 'resnet19'") as raised:
        relay_ext.load_model("resnet19")
    for name in models.available_models():
        assert name in str(raised.value)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"layout": "NCWH"}, "unknown layout 'NCWH'"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"image_size": 16}, "image_size must be an integer >= 32"),
    ],
)
def test_bad_load_arguments(arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        relay_ext.load_model("resnet18", **arguments)


def test_missing_torchscript_file(tmp_path) -> None:
    missing = tmp_path / "nowhere.pt"
    with pytest.raises(FileNotFoundError, match="TorchScript file not found: .*nowhere.pt"):
        models.from_torchscript(missing, {"input": (1, 3, 32, 32)})


def test_file_that_is_not_torchscript(tmp_path) -> None:
    text_file = tmp_path / "notes.pt"
    text_file.write_text("not a model")
    state_dict_file = tmp_path / "state_dict.pt"
    torch.save(_FloatConvNet().state_dict(), state_dict_file)
    for path in (text_file, state_dict_file):
        with pytest.raises(ValueError, match="is not a TorchScript file") as raised:
            models.from_torchscript(path, {"input": (1, 3, 32, 32)})
        assert str(path) in str(raised.value)


def test_wrong_input_shape(tiny: models.LoadedModel, tmp_path) -> None:
    path = tmp_path / "tiny.pt"
    tiny.torchscript.save(str(path))
    with pytest.raises(ValueError, match=r"does not accept an input of shape \(1, 4, 32, 32\)"):
        models.from_torchscript(path, {"input": (1, 4, 32, 32)})
    with pytest.raises(ValueError, match=r"\(1, 3, 32\): .*Expected activation tensor to have 4 dimensions"):
        models.from_torchscript(path, {"input": (1, 3, 32)})


@pytest.mark.parametrize(
    "input_shapes, message",
    [
        ({}, "exactly one input"),
        ({"a": (1, 3), "b": (1, 3)}, "exactly one input"),
        ({"input": (1, 0, 32, 32)}, "positive integers"),
        ({"input": "1x3x32x32"}, "positive integers"),
    ],
)
def test_bad_input_shapes(tiny: models.LoadedModel, tmp_path, input_shapes, message: str) -> None:
    path = tmp_path / "tiny.pt"
    tiny.torchscript.save(str(path))
    with pytest.raises(ValueError, match=message):
        models.from_torchscript(path, input_shapes)
