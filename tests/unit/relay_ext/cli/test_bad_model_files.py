"""The bad inputs a new user tries, kept under test as one table: each is
answered by ``quantfuse tune`` with one line on stderr, exit code 2, no traceback, and nothing
written to the work dir's database. docs/reliability.md lists the same rows."""

import os
import socket

import pytest
import torch

from relay_ext import cli
from relay_ext.workdir.files import RECORD_FILE
from conftest import needs_c_compiler
from helpers import one_error_line

LLVM = "llvm -num-cores 1"


def _torchscript_bytes(tmp_path) -> bytes:
    path = tmp_path / "linear.pt"
    torch.jit.script(torch.nn.Linear(4, 4)).save(str(path))
    return path.read_bytes()


def _onnx_bytes() -> bytes:
    onnx = pytest.importorskip("onnx", reason="the ONNX rows need the onnx package")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph).SerializeToString()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# (row id, how to make --model in tmp_path -> path or built-in name, extra args, what the line says)
ROWS = [
    ("random bytes as .pt", lambda t: _write(t / "random.pt", os.urandom(4096)), [], None),
    ("random bytes as .onnx", lambda t: _write(t / "random.onnx", os.urandom(4096)), [], None),
    ("empty .pt", lambda t: _write(t / "empty.pt", b""), [], None),
    ("text as .onnx", lambda t: _write(t / "text.onnx", b"not a model\n" * 20), [], None),
    ("a directory as --model", lambda t: _directory(t / "models.pt"), [], "is a directory"),
    ("truncated TorchScript",
     lambda t: _write(t / "cut.pt", _torchscript_bytes(t)[: len(_torchscript_bytes(t)) // 2]), [],
     None),
    ("truncated ONNX", lambda t: _write(t / "cut.onnx", _onnx_bytes()[: len(_onnx_bytes()) // 2]),
     [], None),
    ("ONNX file named .pt", lambda t: _write(t / "onnx.pt", _onnx_bytes()), [], None),
    ("TorchScript file named .onnx",
     lambda t: _write(t / "torchscript.onnx", _torchscript_bytes(t)), [], None),
    ("RPC tracker nobody listens on", lambda t: "tiny_resnet",
     ["--image-size", "16", "--rpc", f"127.0.0.1:{_free_port()}:k1"], "cannot reach RPC tracker"),
]


def _write(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _directory(path) -> str:
    path.mkdir()
    return str(path)


# a tune through RPC links its candidates here too: it asks for a C compiler before the tracker
@pytest.mark.parametrize("row, make_model, extra, fragment", [
    pytest.param(*r, id=r[0], marks=needs_c_compiler if "--rpc" in r[2] else ()) for r in ROWS])
def test_bad_input_is_one_line_and_exit_2(row, make_model, extra, fragment, tmp_path, capsys):
    model = make_model(tmp_path)
    shape = ["--input-shape", "1,4"] if os.sep in model else []
    work_dir = tmp_path / "work"
    assert cli.main(["tune", "--model", model, *shape, *extra, "--target", LLVM,
                     "--work-dir", str(work_dir), "--trials", "2"]) == 2, row
    one_error_line(capsys, *([fragment] if fragment else []))
    assert not (work_dir / RECORD_FILE).exists()
