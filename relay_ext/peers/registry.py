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


def saturation_note(label: str, max_steps: float, cpu_flags: frozenset[str] | None) -> str | None:
    """Why bench's row ``label`` (a peer's name, or its name and a note in parentheses) is
    ``max_steps`` output steps from its reference, when its int8 kernels saturate 16-bit sums on a
    CPU (``cpu_flags``) without VNNI and that is more than rounding (:meth:`relay_ext.peers.base.Saturation.note`); None otherwise."""
    for peer in bench_peers():
        named = label == peer.name or label.startswith(peer.name + " (")
        if named and peer.saturation is not None:
            return peer.saturation.note(max_steps, cpu_flags)
    return None
