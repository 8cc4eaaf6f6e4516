"""AMX (Intel Advanced Matrix Extensions): the kernel's permission, and the guard on targets.

Two things must hold before a process may execute AMX tile instructions:

1. the CPU has them and the OS enables them: ``amx_tile`` and ``amx_int8`` in the ``flags`` of
   ``/proc/cpuinfo`` (the kernel clears a flag whose register state it does not save);
2. the process asked the kernel for the tile data state (Linux 5.16+): the AMX register file is
   8 KiB per thread, so the kernel grants it per process on request,
   ``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``. A process that executes ``ldtilecfg``
   without it dies with SIGILL (a TOPI dense built for ``-mcpu=sapphirerapids`` exits with
   132).

    amx.request_amx_tile_data()              # True when the kernel granted it to this process
    amx_permission.amx_tile_data_granted()   # True when this process already holds it (asks nothing)
    targets.amx_features("llvm -mcpu=sapphirerapids")  # ['amx-bf16', 'amx-int8', 'amx-tile', ...]
    targets.supported_amx(Target("llvm -mcpu=sapphirerapids -num-cores 2"))
        # llvm -mcpu=cascadelake -mattr=+amx-tile,+amx-int8 ... where this process can run AMX,
        # else llvm -mcpu=cascadelake ... (without_amx)

This module asks for this host (its /proc/cpuinfo flags); :mod:`.amx_permission` makes the
system calls (the one wrapper of ``arch_prctl``), :mod:`relay_ext.lowering.targets` decides which targets keep AMX.

quantfuse's AMX code is :mod:`meta_rules.cpu.amx_conv` (int8 3x3 convs tensorized on tiles, with the
layout :mod:`relay_ext.lowering.x86.amx_layout` makes Relay choose). It needs ``amx-tile`` and
``amx-int8`` and nothing else; TVM 0.19's own AMX schedules (TOPI's dense and batch_matmul) fail
to build or crash here and are kept out. So every llvm target quantfuse takes
(:func:`relay_ext.lowering.targets.normalize_target`) keeps of its AMX features, as LLVM resolves
its ``-mcpu`` and ``-mattr`` (not a list of CPU names), only those two, and only where this
process can run AMX code: it asks the kernel for tile data right then
(:func:`~relay_ext.lowering.targets.supported_amx`). Elsewhere the target is mapped to the best
non-AMX ``-mcpu`` its features cover, with one warning
(:func:`~relay_ext.lowering.targets.without_amx`): AMX code never reaches a process that cannot
run it. MetaSchedule's
runner workers ask for tile data when they start (:func:`request_amx_tile_data_in_worker`).
"""

from __future__ import annotations

import logging
from typing import Iterable, Optional

from relay_ext.lowering.targets import host_cpu_flags
from relay_ext.lowering.x86.amx_permission import request_tile_data

logger = logging.getLogger(__name__)


def request_amx_tile_data(flags: Optional[Iterable[str]] = None) -> bool:
    """Ask the kernel for AMX tile data in this process; True when it is granted (now or before).

    False without asking where the OS does not enable AMX int8 (``flags``, default this host's
    /proc/cpuinfo flags, lacks :data:`~.amx_permission.AMX_INT8_FLAGS`), off Linux x86-64, or
    when the kernel refuses (before 5.16: EINVAL). The permission is per process (threads share it, a forked
    child inherits it, an exec'd one does not): ask in every process that runs AMX code."""
    flags = host_cpu_flags() if flags is None else frozenset(flags)
    return flags is not None and request_tile_data(flags)


def request_amx_tile_data_in_worker() -> None:
    """:func:`request_amx_tile_data` as a process-pool initializer (MetaSchedule's LocalRunner
    workers): nothing to return, nothing raised."""
    try:
        request_amx_tile_data()
    except Exception:  # pylint: disable=broad-except - a worker without AMX still runs the rest
        logger.debug("could not ask for AMX tile data in a runner worker", exc_info=True)
