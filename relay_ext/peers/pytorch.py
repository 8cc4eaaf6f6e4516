"""PyTorch running the model itself, as its user would: a TorchScript module's int8 kernels, or a
PT2E program run eagerly. Either is the model's reference; bench times it beside TVM.

    one_round = torch_timer(module, example_input, number=10)   # warm-up run, then a round timer
    output = run_torch_module(module, example_input)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from relay_ext.peers.base import Peer, PeerModel, PeerUnavailable, Prepared

PYTORCH = "PyTorch int8"
EAGER = "eager"  # a PT2E program's eager row is "<its reference name>, eager"


def torch_timer(module: Callable[[torch.Tensor], Any], example_input: np.ndarray,
                number: int) -> Callable[[], float]:
    """Run ``module`` once on ``example_input`` (warm-up) and return a function that times one
    round: one untimed call (as every runtime's round in bench), then the mean seconds of
    ``number`` calls, without autograd."""
    data = torch.from_numpy(np.ascontiguousarray(example_input))

    def one_round() -> float:
        with torch.no_grad():
            module(data)
            start = time.perf_counter()
            for _ in range(number):
                module(data)
            return (time.perf_counter() - start) / number

    with torch.no_grad():
        module(data)
    return one_round


def first_output(output: Any) -> np.ndarray:
    """A module's (first) output as numpy."""
    if isinstance(output, (tuple, list)):
        output = output[0]
    return output.detach().numpy()


def run_torch_module(module: Callable[[torch.Tensor], Any], data: np.ndarray) -> np.ndarray:
    """``module``'s first output on ``data``, autograd off."""
    with torch.no_grad():
        return first_output(module(torch.from_numpy(np.ascontiguousarray(data))))


def torch_version() -> str:
    return f"torch {torch.__version__}"


def program_module(model: PeerModel) -> Any:
    """The module a PT2E model's reference runs (its ``ExportedProgram.module()``), else None."""
    return getattr(model.loaded.reference, "torch_module", None)


class TorchScriptPeer(Peer):
    """PyTorch's int8 TorchScript module: a built-in model's or a TorchScript file's."""

    name = PYTORCH

    @property
    def version(self) -> str:
        return torch_version()

    def prepare(self, model: PeerModel, number: int, threads: int) -> Prepared:
        if model.loaded.torchscript is None:
            raise PeerUnavailable("the model has no TorchScript module")
        return Prepared(torch_timer(model.loaded.torchscript, model.loaded.example_input, number))


class EagerProgramPeer(Peer):
    """A PT2E program run eagerly by PyTorch (``ExportedProgram.module()``), the reference of a
    ``.pt2`` model; labelled eager beside PyTorch Inductor, which runs the same program
    compiled."""

    name = f"PyTorch PT2E int8, {EAGER}"

    @property
    def version(self) -> str:
        return torch_version()

    def label(self, model: PeerModel) -> str:
        return f"{model.loaded.reference_name}, {EAGER}"

    def prepare(self, model: PeerModel, number: int, threads: int) -> Prepared:
        module = program_module(model)
        if model.loaded.torchscript is not None or module is None:
            raise PeerUnavailable("the model is not a PT2E program")
        return Prepared(torch_timer(module, model.loaded.example_input, number))
