"""OpenVINO's own per-layer counters (``PERF_COUNT``): where its int8 time goes, node by node.

    profile = openvino_layers("model_qdq.onnx", example_input, threads=2, rounds=20)
    for layer in profile.convs():
        print(layer.conv, layer.exec_type, layer.ms)   # ConvShape(...) brgconv_avx512_I8 0.071

The ONNX file is compiled as bench's OpenVINO row compiles it
(:func:`relay_ext.peers.openvino.openvino_compiled`: CPU plugin, ``threads`` inference
threads, LATENCY hint) with profiling on, run ``rounds`` times after a warm-up, and each executed
node's ``real_time`` (``InferRequest.get_profiling_info``, the last inference's counters) read
after every run: a layer's time is the median over the rounds.

What a node is comes from the compiled model's runtime graph (``get_runtime_model``): its layer
type, its kernel (``primitiveType``, the profiling info's ``exec_type``: ``brgconv_avx512_I8`` is
oneDNN's AVX-512 brgemm convolution, ``..._amx_...`` its AMX one, ``jit_avx2_...`` AVX2), its
input and output shapes, and the layers of the ONNX graph it fused (``originalLayersNames``). An
int8 convolution node holds the conv, its bias, the requantize (the ``QuantizeLinear`` /
``FakeQuantize`` after it, which also clips a ReLU) and, when it has a fourth input, the residual
add (oneDNN's ``sum`` post-op): those nodes report ``NOT_RUN``. A conv's stride is read from the
ONNX graph's convolution the node fused (else inferred from the input and output sizes).

OpenVINO's exec type names the instruction family only (``avx512`` whether or not VNNI is
there); :func:`onednn_conv_kernels` asks oneDNN itself (``ONEDNN_VERBOSE``, in a child process)
which implementation each convolution primitive was created with, e.g.
``brg_conv_fwd:avx512_core_vnni`` (VNNI) or ``brg_conv_fwd:avx512_core_amx`` (AMX).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from relay_ext.peers.openvino import openvino_compiled, openvino_timer, openvino_version
from relay_ext.frontend.optional_deps import require_openvino

logger = logging.getLogger(__name__)

CONV_TYPES = ("Convolution", "GroupConvolution")


@dataclasses.dataclass(frozen=True)
class ConvShape:
    """A convolution's shape as the network defines it (no channel padding)."""

    in_channels: int
    out_channels: int
    groups: int
    kernel: int
    stride: int
    out_height: int
    out_width: int


@dataclasses.dataclass
class OpenVINOLayer:
    """One executed node of OpenVINO's compiled graph."""

    name: str
    layer_type: str        # "Convolution", "Reorder", "Subgraph", "FullyConnected..." ...
    exec_type: str         # its kernel, e.g. "brgconv_avx512_I8"
    ms: float              # median real time per inference
    fused: tuple[str, ...]  # the ONNX graph's layers it runs (originalLayersNames)
    conv: ConvShape | None = None
    residual_add: bool = False  # a conv that also adds the shortcut (sum post-op)


@dataclasses.dataclass
class OpenVINOProfile:
    """Every executed node's median time, and the whole model's latency without profiling."""

    layers: list[OpenVINOLayer]
    model_ms: float
    threads: int
    rounds: int
    version: str

    def convs(self) -> list[OpenVINOLayer]:
        return [layer for layer in self.layers if layer.conv is not None]

    def others(self) -> list[OpenVINOLayer]:
        return [layer for layer in self.layers if layer.conv is None]

    def layers_ms(self) -> float:
        return sum(layer.ms for layer in self.layers)


def exec_type_summary(layers: list[OpenVINOLayer]) -> dict[str, int]:
    """How many of ``layers`` ran each kernel, most used first."""
    return dict(collections.Counter(layer.exec_type for layer in layers).most_common())


def kernel_family(exec_type: str) -> str:
    """What OpenVINO's exec type says about the instructions: "AMX", "AVX-512", "AVX2" or "other"."""
    lowered = exec_type.lower()
    if "amx" in lowered:
        return "AMX"
    if "avx512" in lowered:
        return "AVX-512"
    if "avx2" in lowered:
        return "AVX2"
    return "other"


def _dims(port: Any) -> list[int]:
    return [int(d.get_length()) for d in port.get_partial_shape()]


def _conv_strides(model: Any) -> dict[str, int]:
    """The ONNX-read model's convolutions: friendly name -> stride along the height."""
    return {op.get_friendly_name(): int(op.get_strides()[0]) for op in model.get_ordered_ops()
            if op.get_type_name() in CONV_TYPES}


