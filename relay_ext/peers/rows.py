"""bench's peer runtimes: the CPU int8 runtimes a user would pick instead of quantfuse.

* **OpenVINO int8** (:mod:`relay_ext.peers.openvino`): the QDQ ONNX file ONNX Runtime's
  row runs (a built-in model's export, or the user's ``.onnx`` model), CPU plugin, bench's threads,
  LATENCY hint; checked against ONNX Runtime running that file as written.
* **PyTorch Inductor int8** (:mod:`relay_ext.peers.inductor`): a PT2E program compiled by
  ``torch.compile`` with freezing on -- a built-in model's float network through torchao's PT2E
  flow, or a ``.pt2`` model's program itself; checked against the same program run eagerly.

Each peer is compiled once before timing. One that cannot run (its package missing, torchao's
quantizer failing on the network, no C++ compiler, no ONNX file to read) is a :class:`PeerRow`
with the reason in one line instead of a timer, and bench goes on.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import os
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch

from relay_ext.frontend.models import LoadedModel
from relay_ext.peers.openvino import OPENVINO, openvino_timer, openvino_version, qdq_output_step
from relay_ext.frontend.optional_deps import MissingDependency
from relay_ext.peers.inductor import (INDUCTOR, InductorUnavailable, builtin_pt2e_program,
                                      compile_inductor, first_line, run_module)
from relay_ext.measure.timing import torch_timer
from relay_ext.report.accuracy import step_error

logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]
PEERS = (OPENVINO, INDUCTOR)


@dataclasses.dataclass
class PeerRow:
    """One peer runtime in bench: its version, and either how far its output is from its own
    reference (``max_steps``, in that reference's output quantization steps) or why it did not
    run (``reason``, one line)."""

    label: str
    version: Optional[str] = None
    reason: Optional[str] = None
    reference: Optional[str] = None
    max_steps: Optional[float] = None

    @property
    def ran(self) -> bool:
        return self.reason is None

    def line(self) -> str:
        """For people: the check of a peer that ran, or why it did not."""
        if not self.ran:
            return f"{self.label}: not run: {self.reason}"
        return (f"{self.label} ({self.version}) vs {self.reference}: max {self.max_steps:.2f} "
                "output quantization steps")

    def to_dict(self) -> Dict[str, object]:
        return dataclasses.asdict(self)


def _version(distribution: str) -> Optional[str]:
    """An installed distribution's version, without importing it (torchao's first import logs
    warnings that :func:`relay_ext.frontend.optional_deps.require_torchao` keeps quiet)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def inductor_version() -> str:
    """torch's version, and torchao's when it is installed."""
    torchao = _version("torchao")
    return f"torch {torch.__version__}" + (f", torchao {torchao}" if torchao else "")


def openvino_peer(loaded: LoadedModel, number: int, threads: int,
                  onnx_model: Optional[PathLike]) -> Tuple[PeerRow, Optional[Callable[[], float]]]:
    """OpenVINO's row and timer (None when it cannot run): the model's own ONNX file, else
    ``onnx_model`` (a built-in model's export)."""
    from relay_ext.frontend.onnx_reference import OnnxRuntimeReference  # pylint: disable=C0415

    row = PeerRow(OPENVINO)
    own = isinstance(loaded.reference, OnnxRuntimeReference)
    path = loaded.reference.path if own else onnx_model
    try:
        row.version = openvino_version()
    except MissingDependency as error:
        row.reason = first_line(error)
        return row, None
    if path is None:
        row.reason = ("no ONNX file to read: OpenVINO runs an .onnx model, or a built-in model's "
                      "ONNX export (which needs the onnx extra)")
        return row, None
    try:
        output, timer = openvino_timer(path, loaded.example_input, number, threads)
        if own:
            reference, expected, step = loaded.reference_name, loaded.run_reference(), loaded.output_scale
        else:
            ort = OnnxRuntimeReference(path, loaded.input_name, threads)
            reference, expected = ort.name, ort(loaded.example_input)
            step = qdq_output_step(path, expected)
    except Exception as error:  # pylint: disable=broad-except - OpenVINO raises RuntimeError & co
        row.reason = f"OpenVINO failed: {first_line(error)}"
        return row, None
    row.reference = reference
    row.max_steps = step_error(output, expected, step).max_steps
    return row, timer


def inductor_peer(loaded: LoadedModel, number: int, builtin_model: Optional[str]
                  ) -> Tuple[PeerRow, Optional[Callable[[], float]]]:
    """PyTorch Inductor's row and timer (None when it cannot run): the built-in model
    ``builtin_model``'s PT2E program, else a ``.pt2`` model's program (the module its reference
    runs)."""
    from relay_ext.frontend.pt2e_import import float_output_step  # pylint: disable=C0415

    row = PeerRow(INDUCTOR, version=inductor_version())
    program_module = getattr(loaded.reference, "torch_module", None)
    try:
        if builtin_model is not None:
            batch, image_size = loaded.input_shape[0], loaded.input_shape[-1]
            module = builtin_pt2e_program(builtin_model, batch, image_size).module()
            step = None  # the program's output is float: its step from the eager output
        elif program_module is not None:
            module, step = program_module, loaded.output_scale
        else:
            row.reason = ("no PT2E program: Inductor compiles a .pt2 model or a built-in model "
                          "quantized with torchao's PT2E flow")
            return row, None
        compiled = compile_inductor(module, loaded.example_input)
        expected = run_module(module, loaded.example_input)
        output = run_module(compiled, loaded.example_input)
        timer = torch_timer(compiled, loaded.example_input, number)
    except InductorUnavailable as error:
        row.reason = str(error)
        return row, None
    except Exception as error:  # pylint: disable=broad-except - a compiled program's run failing
        row.reason = f"PyTorch Inductor failed: {first_line(error)}"
        return row, None
    row.reference = "the same PT2E program run eagerly"
    row.max_steps = step_error(output, expected, step or float_output_step(expected)).max_steps
    return row, timer


def peer_timers(loaded: LoadedModel, number: int, threads: int,
                onnx_model: Optional[PathLike] = None, builtin_model: Optional[str] = None
                ) -> Tuple[Dict[str, Callable[[], float]], List[PeerRow]]:
    """The peers' timers (one round each: the mean of ``number`` runs, after one untimed run), for
    those that can run, and every peer's :class:`PeerRow`. Call with PyTorch's threads set to
    ``threads`` (Inductor's kernels use them)."""
    timers: Dict[str, Callable[[], float]] = {}
    rows = []
    for row, timer in (openvino_peer(loaded, number, threads, onnx_model),
                       inductor_peer(loaded, number, builtin_model)):
        rows.append(row)
        if timer is not None:
            timers[row.label] = timer
        logger.info("%s", row.line())
    return timers, rows


def fastest(medians: Dict[str, float]) -> Optional[Tuple[str, float]]:
    """(label, median ms) of the fastest of ``medians``, None when empty."""
    if not medians:
        return None
    label = min(medians, key=medians.__getitem__)
    return label, medians[label]
