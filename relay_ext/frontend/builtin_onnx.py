"""Built-in models made the way an ONNX Runtime user makes them: the float network exported to
ONNX and quantized QDQ by ONNX Runtime, then imported as any QDQ file.

:func:`relay_ext.frontend.models.load` takes this path for the built-ins PyTorch's eager-mode
quantization cannot quantize whole (``tiny_bert``: attention multiplies two activations). The
quantized file is kept for the life of the process (removed at exit): ONNX Runtime running it as
written is the model's reference, and the ONNX Runtime peer times the same file.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
from pathlib import Path

from relay_ext.frontend.models import BuiltinSource, LoadedModel

logger = logging.getLogger(__name__)


def load_through_onnx(name: str, batch_size: int, image_size: int, layout: str, seed: int) -> LoadedModel:
    """The built-in ``name`` (weights from ``seed``) quantized by ONNX Runtime
    (:func:`relay_ext.frontend.onnx_export.export_quantized`) and imported
    (:func:`relay_ext.frontend.onnx_import.from_onnx`); the example input is drawn from ``seed + 2``
    as :func:`~relay_ext.frontend.models.load` draws it. Needs onnx and onnxruntime
    (:class:`~relay_ext.frontend.optional_deps.MissingDependency` otherwise)."""
    from relay_ext.frontend.onnx_export import export_quantized
    from relay_ext.frontend.onnx_import import from_onnx

    directory = Path(tempfile.mkdtemp(prefix=f"quantfuse-{name}-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    path = export_quantized(name, directory / f"{name}_int8.onnx", batch_size=batch_size,
                            image_size=image_size, seed=seed)
    loaded = from_onnx(path, layout=layout, seed=seed + 2)
    loaded.name = name
    loaded.builtin = BuiltinSource(name, batch_size, image_size, seed)
    logger.info("built-in %s quantized by ONNX Runtime: %s", name, path)
    return loaded
