"""TVM's default build, a step of ``relay_ext.compile(..., schedule="default")``: TOPI's schedules,
no database (bench's "TVM untuned" row, and what the per-task choice compares each task with)."""

from __future__ import annotations

from typing import Mapping, Optional

import tvm
from tvm import relay
from tvm.target import Target

from relay_ext.lowering.config import BUILD_OPTIONS
from relay_ext.lowering.prefold import passes_done, prefold_or_keep
from relay_ext.lowering.relay_build import copy_module
from relay_ext.lowering.x86 import x86_codegen


def _default_build(mod: tvm.IRModule, params: Optional[Mapping[str, tvm.nd.NDArray]],
                  target: Target, opt_level: int = 3) -> tvm.runtime.Module:
    """``relay.build`` of a copy of ``mod`` (``target`` already normalised) under quantfuse's build
    options at ``opt_level``. At 3 (bench's), the constants are folded by numpy first under the
    same options (:func:`relay_ext.lowering.prefold.prefold_or_keep`: Relay's own folding compiles
    each constant expression with LLVM); below 3, Relay's own pipeline runs
    on the module as given (``relay.build``'s default level is 2, without the layout pass the
    prefolding performs).

    A copy, because QNN canonicalization writes the default ``rounding`` and ``compute_dtype``
    into the attributes of every ``qnn.requantize`` it lowers, which would change the structural
    hash of the caller's module. quantfuse's x86 code generation is installed first
    (:mod:`relay_ext.lowering.x86.x86_codegen`: TOPI's VNNI dot product for this wheel's LLVM,
    else a VNNI ``-mcpu`` aborts the process)."""
    x86_codegen.install()
    if opt_level >= 3:
        mod, params = prefold_or_keep(mod, params, target, BUILD_OPTIONS)
    with tvm.transform.PassContext(opt_level=opt_level, config=BUILD_OPTIONS,
                                   disabled_pass=passes_done(mod)):
        return relay.build(copy_module(mod), target=target, params=params)
