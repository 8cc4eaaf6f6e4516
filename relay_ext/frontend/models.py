"""Quantized PyTorch models as TorchScript and Relay: the built-in models and TorchScript files.

:func:`relay_ext.load_model` (:mod:`relay_ext.frontend.loader`) is the one public loader; it calls
the steps here for a built-in name or a TorchScript file. ``load(name)`` builds one of our own
network definitions (:mod:`relay_ext.frontend.quantizable_nets`) with random weights from a fixed
seed, quantizes it with PyTorch eager-mode static quantization (module fusion, the x86 qconfig,
calibration on random batches), traces it to TorchScript and imports it with TVM's PyTorch
frontend. ``from_torchscript(path, input_shapes)`` imports a user's own TorchScript file the same
way. Both return a :class:`LoadedModel`. The import adds converters for quantized ops TVM 0.19's
frontend lacks or rounds unlike PyTorch
(:mod:`relay_ext.frontend.torch_quantized_ops`). The quantization itself:
:mod:`relay_ext.frontend.eager_quantization`.

With ``layout="NHWC"`` the Relay module's ``qnn.conv2d`` ops are converted to NHWC data / HWIO
kernel layout; the model's input stays NCHW, as PyTorch's.
"""

from __future__ import annotations

import importlib
import logging
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import tvm
from torch import nn
from tvm import relay

from meta_rules.base.tvm_errors import tvm_error_message

from relay_ext.frontend import quantizable_nets
from relay_ext.frontend import torch_quantized_ops, transformer_nets
from relay_ext.frontend.eager_quantization import (quantize_eager, quiet_torch_quantization_warnings, random_batches,
                                 seeded_float_model)

logger = logging.getLogger(__name__)

DEFAULT_SEED = 0
CALIBRATION_BATCHES = 4
DEFAULT_INPUT_NAME = "input"
LAYOUTS = ("NCHW", "NHWC")
# ConvertLayout's request: NHWC activations, and "default" picks the kernel layout that goes with
# it (HWIO).
NHWC_CONV_LAYOUTS = {"qnn.conv2d": ["NHWC", "default"], "nn.conv2d": ["NHWC", "default"]}


@dataclass(frozen=True)
class BuiltinSource:
    """The arguments :func:`load` made a built-in model with."""

    name: str
    batch_size: int
    image_size: int
    seed: int


# A Relay module's attribute: its uint8 activations are calibrated to 7 bits, as PyTorch's x86 and
# fbgemm engines calibrate them (``reduce_range``); read where QNN convs are lowered for x86.
SEVEN_BIT_ACTIVATIONS = "quantfuse.seven_bit_activations"


@dataclass
class LoadedModel:
    """A model ready for TVM, with what is needed to check it against its reference runtime.

    ``output_scale`` is the quantization step of the model's output (the scale of the
    ``dequantize`` that produces it), or None for a model whose output is not dequantized (a float
    model). ``input_shape`` is always the shape the source model takes.

    The reference is the runtime the model came from, whose output TVM's is compared with:
    ``reference`` (input array -> first output) named ``reference_name``, or, when ``reference`` is
    None, the TorchScript module (``reference_name`` "PyTorch int8"). An ONNX model has no
    ``torchscript`` and ONNX Runtime running the QDQ graph as written as its reference
    (:mod:`relay_ext.frontend.onnx_import`, :mod:`relay_ext.frontend.onnx_reference`).
    """

    name: str
    torchscript: torch.jit.ScriptModule | None
    mod: tvm.IRModule
    params: dict[str, tvm.nd.NDArray]
    input_name: str
    input_shape: tuple[int, ...]
    example_input: np.ndarray
    output_scale: float | None
    layout: str
    quantized: bool = True
    reference: Callable[[np.ndarray], np.ndarray] | None = None
    reference_name: str = "PyTorch int8"
    # A built-in model: how it was made (None for a model file), so that the same network can be
    # made again in another form (an ONNX export, a PT2E program) for the peers that run those.
    builtin: BuiltinSource | None = None

    @property
    def inputs(self) -> dict[str, np.ndarray]:
        """The example input keyed by the Relay input name, as executors take it."""
        return {self.input_name: self.example_input}

    def run_reference(self, data: np.ndarray | None = None) -> np.ndarray:
        """The reference runtime's (first) output on ``data`` (default: the example input)."""
        data = self.example_input if data is None else data
        if self.reference is not None:
            return self.reference(data)
        if self.torchscript is None:
            raise ValueError(f"model {self.name!r} has neither a reference runtime nor a TorchScript module")
        return run_torchscript(self.torchscript, data)


