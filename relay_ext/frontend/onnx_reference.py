"""ONNX Runtime on the CPU: the reference an ONNX model's TVM build is checked against.

Two ways ONNX Runtime runs a QDQ model, and why the reference is the first:

* **As written** (graph optimizations off): every ``DequantizeLinear``, float op and
  ``QuantizeLinear`` runs as the file has it, which is what the model means by the ONNX
  specification. :class:`OnnxRuntimeReference` runs a model so; it is what
  :attr:`relay_ext.frontend.models.LoadedModel.reference` holds for an ONNX model. A QOperator
  file's ``QLinearConv``, ``QLinearAdd``, ... have no float form: the reference runs the file's
  QDQ equivalent as written (:mod:`relay_ext.frontend.onnx_qoperator`), which is what those ops
  mean by their specifications (their integer kernels agree with it to the step wherever they do
  not saturate, see the next point).
* **Int8** (ONNX Runtime's default, all optimizations): the QDQ groups are fused into integer
  kernels (QLinearConv, MatMulIntegerToFloat, ...). That is what users deploy, and a peer
  runtime of bench (:mod:`relay_ext.peers.onnx_runtime`), whose int8 kernels can stray from the
  model on CPUs without VNNI.
"""

from __future__ import annotations

import os
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
    next on the same cores: a runtime timed right after ONNX Runtime can run many times slower
    while those threads spin. When timing several runtimes in turn, pause between them or pass
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
    own thread count (:func:`relay_ext.peers.onnx_runtime.onnxruntime_timer`). ``graph``, when
    given, is the model ONNX Runtime runs as written instead of the file: the QDQ equivalent of a
    QOperator file (:func:`relay_ext.frontend.onnx_qoperator.to_qdq`), whose QLinear ops have no
    float form to run; :attr:`name` says so. The session is opened on first use.
    """

    name = "ONNX Runtime (QDQ as written)"
    QOPERATOR_NAME = "ONNX Runtime (the QOperator file as QDQ, as written)"

    def __init__(self, path: str | os.PathLike, input_name: str, threads: int | None = None,
                 graph: bytes | None = None) -> None:
        self.path = os.fspath(path)
        self.input_name = input_name
        self.threads = threads
        self.graph = graph
        if graph is not None:
            self.name = self.QOPERATOR_NAME
        self._session: Any = None

    @property
    def qdq_model(self) -> ModelSource:
        """The QDQ model this reference runs: ``graph`` (bytes) when given, else the file's path."""
        return self.graph if self.graph is not None else self.path

    @property
    def session(self) -> Any:
        if self._session is None:
            self._session = onnxruntime_session(self.qdq_model, self.threads, optimized=False)
        return self._session

    def __call__(self, data: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input_name: np.ascontiguousarray(data, dtype=np.float32)})[0]

    def __repr__(self) -> str:
        rewritten = ", graph=<QDQ equivalent>" if self.graph is not None else ""
        return f"OnnxRuntimeReference({self.path!r}, {self.input_name!r}{rewritten})"
