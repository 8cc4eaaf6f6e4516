"""PyTorch eager-mode static quantization of our own networks, from seeded random weights.

    model = seeded_float_model(build, seed)                 # random weights and batch-norm stats
    quantize_eager(model, random_batches(shape, 4, seed))  # fuse, prepare (x86), calibrate, convert
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn
from torch.ao import quantization as torch_quantization

QUANTIZATION_BACKEND = "x86"
CALIBRATION_BATCH_SIZE = 2


def quantize_eager(model: nn.Module, calibration_batches: Sequence[torch.Tensor]) -> nn.Module:
    """PyTorch eager-mode static quantization: fuse, prepare (x86 qconfig), calibrate, convert."""
    model.eval()
    model.fuse_model()
    model.qconfig = torch_quantization.get_default_qconfig(QUANTIZATION_BACKEND)
    with quantization_engine(QUANTIZATION_BACKEND), quiet_torch_quantization_warnings():
        torch_quantization.prepare(model, inplace=True)
        with torch.no_grad():
            for batch in calibration_batches:
                model(batch)
        torch_quantization.convert(model, inplace=True)
    return model


@contextlib.contextmanager
def quantization_engine(backend: str) -> Iterator[None]:
    """PyTorch's quantized engine set to ``backend`` for the duration."""
    previous = torch.backends.quantized.engine
    if backend not in torch.backends.quantized.supported_engines:
        raise RuntimeError(f"this PyTorch build has no {backend!r} quantized engine")
    torch.backends.quantized.engine = backend
    try:
        yield
    finally:
        torch.backends.quantized.engine = previous


@contextlib.contextmanager
def quiet_torch_quantization_warnings() -> Iterator[None]:
    """torch.ao.quantization warns on every call that it is deprecated; say it once in the log."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.ao\.quantization")
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated.*")
        warnings.filterwarnings("ignore", message=r".*reduce_range will be deprecated.*")
        warnings.filterwarnings("ignore", message=r".*quantized tensor creation functions.*")
        yield


def seeded_float_model(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """The float network ``build()`` makes, with seeded random weights and batch-norm statistics."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build()
        randomize_batch_norms(model)
    return model.eval()


def randomize_batch_norms(model: nn.Module) -> None:
    """Give batch norms non-trivial statistics, so that folding them into convs changes the weights."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            with torch.no_grad():
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.1)
                module.running_mean.normal_(0.0, 0.1)
                module.running_var.uniform_(0.5, 1.5)


def random_batches(shape: tuple[int, ...], count: int, seed: int) -> list[torch.Tensor]:
    """``count`` calibration batches of random normal values, ``CALIBRATION_BATCH_SIZE`` each."""
    generator = torch.Generator().manual_seed(seed)
    batch_shape = (CALIBRATION_BATCH_SIZE, *shape[1:])
    return [torch.randn(batch_shape, generator=generator) for _ in range(count)]
