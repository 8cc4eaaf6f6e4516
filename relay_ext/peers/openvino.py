"""OpenVINO on the CPU: a peer runtime of ``quantfuse bench`` (``pip install 'quantfuse[peers]'``).

    output, one_round = openvino_timer("model_qdq.onnx", example_input, number=10, threads=2)

OpenVINO reads a QDQ ONNX file itself (``Core.read_model``) and its CPU plugin runs the
``DequantizeLinear`` / op / ``QuantizeLinear`` groups as int8 kernels (VNNI, or AMX where the OS
enables it), which is what an OpenVINO user deploying the ONNX file gets. Bench gives it the file
ONNX Runtime's row runs: a built-in model's export (:mod:`relay_ext.frontend.onnx_export`) or the
user's ``.onnx`` model. It is compiled once, before timing, for the ``CPU`` device with
``INFERENCE_NUM_THREADS`` = bench's ``--threads`` and the ``LATENCY`` performance hint (one stream:
one inference at a time on those threads, as bench times every runtime).

A QOperator file (``QLinearConv``, ``QLinearAdd``, ``QGemm``, ...) is given to OpenVINO as it is
where OpenVINO reads it; where it cannot (OpenVINO 2026.4 converts neither ``QGemm`` and
``QLinearGlobalAveragePool`` nor per-channel ``QLinearConv``), the row runs the file's QDQ
equivalent (:func:`relay_ext.frontend.onnx_qoperator.to_qdq`, what quantfuse imports), is labelled
``OpenVINO int8 (QDQ rewrite)``, and the log says why in one line (:func:`read_failure`).

Its output is checked against the file's meaning, ONNX Runtime running the QDQ graph as written
(:class:`relay_ext.frontend.onnx_reference.OnnxRuntimeReference`), in steps of the file's output
scale (:func:`qdq_output_step`): within rounding where the CPU has VNNI. Without VNNI its int8
kernels (oneDNN's ``jit_avx2`` convolutions and ``gemm_s8u8s32`` inner products) multiply with
``vpmaddubsw``, whose 16-bit pair sums saturate as ONNX Runtime's do, and the output strays from
the file's meaning by more than rounding wherever an activation near 255 meets a pair of large
weights; on weights quantized to 7 bits the two agree again (the check's note says so,
:class:`~relay_ext.peers.base.Saturation`). :class:`OpenVINOPeer` is bench's row.
"""

from __future__ import annotations

import importlib.metadata
import io
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from relay_ext.frontend.onnx_reference import OnnxRuntimeReference
from relay_ext.frontend.optional_deps import MissingDependency, require_onnx, require_openvino
from relay_ext.peers.base import (Peer, PeerModel, PeerUnavailable, Prepared, Saturation,
                                  first_line, installed)
from relay_ext.report.accuracy import step_error

logger = logging.getLogger(__name__)

OPENVINO = "OpenVINO int8"
QDQ_REWRITE = f"{OPENVINO} (QDQ rewrite)"  # its row on a QOperator file OpenVINO cannot read
PERFORMANCE_HINT = "LATENCY"
# Above this many output steps from the file as written, OpenVINO's int8 result is not rounding.
ROUNDING_STEPS = 3


def openvino_version() -> str:
    """The installed openvino distribution's version ("2026.4.1"), or :class:`MissingDependency`."""
    openvino = require_openvino()
    try:
        return importlib.metadata.version("openvino")
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(openvino, "__version__", "unknown")).split("-")[0]


ModelSource = str | os.PathLike | bytes


def read_openvino_model(model: ModelSource, core: Any = None) -> Any:
    """The ONNX model (a file's path, or the model's bytes) read by OpenVINO (``core.read_model``;
    default: a new ``Core``)."""
    if core is None:
        core = require_openvino().Core()
    source = io.BytesIO(model) if isinstance(model, bytes) else os.fspath(model)
    return core.read_model(source)


