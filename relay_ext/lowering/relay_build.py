"""The Relay build step under every quantfuse build: TVM's x86 code generation and Relay's build
settings installed on import, a deep copy of the caller's module, and MetaSchedule's Relay build
with a set of records as they are (:func:`compile_with`, a step of ``relay_ext.compile``, which
chooses those records: :mod:`relay_ext.build`).
"""

from __future__ import annotations

import logging
from typing import Mapping, Optional

import tvm
from tvm import meta_schedule as ms
from tvm.target import Target


from relay_ext.lowering import cached_libinfo, depthwise_padding, table_lookup_index
from relay_ext.lowering.config import pass_config
from relay_ext.lowering.prefold import passes_done
from relay_ext.lowering.x86 import x86_codegen

# TVM's VNNI dot products re-registered for the LLVM 22 this wheel links (else any int8 build for
# a VNNI -mcpu aborts the process), our VNNI conv schedule and the AMX conv layout; before anything
# here extracts, tunes or builds.
x86_codegen.install()
# Relay's TE compiler reads TVM's build settings once per process instead of once per dimension.
cached_libinfo.install()
# QNN table lookups (sigmoid, hardswish ...) indexed in int32: TVM's uint8 index wraps
table_lookup_index.register()
# A depthwise conv pads its input inside its own kernel, not in a copy of its own
depthwise_padding.register()

logger = logging.getLogger(__name__)

# Relay's TE compiler warns once per process, on the "autotvm" logger (Python logging, with no
# handler: Python's last-resort handler prints it to the terminal), whenever an op has no AutoTVM
# record -- always, for a MetaSchedule build. The line goes to quantfuse's log at DEBUG instead,
# where TVM's other messages go (the CLI sends TVM's native log to the work dir's tvm.log).
UNTUNED_WARNING = "One or more operators have not been tuned"
# The same logger warns once per workload that TOPI's default schedule of an op (bench's untuned
# row, the per-task choice's default builds) uses AutoTVM's fallback configuration: what "TVM's
# default schedule" means here, so not news to the user (7 lines in a ResNet-18 bench).
FALLBACK_WARNING = "Cannot find config for target="


class _RouteUntunedWarning(logging.Filter):
    """Drops TVM's "not been tuned" and "fallback configuration" warnings from the ``autotvm``
    logger, logging them at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if UNTUNED_WARNING in message or message.startswith(FALLBACK_WARNING):
            logger.debug("TVM (autotvm): %s", message)
            return False
        return True


def route_untuned_warning() -> None:
    """Install :class:`_RouteUntunedWarning` on the ``autotvm`` logger (once per process)."""
    autotvm_logger = logging.getLogger("autotvm")
    if not any(isinstance(f, _RouteUntunedWarning) for f in autotvm_logger.filters):
        autotvm_logger.addFilter(_RouteUntunedWarning())


route_untuned_warning()


def copy_module(mod: tvm.IRModule) -> tvm.IRModule:
    """A deep copy of a Relay module (attributes included), through TVM's JSON serialization.

    Relay's QNN canonicalization writes the default ``rounding`` and ``compute_dtype`` into the
    attributes of every ``qnn.requantize`` it lowers (a ``const_cast`` in TVM's requantize.cc), which
    changes the caller's module; every build and extraction here works on a copy.
    """
    return tvm.ir.load_json(tvm.ir.save_json(mod))


def compile_with(records: ms.Database, mod: tvm.IRModule,
                 params: Optional[Mapping[str, tvm.nd.NDArray]], target: Target,
                 variant: str) -> tvm.runtime.Module:
    """MetaSchedule's Relay build of a copy of ``mod`` with ``records`` as they are (no choice
    among them) under ``variant``'s pass configuration: a step of ``relay_ext.compile``, which
    chooses the records."""
    return ms.relay_integration.compile_relay(records, copy_module(mod), target, params,
                                              pass_config=pass_config(variant),
                                              disabled_pass=passes_done(mod))


