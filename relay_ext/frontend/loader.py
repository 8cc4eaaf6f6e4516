"""One way to load a model: a built-in name or a model file of any supported format, as a
:class:`~relay_ext.frontend.models.LoadedModel` (Relay module, params, example input and the
reference runtime its outputs are checked against).

    model = relay_ext.load_model("resnet18", image_size=224)                 # built-in, int8
    model = relay_ext.load_model("net.pt", input_shape=(1, 3, 224, 224))     # quantized TorchScript
    model = relay_ext.load_model("net_qdq.onnx")        # QDQ ONNX: its input shape is read from it
    model = relay_ext.load_model("net_qop.onnx")        # QOperator ONNX (QLinearConv, ...): as QDQ
    model = relay_ext.load_model("net.pt2")             # PT2E program (torch.export.save; torchao)

The format comes from the file's suffix (:func:`model_format`): ``.onnx`` ONNX, ``.pt2`` a PT2E
program, any other file TorchScript; a name that is not a file is a built-in model
(:func:`relay_ext.frontend.models.available_models`). What cannot be loaded from what was given
(an unknown name, a missing file, a directory, a TorchScript file without its input shape, a float
ONNX model, a missing optional package, an op the import lacks) is a ``ValueError`` whose first
line says why (:class:`ModelSourceError` for the checks made before anything is read); a TVM check
failing inside an import nothing given explains is a
:class:`~meta_rules.base.tvm_errors.QuantfuseBug`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from relay_ext.frontend import models
from relay_ext.frontend.models import DEFAULT_SEED, LoadedModel

TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript")
ONNX_SUFFIX = ".onnx"
PT2E_SUFFIX = ".pt2"
BUILTIN, TORCHSCRIPT, ONNX, PT2E = "built-in", "TorchScript", "ONNX", "PT2E"

Source = str | os.PathLike


class ModelSourceError(ValueError):
    """The model cannot come from what was given (unknown name, missing file, a directory, no
    input shape for a TorchScript file, an input shape that contradicts the model): one line."""


def is_model_file(source: Source) -> bool:
    """Whether ``source`` names a file (a path, a model file's suffix, or an existing path) rather
    than a built-in model."""
    text = os.fspath(source)
    return (os.sep in text or text.lower().endswith((*TORCHSCRIPT_SUFFIXES, ONNX_SUFFIX, PT2E_SUFFIX))
            or os.path.exists(text))


def model_format(source: Source) -> str:
    """:data:`BUILTIN`, :data:`ONNX`, :data:`PT2E` or :data:`TORCHSCRIPT`, from the name alone."""
    if not is_model_file(source):
        return BUILTIN
    text = os.fspath(source).lower()
    if text.endswith(ONNX_SUFFIX):
        return ONNX
    if text.endswith(PT2E_SUFFIX):
        return PT2E
    return TORCHSCRIPT


def _builtin_names() -> str:
    return ", ".join(models.available_models())


def checked_shape(input_shape: Sequence[int] | None) -> tuple[int, ...] | None:
    """``input_shape`` as a tuple of positive ints (None stays None); :class:`ModelSourceError`
    otherwise."""
    if input_shape is None:
        return None
    try:
        shape = tuple(int(d) for d in input_shape)
    except (TypeError, ValueError):
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise ModelSourceError(f"input shape {input_shape!r} is not a list of positive integers, "
                               "e.g. (1, 3, 224, 224)")
    return shape


def check_source(source: Source, input_shape: Sequence[int] | None = None) -> str:
    """The cheap checks of a model source, before anything is read: a built-in name, or an
    existing file (a TorchScript file needs its input shape; an ONNX file and a .pt2 program name
    their own). Returns its :func:`model_format`; :class:`ModelSourceError` otherwise."""
    kind = model_format(source)
    text = os.fspath(source)
    if kind == BUILTIN:
        if text not in models.MODELS:
            raise ModelSourceError(f"unknown model {text!r}; built-in models: {_builtin_names()} "
                                   "(or a TorchScript, ONNX or .pt2 file)")
        return kind
    if os.path.isdir(text):
        raise ModelSourceError(f"{text} is a directory; pass a TorchScript (.pt), ONNX (.onnx) or "
                               f"PT2E (.pt2) file, or a built-in model ({_builtin_names()})")
    if not os.path.isfile(text):  # before the shape: a mistyped path is the problem
        raise ModelSourceError(f"model file not found: {text}; pass a built-in model "
                               f"({_builtin_names()}) or an existing file")
    if kind == TORCHSCRIPT and input_shape is None:
        raise ModelSourceError("a TorchScript model needs its input shape: input_shape=(1, 3, 224, "
                               "224), --input-shape 1,3,224,224 on the command line")
    checked_shape(input_shape)
    return kind


def load_model(
    source: Source,
    *,
    input_shape: Sequence[int] | None = None,
    image_size: int = 224,
    batch_size: int = 1,
    layout: str = "NCHW",
    seed: int = DEFAULT_SEED,
) -> LoadedModel:
    """The model ``source`` names, loaded for TVM: a built-in model (``batch_size`` x 3 x
    ``image_size`` x ``image_size``, random weights from ``seed``), a quantized TorchScript file
    (``input_shape`` required), a QDQ or QOperator ONNX file (``input_shape`` only for a dynamic
    input; the format is read from the file) or a
    PT2E program (``.pt2``; ``input_shape``, when given, must be the program's). ``layout``
    "NHWC" converts the Relay module's convolutions; the input stays NCHW. ``seed`` also draws the
    example input. Errors: see the module doc."""
    kind = check_source(source, input_shape)
    shape = checked_shape(input_shape)
    try:
        return _load(kind, os.fspath(source), shape, image_size, batch_size, layout, seed)
    except ValueError as error:
        from meta_rules.base.tvm_errors import QuantfuseBug, check_failure

        failed = check_failure(error)  # a TVM check failure under the frontend's ValueError: ours
        if failed is not None:
            raise QuantfuseBug(f"importing {os.fspath(source)}", failed) from error
        raise
    except FileNotFoundError:
        raise
    except Exception as error:  # a TVM check failure past the checks of the input: ours
        from meta_rules.base.tvm_errors import QuantfuseBug, is_tvm_failure

        if is_tvm_failure(error):
            raise QuantfuseBug(f"importing {os.fspath(source)}", error) from error
        raise


def _load(kind: str, source: str, shape: tuple[int, ...] | None, image_size: int,
          batch_size: int, layout: str, seed: int) -> LoadedModel:
    if kind == BUILTIN:
        loaded = models.load(source, batch_size=batch_size, image_size=image_size, layout=layout,
                             seed=seed)
        if shape is not None and shape != tuple(loaded.input_shape):
            raise ModelSourceError(f"input shape {','.join(map(str, shape))} is not the built-in "
                                   f"model's {','.join(map(str, loaded.input_shape))} (set "
                                   "batch_size and image_size instead)")
        return loaded
    if kind == ONNX:
        from relay_ext.frontend.onnx_import import from_onnx

        return from_onnx(source, input_shape=shape, layout=layout, seed=seed)
    if kind == PT2E:
        from relay_ext.frontend.pt2e_import import from_exported_program

        loaded = from_exported_program(source, layout=layout, seed=seed)
        if shape is not None and shape != tuple(loaded.input_shape):
            raise ModelSourceError(
                f"input shape {','.join(map(str, shape))} does not match the program's input "
                f"{','.join(map(str, loaded.input_shape))} (a .pt2 program fixes its shape; "
                "leave the input shape out)")
        return loaded
    return models.from_torchscript(source, {models.DEFAULT_INPUT_NAME: shape}, layout=layout,
                                   seed=seed)