def run_torchscript(module: torch.jit.ScriptModule, example_input: np.ndarray) -> np.ndarray:
    """The TorchScript module's (first) output on ``example_input``, as numpy."""
    with torch.no_grad():
        output = module(torch.from_numpy(np.ascontiguousarray(example_input)))
    if isinstance(output, (tuple, list)):
        output = output[0]
    return output.detach().numpy()


@dataclass(frozen=True)
class ModelSpec:
    """How to build one registered model and what its input looks like."""

    build: Callable[[], nn.Module]
    description: str
    # Image models take (batch, 3, image_size, image_size); the others (batch, feature_count) or
    # (batch, *sample_shape).
    feature_count: int | None = None
    min_image_size: int = 32
    sample_shape: tuple[int, ...] | None = None
    # Quantized by ONNX Runtime from its ONNX export (relay_ext.frontend.builtin_onnx), not by
    # PyTorch's eager mode: the reference is ONNX Runtime, and there is no TorchScript module.
    through_onnx: bool = False

    def input_shape(self, batch_size: int, image_size: int) -> tuple[int, ...]:
        if self.sample_shape is not None:
            return (batch_size, *self.sample_shape)
        if self.feature_count is not None:
            return (batch_size, self.feature_count)
        return (batch_size, 3, image_size, image_size)


MODELS: dict[str, ModelSpec] = {
    "resnet18": ModelSpec(quantizable_nets.resnet18, "ResNet-18, 1000 classes"),
    "resnet50": ModelSpec(quantizable_nets.resnet50, "ResNet-50, 1000 classes"),
    "mobilenet_v2": ModelSpec(quantizable_nets.MobileNetV2, "MobileNetV2 (width 1.0), 1000 classes"),
    "mlp": ModelSpec(quantizable_nets.MLP, "3-layer MLP on 256 features, 10 classes", feature_count=256),
    "tiny_resnet": ModelSpec(
        quantizable_nets.TinyResNet,
        "3 convs (8 channels), residual add+ReLU, global pool, linear; for tiny tuning runs",
        min_image_size=4,
    ),
    "tiny_bert": ModelSpec(
        transformer_nets.TinyBert,
        "BERT-style encoder on (1, 32, 64) embeddings: 2 layers, 4 heads, GELU, LayerNorm, 10 classes",
        sample_shape=(32, 64), through_onnx=True,
    ),
}


def available_models() -> list[str]:
    """The names ``load`` accepts."""
    return sorted(MODELS)


# --- public entry points ------------------------------------------------------------------------


def load(
    name: str,
    batch_size: int = 1,
    image_size: int = 224,
    layout: str = "NCHW",
    seed: int = DEFAULT_SEED,
) -> LoadedModel:
    """Build, quantize, trace and import the registered model ``name``.

    Weights are random (``seed``), calibration uses random normal batches; the example input is
    another random normal batch. ``image_size`` is ignored by models that take feature vectors
    ("mlp") or embeddings ("tiny_bert", quantized by ONNX Runtime: see
    :mod:`relay_ext.frontend.builtin_onnx`).
    """
    spec = _model_spec(name)
    _check_load_arguments(spec, batch_size, image_size, layout)
    if spec.through_onnx:
        # builds on this module, as from_exported_program does (see __getattr__)
        builtin_onnx = importlib.import_module(f"{__package__}.builtin_onnx")
        return builtin_onnx.load_through_onnx(name, batch_size, image_size, layout, seed)
    input_shape = spec.input_shape(batch_size, image_size)
    logger.info("building quantized %s for input %s (seed %d)", name, input_shape, seed)
    float_model = seeded_float_model(spec.build, seed)
    calibration = random_batches(input_shape, CALIBRATION_BATCHES, seed + 1)
    quantized = quantize_eager(float_model, calibration)
    example_input = random_input(input_shape, seed + 2)
    torchscript = _trace(quantized, example_input)
    loaded = _import_to_relay(name, torchscript, DEFAULT_INPUT_NAME, input_shape, example_input, layout)
    loaded.builtin = BuiltinSource(name, batch_size, image_size, seed)
    return loaded


