"""relay_ext: the Relay/TE side of quantfuse -- converter hook, models, tuning flow, CLI."""

import os as _os

# Relay's AutoTVM fallback would try to download TopHub logs; quantfuse never uses the network.
_os.environ.setdefault("TOPHUB_LOCATION", "NONE")

from . import tir_converter  # registers relay.backend.tir_converter.inline_constants
from .config import pass_config
from . import accuracy, models  # quantized PyTorch models (relay_ext.models.load) and TVM-vs-PyTorch step error
from .tuning import compile_model as compile  # noqa: A001 - the issue's name: relay_ext.compile
from .tuning import extract_tasks, run_module, tune
