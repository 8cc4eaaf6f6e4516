"""ONNX Runtime's int8 CPU session, a peer of ``quantfuse bench``: what a user deploying the QDQ
ONNX file runs.

    output, one_round = onnxruntime_timer("model_qdq.onnx", {"input": x}, number=10, threads=2)

The session has ONNX Runtime's default graph optimizations, which fuse the QDQ groups into integer
kernels (QLinearConv, MatMulIntegerToFloat, ...); the model's reference runs the same file as
written instead (:class:`relay_ext.frontend.onnx_reference.OnnxRuntimeReference`). On x86 CPUs
without VNNI its uint8 x int8 products go through ``vpmaddubsw``, whose 16-bit pair sums
saturate, so its outputs can stray from the model by more than rounding (docs/bench.md has the
figures); quantizing the weights with ``reduce_range=True`` avoids it, and on VNNI CPUs both
ways agree to a step. Its peer's :attr:`~relay_ext.peers.base.Peer.saturation` says so when it
matters.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

import numpy as np

from relay_ext.frontend.onnx_reference import OnnxRuntimeReference, onnxruntime_session
from relay_ext.frontend.optional_deps import require_onnxruntime
from relay_ext.peers.base import (Peer, PeerModel, PeerUnavailable, Prepared, Saturation,
                                  distribution_version, installed)
from relay_ext.report.accuracy import step_error

ONNX_RUNTIME = "ONNX Runtime int8"
ModelSource = str | os.PathLike | bytes


def onnxruntime_timer(
    model: ModelSource | OnnxRuntimeReference,
    inputs: Mapping[str, np.ndarray],
    number: int,
    threads: int,
    allow_spinning: bool = True,
) -> tuple[np.ndarray, Callable[[], float]]:
    """Open an ONNX Runtime CPU session (default optimizations: its int8 kernels) with
    ``intra_op_num_threads=threads``, run it once on ``inputs`` (warm-up) and return its first
    output with a function that times one round: one untimed run, then the mean seconds of
    ``number`` runs.

    ``model`` is a file path, the model's bytes, or an :class:`OnnxRuntimeReference` (its file is
    opened again, with ``threads``). ``allow_spinning``: see
    :func:`relay_ext.frontend.onnx_reference.onnxruntime_session` (False when other runtimes are
    timed in turn on the same cores).
    """
    if int(number) < 1:
        raise ValueError(f"number must be a positive number of runs, got {number!r}")
    source = model.path if isinstance(model, OnnxRuntimeReference) else model
    session = onnxruntime_session(source, threads, allow_spinning)
    feed = {name: np.ascontiguousarray(value) for name, value in inputs.items()}
    first_output = session.get_outputs()[0].name

    def one_round() -> float:
        session.run([first_output], feed)  # untimed, as every runtime's round in bench
        start = time.perf_counter()
        for _ in range(number):
            session.run([first_output], feed)
        return (time.perf_counter() - start) / number

    output = session.run([first_output], feed)[0]
    return output, one_round


# Above this many output steps from the model, ONNX Runtime's int8 result is not rounding.
SATURATION_STEPS = 3


class OnnxRuntimePeer(Peer):
    """ONNX Runtime's int8 session on the model's own ONNX file, or on a built-in model's export
    (another quantization of the same network: its output is not compared). Its threads do not
    spin after a run: spinning threads would take the cores from the runtime timed next."""

    name = ONNX_RUNTIME
    saturation = Saturation("ONNX Runtime's uint8 x int8 kernels",
                            "quantizing the weights with reduce_range=True avoids it",
                            SATURATION_STEPS)

    @property
    def version(self) -> str | None:
        return distribution_version("onnxruntime")

    def available(self) -> tuple[bool, str | None]:
        return installed(require_onnxruntime)

    def prepare(self, model: PeerModel, number: int, threads: int) -> Prepared:
        loaded = model.loaded
        if model.qdq_file is None:
            raise PeerUnavailable("no ONNX file: an .onnx model, or a built-in model's export")
        output, timer = onnxruntime_timer(model.qdq_file, loaded.inputs, number, threads,
                                          allow_spinning=False)
        if not model.is_onnx:
            return Prepared(timer)
        steps = step_error(output, loaded.run_reference(), loaded.output_scale).max_steps
        return Prepared(timer, loaded.reference_name, steps)