def from_torchscript(
    path: str | os.PathLike,
    input_shapes: Mapping[str, Sequence[int]] | Sequence[tuple[str, Sequence[int]]],
    layout: str = "NCHW",
    seed: int = DEFAULT_SEED,
) -> LoadedModel:
    """Import a user's TorchScript file (quantized or float) with one float32 input.

    ``input_shapes`` names the input and its shape, as TVM's frontend takes it:
    ``{"input": (1, 3, 224, 224)}`` or ``[("input", (1, 3, 224, 224))]``. The example input is a
    random normal batch from ``seed``.
    """
    input_name, input_shape = _single_input(input_shapes)
    check_layout(layout)
    torchscript = _load_torchscript(path)
    example_input = random_input(input_shape, seed)
    _check_runs_on(torchscript, example_input)
    name = os.path.splitext(os.path.basename(os.fspath(path)))[0]
    return _import_to_relay(name, torchscript, input_name, input_shape, example_input, layout)


def __getattr__(name: str):
    """``from_exported_program``: PT2E programs (a ``.pt2`` path written by ``torch.export.save``
    or an ``ExportedProgram``; needs torchao, ``pip install 'quantfuse[pt2e]'``), imported as the
    other models are; it lives in :mod:`relay_ext.frontend.pt2e_import`, which builds on this module,
    and is looked up there on first use."""
    if name == "from_exported_program":
        return importlib.import_module(f"{__package__}.pt2e_import").from_exported_program
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def convert_to_nhwc(mod: tvm.IRModule) -> tvm.IRModule:
    """Convert the module's (qnn.)conv2d ops to NHWC data and HWIO kernel layout.

    ConvertLayout is an opt-level-3 pass: in a pass ``Sequential`` under a PassContext below opt
    level 3 (TVM's default is 2) it is skipped without a word, so the context is opened here.
    """
    passes = tvm.transform.Sequential(
        [relay.transform.InferType(), relay.transform.ConvertLayout(NHWC_CONV_LAYOUTS), relay.transform.InferType()]
    )
    with tvm.transform.PassContext(opt_level=3):
        return passes(mod)


def conv_layouts(mod: tvm.IRModule) -> list[tuple[str, str, str]]:
    """(op name, data layout, kernel layout) of every conv2d / qnn.conv2d in ``main``."""
    found: list[tuple[str, str, str]] = []

    def visit(node: relay.Expr) -> None:
        if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op):
            if node.op.name in ("nn.conv2d", "qnn.conv2d"):
                found.append((node.op.name, str(node.attrs.data_layout), str(node.attrs.kernel_layout)))

    relay.analysis.post_order_visit(mod["main"].body, visit)
    return found


def output_scale(mod: tvm.IRModule) -> float | None:
    """The scale of the ``qnn.dequantize`` nearest the output of ``main``, or None if none."""
    last_dequantize: list[relay.Call] = []

    def visit(node: relay.Expr) -> None:
        if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op) and node.op.name == "qnn.dequantize":
            last_dequantize[:] = [node]

    relay.analysis.post_order_visit(mod["main"].body, visit)
    if not last_dequantize:
        return None
    scale = last_dequantize[0].args[1]
    if not isinstance(scale, relay.Constant) or scale.data.numpy().size != 1:
        return None
    return float(scale.data.numpy().reshape(()))