def read_failure(error: BaseException) -> str:
    """One line for why OpenVINO could not read a model: the summary of the ops its ONNX frontend
    has no rule for or failed to convert, else the error's first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    summary = [line.removeprefix("-- ") for line in lines if line.startswith(("-- No conversion rule",
                                                                               "-- Conversion is failed"))]
    return "; ".join(summary)[:300] if summary else first_line(error)


def openvino_compiled(path: ModelSource, threads: int, perf_count: bool = False) -> Any:
    """The ONNX model at ``path`` (or the model's bytes) read and compiled by OpenVINO for its CPU
    plugin, on ``threads`` inference threads with the LATENCY hint (see the module doc);
    ``perf_count``: with OpenVINO's per-node counters on (:mod:`relay_ext.peers.openvino_layers`)."""
    if int(threads) < 1:
        raise ValueError(f"threads must be a positive number, got {threads!r}")
    openvino = require_openvino()
    core = openvino.Core()
    model = read_openvino_model(path, core)
    if len(model.inputs) != 1:
        shown = "the model" if isinstance(path, bytes) else os.fspath(path)
        raise ValueError(f"{shown}: OpenVINO's row takes a model with one input, this one has "
                         f"{len(model.inputs)}")
    config = {"INFERENCE_NUM_THREADS": int(threads), "PERFORMANCE_HINT": PERFORMANCE_HINT}
    if perf_count:
        config["PERF_COUNT"] = True
    return core.compile_model(model, "CPU", config)


def openvino_timer(path: ModelSource, example_input: np.ndarray, number: int,
                   threads: int) -> tuple[np.ndarray, Callable[[], float]]:
    """Compile ``path`` (a file or the model's bytes, :func:`openvino_compiled`), run it once on ``example_input`` (warm-up) and
    return its first output with a function that times one round: one untimed run (as every
    runtime's round in bench), then the mean seconds of ``number`` synchronous inferences."""
    if int(number) < 1:
        raise ValueError(f"number must be a positive number of runs, got {number!r}")
    request = openvino_compiled(path, threads).create_infer_request()
    feed = {0: np.ascontiguousarray(example_input, dtype=np.float32)}

    def run() -> None:
        request.infer(feed, share_inputs=True, share_outputs=True)

    def one_round() -> float:
        run()
        start = time.perf_counter()
        for _ in range(number):
            run()
        return (time.perf_counter() - start) / number

    request.infer(feed)
    output = np.array(request.get_output_tensor(0).data, copy=True)
    return output, one_round


def qdq_output_step(path: str | os.PathLike, reference_output: np.ndarray) -> float:
    """The quantization step of the ONNX model's first output: the scale of the
    ``DequantizeLinear`` that produces it when it is one number, else, for a float output (ONNX
    Runtime's ``quantize_static`` leaves the last Gemm's output float), the step an 8-bit min/max
    observer would give ``reference_output``: ``(max - min) / 255``."""
    onnx = require_onnx()
    from onnx import numpy_helper  # pylint: disable=import-outside-toplevel

    graph = onnx.load(os.fspath(path)).graph
    output_name = graph.output[0].name
    initializers = {init.name: init for init in graph.initializer}
    producer = next((node for node in graph.node if output_name in node.output), None)
    if producer is not None and producer.op_type == "DequantizeLinear" and producer.input[1] in initializers:
        scale = numpy_helper.to_array(initializers[producer.input[1]])
        if scale.size == 1 and float(scale.reshape(())) > 0:
            return float(scale.reshape(()))
    output = np.asarray(reference_output, dtype=np.float64)
    spread = float(output.max() - output.min()) if output.size else 0.0
    return spread / 255 if spread > 0 else 1.0


class OpenVINOPeer(Peer):
    """OpenVINO's CPU plugin on the model's own ONNX file, else on a built-in model's export;
    checked against ONNX Runtime running that file as written."""

    name = OPENVINO
    optional = True
    saturation = Saturation("OpenVINO's oneDNN uint8 x int8 kernels",
                            "weights quantized to 7 bits (reduce_range=True) avoid it",
                            ROUNDING_STEPS)

    @property
    def version(self) -> str | None:
        try:
            return openvino_version()
        except MissingDependency:
            return None

    def __init__(self) -> None:
        self._read_failures: dict[str, str | None] = {}  # a QOperator file -> why OpenVINO cannot read it

    def available(self) -> tuple[bool, str | None]:
        return installed(require_openvino)

    def label(self, model: PeerModel) -> str:
        """``OpenVINO int8``, or :data:`QDQ_REWRITE` for a QOperator file OpenVINO cannot read."""
        return QDQ_REWRITE if self._unreadable_qoperator(model) is not None else self.name

    def _unreadable_qoperator(self, model: PeerModel) -> str | None:
        """Why OpenVINO cannot read the model's QOperator file (None when it can, or the model is
        not one); read once per file."""
        reference = model.loaded.reference
        if not model.is_onnx or getattr(reference, "graph", None) is None or not self.available()[0]:
            return None
        if reference.path not in self._read_failures:
            try:
                read_openvino_model(reference.path)
                self._read_failures[reference.path] = None
            except Exception as error:  # pylint: disable=broad-except - RuntimeError & co
                self._read_failures[reference.path] = read_failure(error)
        return self._read_failures[reference.path]

    def prepare(self, model: PeerModel, number: int, threads: int) -> Prepared:
        loaded, path = model.loaded, model.qdq_file
        unreadable = self._unreadable_qoperator(model)
        if unreadable is not None:
            logger.info("OpenVINO cannot read %s (%s); its row, %r, runs the file's QDQ equivalent",
                        path, unreadable, QDQ_REWRITE)
            path = loaded.reference.graph
        if path is None:
            raise PeerUnavailable("no ONNX file to read: OpenVINO runs an .onnx model, or a "
                                  "built-in model's ONNX export (which needs the onnx extra)")
        try:
            output, timer = openvino_timer(path, loaded.example_input, number, threads)
            if model.is_onnx:
                reference, expected = loaded.reference_name, loaded.run_reference()
                step = loaded.output_scale
            else:
                ort = OnnxRuntimeReference(path, loaded.input_name, threads)
                reference, expected = ort.name, ort(loaded.example_input)
                step = qdq_output_step(path, expected)
        except Exception as error:  # pylint: disable=broad-except - OpenVINO raises RuntimeError & co
            raise PeerUnavailable(f"OpenVINO failed: {read_failure(error)}") from error
        return Prepared(timer, reference, step_error(output, expected, step).max_steps)
