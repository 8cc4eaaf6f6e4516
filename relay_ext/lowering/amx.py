"""AMX (Intel Advanced Matrix Extensions): the kernel's permission, and the guard on targets.

Two things must hold before a process may execute AMX tile instructions:

1. the CPU has them and the OS enables them: ``amx_tile`` and ``amx_int8`` in the ``flags`` of
   ``/proc/cpuinfo`` (the kernel clears a flag whose register state it does not save);
2. the process asked the kernel for the tile data state (Linux 5.16+): the AMX register file is
   8 KiB per thread, so the kernel grants it per process on request,
   ``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``. A process that executes ``ldtilecfg``
   without it dies with SIGILL (measured 2026-12-01: a TOPI dense built for
   ``-mcpu=sapphirerapids``, exit 132).

    request_amx_tile_data()       # True when the kernel granted it to this process
    amx_tile_data_granted()       # True when this process already holds it (asks nothing)
    amx_features("llvm -mcpu=sapphirerapids")  # ['amx-bf16', 'amx-int8', 'amx-tile', ...]
    supported_amx(Target("llvm -mcpu=sapphirerapids -num-cores 2"))
        # llvm -mcpu=cascadelake -mattr=+amx-tile,+amx-int8 ... where this process can run AMX,
        # else llvm -mcpu=cascadelake ... (without_amx)

quantfuse's AMX code is :mod:`meta_rules.amx_conv` (int8 3x3 convs tensorized on tiles, with the
layout :mod:`relay_ext.lowering.amx_layout` makes Relay choose). It needs ``amx-tile`` and
``amx-int8`` and nothing else; TVM 0.19's own AMX schedules (TOPI's dense and batch_matmul) fail
to build or crash here and are kept out. So every llvm target quantfuse takes
(:func:`relay_ext.lowering.targets.normalize_target`) keeps of its AMX features, as LLVM resolves
its ``-mcpu`` and ``-mattr`` (not a list of CPU names), only those two, and only where this
process can run AMX code: it asks the kernel for tile data right then (:func:`supported_amx`).
Elsewhere the target is mapped to the best non-AMX ``-mcpu`` its features cover, with one
warning (:func:`without_amx`): AMX code never reaches a process that cannot run it. MetaSchedule's
runner workers ask for tile data when they start (:func:`request_amx_tile_data_in_worker`).
"""

from __future__ import annotations

import ctypes
import logging
import platform
from typing import Iterable, Optional

# The guard on targets lives with the other target checks (imported here for the docs' names).
from .targets import (amx_features, host_cpu_flags, short_text, supported_amx,  # noqa: F401
                      without_amx)

logger = logging.getLogger(__name__)

# linux/arch/x86/include/uapi/asm/prctl.h and asm/fpu/xstate.h
SYS_ARCH_PRCTL_X86_64 = 158
ARCH_GET_XCOMP_PERM = 0x1022
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18

# The cpuinfo flags that AMX int8 code needs the OS to enable.
AMX_INT8_FLAGS = ("amx_tile", "amx_int8")


def _arch_prctl(code: int, arg) -> Optional[int]:
    """The raw ``arch_prctl`` system call (glibc has no wrapper); None off Linux x86-64."""
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    return int(syscall(ctypes.c_long(SYS_ARCH_PRCTL_X86_64), ctypes.c_long(code), arg))


def amx_tile_data_granted() -> bool:
    """Whether this process holds the kernel's permission for AMX tile data (asks for nothing)."""
    permitted = ctypes.c_uint64(0)
    result = _arch_prctl(ARCH_GET_XCOMP_PERM, ctypes.byref(permitted))
    return result == 0 and bool(permitted.value & (1 << XFEATURE_XTILEDATA))


def request_amx_tile_data(flags: Optional[Iterable[str]] = None) -> bool:
    """Ask the kernel for AMX tile data in this process; True when it is granted (now or before).

    False without asking where the OS does not enable AMX int8 (``flags``, default this host's
    /proc/cpuinfo flags, lacks :data:`AMX_INT8_FLAGS`), off Linux x86-64, or when the kernel
    refuses (before 5.16: EINVAL). The permission is per process (threads share it, a forked
    child inherits it, an exec'd one does not): ask in every process that runs AMX code."""
    flags = host_cpu_flags() if flags is None else frozenset(flags)
    if flags is None or not set(AMX_INT8_FLAGS) <= set(flags):
        return False
    result = _arch_prctl(ARCH_REQ_XCOMP_PERM, ctypes.c_ulong(XFEATURE_XTILEDATA))
    if result is None:
        return False
    if result != 0:
        logger.debug("arch_prctl(ARCH_REQ_XCOMP_PERM) refused: errno %d", ctypes.get_errno())
    return amx_tile_data_granted()


def request_amx_tile_data_in_worker() -> None:
    """:func:`request_amx_tile_data` as a process-pool initializer (MetaSchedule's LocalRunner
    workers): nothing to return, nothing raised."""
    try:
        request_amx_tile_data()
    except Exception:  # pylint: disable=broad-except - a worker without AMX still runs the rest
        logger.debug("could not ask for AMX tile data in a runner worker", exc_info=True)