def conv_shape(op: Any, fused: tuple[str, ...], strides: dict[str, int]) -> ConvShape:
    """The shape of a runtime-graph convolution node (data, weights, output ports)."""
    data, weights, out = _dims(op.inputs()[0]), _dims(op.inputs()[1]), _dims(op.outputs()[0])
    if len(data) != 4 or len(out) != 4 or len(weights) not in (4, 5):
        raise ValueError(f"OpenVINO node {op.get_friendly_name()}: not a 2-D convolution "
                         f"(data {data}, weights {weights}, output {out})")
    if len(weights) == 5:  # GroupConvolution: groups, out/groups, in/groups, kh, kw
        groups = weights[0]
    else:
        groups = max(1, data[1] // weights[1])
    stride = next((strides[name] for name in fused if name in strides), None)
    if stride is None:  # stride from the sizes: out = floor((in + pads - k) / s) + 1
        stride = max(1, round(data[2] / out[2]))
    return ConvShape(data[1], out[1], groups, int(weights[-1]), stride, out[2], out[3])


def _runtime_nodes(compiled: Any, strides: dict[str, int]) -> dict[str, dict]:
    """Name -> what the runtime graph says of each node."""
    nodes = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        fields = {key: info[key].astype(str) for key in info.keys()}
        fused = tuple(n for n in fields.get("originalLayersNames", "").split(",") if n)
        layer_type = fields.get("layerType", op.get_type_name())
        conv = conv_shape(op, fused, strides) if layer_type in CONV_TYPES else None
        nodes[op.get_friendly_name()] = {
            "layer_type": layer_type, "exec_type": fields.get("primitiveType", ""),
            "fused": fused, "conv": conv, "residual_add": conv is not None and len(op.inputs()) > 3}
    return nodes


def openvino_layers(path: str | os.PathLike, example_input: np.ndarray, threads: int,
                    rounds: int = 20, timing_rounds: int = 7, number: int = 10) -> OpenVINOProfile:
    """Per node of OpenVINO's compiled ``path``: the median real time of ``rounds`` profiled
    inferences (see the module doc); the whole model's latency is the median of
    ``timing_rounds`` rounds of ``number`` inferences of a second compilation without profiling
    (the counters cost time of their own)."""
    if int(rounds) < 1:
        raise ValueError(f"rounds must be a positive number, got {rounds!r}")
    openvino = require_openvino()
    strides = _conv_strides(openvino.Core().read_model(os.fspath(path)))
    compiled = openvino_compiled(path, threads, perf_count=True)
    nodes = _runtime_nodes(compiled, strides)
    request = compiled.create_infer_request()
    feed = {0: np.ascontiguousarray(example_input, dtype=np.float32)}
    for _ in range(3):
        request.infer(feed)
    times: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(rounds):
        request.infer(feed)
        for info in request.get_profiling_info():
            if info.status == info.Status.EXECUTED:
                times[info.node_name].append(info.real_time.total_seconds() * 1e3)
    layers = []
    for name, values in times.items():
        node = nodes.get(name, {"layer_type": "?", "exec_type": "", "fused": (), "conv": None,
                                "residual_add": False})
        layers.append(OpenVINOLayer(name, node["layer_type"], node["exec_type"],
                                    statistics.median(values), node["fused"], node["conv"],
                                    node["residual_add"]))
    _, one_round = openvino_timer(path, example_input, number, threads)
    model_ms = 1e3 * statistics.median(one_round() for _ in range(timing_rounds))
    return OpenVINOProfile(layers, model_ms, int(threads), int(rounds), openvino_version())


_VERBOSE_RUN = """
import ctypes, sys, numpy as np, openvino as ov
core = ov.Core()
model = core.read_model(sys.argv[1])
compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": int(sys.argv[2]),
                                             "PERFORMANCE_HINT": "LATENCY"})
shape = [int(d.get_length()) for d in model.inputs[0].get_partial_shape()]
compiled.create_infer_request().infer({0: np.zeros(shape, dtype=np.float32)})
ctypes.CDLL(None).fflush(None)  # oneDNN prints with C stdio
"""


def onednn_conv_kernels(path: str | os.PathLike, threads: int, timeout_s: float = 300) -> dict[str, int]:
    """oneDNN's own name of the implementation of each convolution primitive OpenVINO created
    for ``path`` (compiled and run once in a child process with
    ``ONEDNN_VERBOSE=profile_create``), counted: ``{"brg_conv_fwd:avx512_core_vnni": 20}``;
    empty when the child failed or oneDNN printed nothing. (Not ``ONEDNN_VERBOSE=1``, which
    prints every execution and can make OpenVINO fail to run a convolution, "could not execute a
    primitive".)"""
    require_openvino()
    env = {**os.environ, "ONEDNN_VERBOSE": "profile_create"}
    done = subprocess.run([sys.executable, "-c", _VERBOSE_RUN, os.fspath(Path(path)), str(int(threads))],
                          env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        logger.warning("oneDNN's kernel names not read: the child process failed (%s)",
                       (done.stderr.strip().splitlines() or ["no message"])[-1])
        return {}
    kernels: collections.Counter = collections.Counter()
    for line in done.stdout.splitlines():
        fields = line.split(",")
        # onednn_verbose,v1,primitive,create:cache_miss,cpu,convolution,<implementation>,...
        if len(fields) > 6 and fields[0] == "onednn_verbose" and fields[3].startswith("create") \
                and fields[5] == "convolution":
            kernels[fields[6]] += 1
    return dict(kernels.most_common())
