"""relay_ext.load_model (relay_ext.frontend.loader): one loader for a built-in name and a model file
of every supported format (quantized TorchScript, QDQ ONNX, PT2E .pt2), and one clear line for
what it cannot load."""

import os

import numpy as np
import pytest
import torch

import relay_ext
from relay_ext.frontend import loader
from relay_ext.frontend.loader import ModelSourceError


def test_the_public_loader_is_the_frontends():
    assert relay_ext.load_model is loader.load_model
    assert "models" not in dir(relay_ext)  # one public loader: no relay_ext.models.load beside it


def test_a_built_in_name(tiny):
    assert tiny.name == "tiny_resnet" and tiny.input_shape == (1, 3, 16, 16)
    assert tiny.reference_name == "PyTorch int8" and tiny.output_scale > 0
    assert (tiny.builtin.name, tiny.builtin.image_size, tiny.builtin.batch_size) == ("tiny_resnet", 16, 1)


def test_a_torchscript_file_with_its_input_shape(tiny, tmp_path):
    path = tmp_path / "tiny.pt"
    tiny.torchscript.save(str(path))
    loaded = relay_ext.load_model(path, input_shape=(1, 3, 16, 16))
    assert loaded.name == "tiny" and loaded.builtin is None and loaded.torchscript is not None
    assert loaded.output_scale == tiny.output_scale
    with pytest.raises(ModelSourceError, match="TorchScript model needs its input shape"):
        relay_ext.load_model(path)


def test_a_qdq_onnx_file(tmp_path):
    pytest.importorskip("onnxruntime", reason="ONNX models need onnx and onnxruntime")
    from relay_ext.frontend.onnx_export import export_quantized

    path = export_quantized("mlp", tmp_path / "mlp_qdq.onnx")
    loaded = relay_ext.load_model(str(path))  # its input shape is read from the file
    assert loaded.input_shape == (1, 256) and loaded.torchscript is None
    assert loaded.reference_name == "ONNX Runtime (QDQ as written)"
    assert loaded.run_reference().shape == (1, 10)


def test_a_pt2e_program(tmp_path):
    pytest.importorskip("torchao", reason="PT2E programs need torchao")
    from quantized_test_nets import ResidualConvNet, pt2e_program

    path = tmp_path / "residual.pt2"
    torch.export.save(pt2e_program(ResidualConvNet, (1, 3, 16, 16)), str(path))
    loaded = relay_ext.load_model(path)
    assert loaded.name == "residual" and loaded.input_shape == (1, 3, 16, 16)
    assert relay_ext.load_model(path, input_shape=(1, 3, 16, 16)).input_shape == (1, 3, 16, 16)
    with pytest.raises(ModelSourceError, match=r"does not match the program's input 1,3,16,16"):
        relay_ext.load_model(path, input_shape=(1, 3, 32, 32))


@pytest.mark.parametrize("source, fragment", [
    ("resnet1000", "unknown model 'resnet1000'; built-in models: mlp, mobilenet_v2"),
    (os.path.join("nowhere", "model.onnx"), "model file not found"),
    ("missing.pt2", "model file not found"),
])
def test_a_bad_name_or_path_is_one_clear_line(source, fragment):
    with pytest.raises(ModelSourceError, match=fragment) as raised:
        relay_ext.load_model(source)
    assert "\n" not in str(raised.value)


def test_a_directory_and_a_file_of_no_supported_format(tmp_path):
    (tmp_path / "models.pt").mkdir()
    with pytest.raises(ModelSourceError, match="is a directory; pass a TorchScript"):
        relay_ext.load_model(tmp_path / "models.pt")
    weights = tmp_path / "weights.bin"
    weights.write_bytes(os.urandom(256))
    with pytest.raises(ValueError, match="is not a TorchScript file"):
        relay_ext.load_model(weights, input_shape=(1, 4))


def test_the_format_comes_from_the_name():
    assert loader.model_format("resnet18") == loader.BUILTIN
    assert loader.model_format("a/b.ONNX") == loader.ONNX
    assert loader.model_format("p.pt2") == loader.PT2E
    assert loader.model_format("net.pth") == loader.TORCHSCRIPT


def test_an_input_shape_is_checked_before_anything_loads(tmp_path):
    path = tmp_path / "net.pt"
    path.write_bytes(b"")
    for bad in [(1, 0, 8, 8), (), ("a", 3)]:
        with pytest.raises(ModelSourceError, match="not a list of positive integers"):
            relay_ext.load_model(path, input_shape=bad)
    with pytest.raises(ModelSourceError, match="is not the built-in model's 1,3,16,16"):
        relay_ext.load_model("tiny_resnet", image_size=16, input_shape=(1, 3, 32, 32))


def test_the_seed_draws_the_weights_and_the_example_input(tiny):
    again = relay_ext.load_model("tiny_resnet", image_size=16, seed=1)
    assert again.builtin.seed == 1
    assert not np.array_equal(again.example_input, tiny.example_input)
