"""TVM's default build: TOPI's schedules, no database (bench's untuned row and the per-task choice's default)."""

from __future__ import annotations
from collections.abc import Mapping
import numpy as np
import tvm
from tvm import relay
from relay_ext.lowering.x86 import x86_codegen
from relay_ext.lowering.relay_build import copy_module
from relay_ext.measure.run import run_module


def build_untuned(
    mod: tvm.IRModule, params: Mapping[str, tvm.nd.NDArray] | None, target: str = "llvm"
) -> tvm.relay.backend.executor_factory.ExecutorFactoryModule:
    """TVM's default (untuned) build, ``relay.build(mod, target, params=params)``, under the
    caller's PassContext (TVM's default one is opt level 2) and TVM's fallback schedules.

    It builds a copy: QNN canonicalization writes the default ``rounding`` and ``compute_dtype``
    into the attributes of every ``qnn.requantize`` it lowers (a ``const_cast`` in TVM's
    requantize.cc), which would change the structural hash of the caller's module.
    quantfuse's x86 code generation is installed first (:mod:`relay_ext.lowering.x86.x86_codegen`:
    TOPI's VNNI dot product for this wheel's LLVM, else a VNNI ``-mcpu`` aborts the process).
    """
    x86_codegen.install()
    return relay.build(copy_module(mod), target=target, params=params)


def run_untuned(
    mod: tvm.IRModule,
    params: Mapping[str, tvm.nd.NDArray] | None,
    inputs: Mapping[str, np.ndarray],
    target: str = "llvm",
) -> list[np.ndarray]:
    """Build ``mod`` with :func:`build_untuned` and run it once on CPU with the graph executor."""
    return run_module(build_untuned(mod, params, target), inputs)


def build_default(mod: tvm.IRModule, params: Mapping[str, tvm.nd.NDArray] | None,
                  target: tvm.target.Target) -> tvm.runtime.Module:
    """TVM's untuned build (TOPI's default schedules, opt level 3, quantfuse's build options),
    its constants folded by numpy first under the same options (ResNet-50: Relay's folding
    compiled ~1000 constant expressions with LLVM)."""
    from relay_ext.lowering.config import BUILD_OPTIONS  # pylint: disable=import-outside-toplevel
    from relay_ext.build.whole_model import prefolded  # pylint: disable=import-outside-toplevel

    mod, params = prefolded(mod, params, target, BUILD_OPTIONS)
    with tvm.transform.PassContext(opt_level=3, config=BUILD_OPTIONS):
        return build_untuned(mod, params, target)