def random_input(shape: Sequence[int], seed: int) -> np.ndarray:
    """A standard normal float32 batch of ``shape`` from ``seed``: every import's example input."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(tuple(shape), generator=generator).numpy()


def _trace(model: nn.Module, example_input: np.ndarray) -> torch.jit.ScriptModule:
    with torch.no_grad(), quiet_torch_quantization_warnings(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        traced = torch.jit.trace(model, torch.from_numpy(example_input), check_trace=False)
    return traced.eval()


# --- Relay import -------------------------------------------------------------------------------


def _import_to_relay(
    name: str,
    torchscript: torch.jit.ScriptModule,
    input_name: str,
    input_shape: tuple[int, ...],
    example_input: np.ndarray,
    layout: str,
) -> LoadedModel:
    try:
        mod, params = torch_quantized_ops.from_pytorch(torchscript, [(input_name, input_shape)])
    except Exception as error:  # the frontend raises anything from asserts to TVMError
        raise ValueError(
            f"TVM's PyTorch frontend could not import {name!r} with input {input_name} {input_shape}: "
            f"{tvm_error_message(error, limit=500)}"
        ) from error
    scale = output_scale(mod)
    quantized = _has_qnn_ops(mod)
    if layout == "NHWC":
        mod = convert_to_nhwc(mod)
    if quantized:  # PyTorch's x86 and fbgemm engines calibrate activations to 7 bits (reduce_range)
        mod = mod.with_attr(SEVEN_BIT_ACTIVATIONS, True)
    logger.info(
        "imported %s: %s, output scale %s, layout %s", name, "quantized" if quantized else "float", scale, layout
    )
    return LoadedModel(name, torchscript, mod, params, input_name, input_shape, example_input, scale, layout, quantized)


def _has_qnn_ops(mod: tvm.IRModule) -> bool:
    found: list[bool] = []

    def visit(node: relay.Expr) -> None:
        if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op) and node.op.name.startswith("qnn."):
            found.append(True)

    relay.analysis.post_order_visit(mod["main"].body, visit)
    return bool(found)


# --- argument checks ----------------------------------------------------------------------------


def _model_spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; available models: {', '.join(available_models())}")
    return MODELS[name]


def check_layout(layout: str) -> None:
    """ValueError (one line) unless ``layout`` is one of :data:`LAYOUTS`."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; use one of {', '.join(LAYOUTS)}")


def _check_load_arguments(spec: ModelSpec, batch_size: int, image_size: int, layout: str) -> None:
    check_layout(layout)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if spec.feature_count is None and spec.sample_shape is None and (not isinstance(image_size, int) or image_size < spec.min_image_size):
        raise ValueError(f"image_size must be an integer >= {spec.min_image_size} for this model, got {image_size!r}")


def _single_input(
    input_shapes: Mapping[str, Sequence[int]] | Sequence[tuple[str, Sequence[int]]],
) -> tuple[str, tuple[int, ...]]:
    pairs = list(input_shapes.items()) if isinstance(input_shapes, Mapping) else list(input_shapes)
    if len(pairs) != 1 or not isinstance(pairs[0], (tuple, list)) or len(pairs[0]) != 2:
        raise ValueError(
            "input_shapes must name exactly one input and its shape, e.g. {'input': (1, 3, 224, 224)}; "
            f"got {input_shapes!r}"
        )
    input_name, shape = pairs[0]
    if not isinstance(input_name, str) or not input_name:
        raise ValueError(f"input name must be a non-empty string, got {input_name!r}")
    try:
        dims = tuple(int(dim) for dim in shape)
    except (TypeError, ValueError):
        raise ValueError(f"input shape must be a sequence of positive integers, got {shape!r}") from None
    if not dims or any(dim < 1 for dim in dims):
        raise ValueError(f"input shape must be a sequence of positive integers, got {shape!r}")
    return input_name, dims


def _load_torchscript(path: str | os.PathLike) -> torch.jit.ScriptModule:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"TorchScript file not found: {os.fspath(path)}")
    try:
        module = torch.jit.load(os.fspath(path), map_location="cpu")
    except Exception as error:  # torch raises RuntimeError, or pickle/zip errors, for non-TorchScript files
        raise ValueError(
            f"{os.fspath(path)} is not a TorchScript file (save one with torch.jit.trace(...).save(path)): "
            f"{tvm_error_message(error, limit=500)}"
        ) from error
    return module.eval()


def _check_runs_on(torchscript: torch.jit.ScriptModule, example_input: np.ndarray) -> None:
    """Run the module once, so that a wrong input shape is reported by PyTorch, not deep in TVM."""
    try:
        with torch.no_grad():
            torchscript(torch.from_numpy(example_input))
    except Exception as error:
        raise ValueError(
            f"the TorchScript module does not accept an input of shape {tuple(example_input.shape)}: "
            f"{tvm_error_message(error, limit=500)}"
        ) from error
