"""TVM's build information read once per process, not once per tensor dimension Relay lowers.

Relay's TE compiler converts the shape of every operator it lowers with
``tvm.relay.backend.te_compiler.get_shape``, which asks ``tvm.support.libinfo()`` for every
dimension whether TVM was built with 64-bit default indices. ``libinfo()`` builds a new dict of
TVM's ~200 compile-time settings through the FFI each time, and a Relay build calls it thousands
of times: a large share of a small model's build (docs/BENCHMARKS.md). The settings are fixed
when TVM is compiled, so :func:`install` gives the TE compiler a ``libinfo`` that reads them
once and hands out copies.

    install()   # idempotent; relay_ext.lowering.relay_build calls it before anything extracts or builds
"""

from __future__ import annotations

import functools
import logging
from typing import Dict

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _settings() -> Dict[str, str]:
    from tvm import support  # pylint: disable=import-outside-toplevel

    return support.libinfo()


def libinfo() -> Dict[str, str]:
    """``tvm.support.libinfo()``, read on the first call only (a copy each call)."""
    return dict(_settings())


def install() -> bool:
    """Make Relay's TE compiler use :func:`libinfo`; True when it does (also when it already did).
    Where TVM's module no longer reads ``libinfo`` by that name, nothing is changed (False)."""
    from tvm.relay.backend import te_compiler  # pylint: disable=import-outside-toplevel

    current = getattr(te_compiler, "libinfo", None)
    if current is libinfo:
        return True
    if current is None:
        logger.debug("tvm.relay.backend.te_compiler has no libinfo; left as it is")
        return False
    te_compiler.libinfo = libinfo
    return True
