"""ONNX Runtime on the CPU: the reference an ONNX model's TVM build is checked against, and its timer.

Two ways ONNX Runtime runs a QDQ model, and why the reference is the first:

* **As written** (graph optimizations off): every ``DequantizeLinear``, float op and
  ``QuantizeLinear`` runs as the file has it, which is what the model means by the ONNX
  specification. :class:`OnnxRuntimeReference` runs a model so; it is what
  :attr:`relay_ext.frontend.models.LoadedModel.reference` holds for an ONNX model.
* **Int8** (ONNX Runtime's default, all optimizations): the QDQ groups are fused into integer
  kernels (QLinearConv, MatMulIntegerToFloat, ...). That is what users deploy and what
  :func:`onnxruntime_timer` times, in the same interleaved rounds as TVM and PyTorch. On x86 CPUs
  without VNNI its uint8 x int8 products go through ``vpmaddubsw``, whose 16-bit pair sums
  saturate, so its outputs can stray from the model (measured on an AMD EPYC with AVX2 only:
  up to 31 output steps on the test MLP, 4 on the residual conv net; exactly 0 on both once the
  weights are quantized with ``reduce_range=True``, the remedy ONNX Runtime documents). On VNNI
  CPUs both ways agree to a step. :func:`saturation_note` says so when it matters.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from relay_ext.frontend.optional_deps import require_onnxruntime

ModelSource = str | os.PathLike | bytes


def onnxruntime_session(
    model: ModelSource, threads: int | None = None, allow_spinning: bool = True, optimized: bool = True
) -> Any:
    """An ``onnxruntime.InferenceSession`` on the CPU execution provider for a model file (or its
    bytes). ``threads``: ``intra_op_num_threads`` (the threads one op may use; ``inter_op`` is 1,
    ops run one after another), None for ONNX Runtime's default (one per physical core).
    ``optimized`` (default): ONNX Runtime's default graph optimizations, which fuse QDQ groups into
    int8 kernels, as a user running the model would have them; False runs the graph as written
    (see the module doc).

    ``allow_spinning`` (ONNX Runtime's default, True): worker threads spin for a while after their
    work instead of sleeping, which is faster for ONNX Runtime but takes CPU time from whatever runs
    next on the same cores. In a check on this 2-core machine (loaded by other work, so noisy),
    PyTorch timed right after ONNX Runtime runs of a tiny model took 0.1-1.6 ms with spinning off
    and up to 61 ms with it on. When timing several runtimes in turn, pause between them or pass
    False.
    """
    ort = require_onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only: the CPU provider warns about unused initializers
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = 1
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if not allow_spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads is not None:
        if int(threads) < 1:
            raise ValueError(f"threads must be a positive number, got {threads!r}")
        options.intra_op_num_threads = int(threads)
    source = model if isinstance(model, bytes) else os.fspath(model)
    return ort.InferenceSession(source, sess_options=options, providers=["CPUExecutionProvider"])


class OnnxRuntimeReference:
    """The model's first output from ONNX Runtime (CPU) running the graph as written (graph
    optimizations off: QDQ evaluated op by op, see the module doc), as a function of the input.

    ``path`` is the model file, so that a benchmark can open its own int8 session on it with its
    own thread count (:func:`onnxruntime_timer`). The session is opened on first use.
    """

    name = "ONNX Runtime (QDQ as written)"

    def __init__(self, path: str | os.PathLike, input_name: str, threads: int | None = None) -> None:
        self.path = os.fspath(path)
        self.input_name = input_name
        self.threads = threads
        self._session: Any = None

    @property
    def session(self) -> Any:
        if self._session is None:
            self._session = onnxruntime_session(self.path, self.threads, optimized=False)
        return self._session

    def __call__(self, data: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input_name: np.ascontiguousarray(data, dtype=np.float32)})[0]

    def __repr__(self) -> str:
        return f"OnnxRuntimeReference({self.path!r}, {self.input_name!r})"


def onnxruntime_timer(
    model: ModelSource | OnnxRuntimeReference,
    inputs: Mapping[str, np.ndarray],
    number: int,
    threads: int,
    allow_spinning: bool = True,
) -> tuple[np.ndarray, Callable[[], float]]:
    """Open an ONNX Runtime CPU session (default optimizations: its int8 kernels) with
    ``intra_op_num_threads=threads``, run it once on ``inputs`` (warm-up) and return its first
    output with a function that times one round: the mean seconds of ``number`` runs.

    ``model`` is a file path, the model's bytes, or an :class:`OnnxRuntimeReference` (its file is
    opened again, with ``threads``). ``allow_spinning``: see :func:`onnxruntime_session`.
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
# /proc/cpuinfo names of the instructions that multiply uint8 x int8 into 32-bit sums directly.
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni"})


def saturation_note(max_steps: float, cpu_flags: frozenset[str] | None) -> str | None:
    """Why ONNX Runtime's int8 run of a model is ``max_steps`` output steps from the model as
    written, when that is more than rounding on a CPU whose flags (``/proc/cpuinfo``) show no VNNI;
    None otherwise (the flags unknown included)."""
    if max_steps <= SATURATION_STEPS or cpu_flags is None or VNNI_FLAGS & set(cpu_flags):
        return None
    return ("this CPU has no VNNI, and ONNX Runtime's uint8 x int8 kernels then saturate 16-bit "
            "sums (vpmaddubsw); quantizing the weights with reduce_range=True avoids it")
