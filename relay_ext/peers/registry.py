"""Every peer bench times, in the order of its table's rows."""

from __future__ import annotations

from relay_ext.peers.base import Peer
from relay_ext.peers.inductor import InductorPeer
from relay_ext.peers.onnx_runtime import OnnxRuntimePeer
from relay_ext.peers.openvino import OpenVINOPeer
from relay_ext.peers.pytorch import EagerProgramPeer, TorchScriptPeer


def bench_peers() -> list[Peer]:
    """The model's own runtimes first (PyTorch's TorchScript module or its PT2E program run
    eagerly, ONNX Runtime int8), then the optional peers (OpenVINO, PyTorch Inductor)."""
    return [TorchScriptPeer(), EagerProgramPeer(), OnnxRuntimePeer(), OpenVINOPeer(),
            InductorPeer()]
