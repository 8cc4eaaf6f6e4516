"""The kernel's permission for AMX tile data, asked for and checked (Linux x86-64).

The AMX register file is 8 KiB per thread, so Linux (5.16+) grants it per process on request:
``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``; a process that executes a tile
instruction without it dies with SIGILL. This module only makes the system calls, for the flags
it is given; :mod:`.amx` asks for this host, and :mod:`relay_ext.lowering.targets` decides from the answer whether
a target keeps its AMX features. It imports nothing of quantfuse, so both can use it.
"""

from __future__ import annotations

import ctypes
import logging
import platform
from typing import Iterable, Optional

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


def request_tile_data(flags: Iterable[str]) -> bool:
    """Ask the kernel for AMX tile data in this process; True when it is granted (now or before).
    False without asking where ``flags`` (the OS's /proc/cpuinfo flags) lack
    :data:`AMX_INT8_FLAGS`, off Linux x86-64, or when the kernel refuses (before 5.16: EINVAL)."""
    if not set(AMX_INT8_FLAGS) <= set(flags):
        return False
    result = _arch_prctl(ARCH_REQ_XCOMP_PERM, ctypes.c_ulong(XFEATURE_XTILEDATA))
    if result is None:
        return False
    if result != 0:
        logger.debug("arch_prctl(ARCH_REQ_XCOMP_PERM) refused: errno %d", ctypes.get_errno())
    return amx_tile_data_granted()
