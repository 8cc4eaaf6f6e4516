"""TVM loaded as its runtime alone: ``libtvm_runtime.so``, not the compiler's ``libtvm.so``.

The TVM wheel ships both libraries. ``import tvm`` loads ``libtvm.so`` and, with it, the Python
packages of Relay, Relax and MetaSchedule; with ``TVM_USE_RUNTIME_LIB`` set it loads
``libtvm_runtime.so`` and leaves them out, as on a machine that has only TVM's runtime. Exported
libraries (:mod:`relay_ext.deploy.export`) need nothing more, so ``quantfuse run`` asks for the
runtime alone before anything imports TVM: then it runs as it will on a deploy machine.

Only a process that does nothing else with TVM may ask: once the runtime alone is loaded, the
compiler (``tvm.relay``, ``relay.build``) cannot be loaded into the same process.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys

logger = logging.getLogger(__name__)

RUNTIME_LIB_VARIABLE = "TVM_USE_RUNTIME_LIB"  # read by tvm._ffi.libinfo.find_lib_path


def load_tvm_runtime_only() -> bool:
    """Import TVM with its runtime library alone, when nothing has imported TVM yet; True when
    that is what this process now has. TVM's own line "Loading runtime library ... exec only" is
    not printed, and the variable is removed again, so that child processes load TVM as usual. A
    TVM without a runtime library of its own is imported as usual (False)."""
    if "tvm" in sys.modules:
        return _runtime_only()
    previous = os.environ.get(RUNTIME_LIB_VARIABLE)
    os.environ[RUNTIME_LIB_VARIABLE] = "1"
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            import tvm.runtime  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
    except (OSError, RuntimeError) as error:  # no libtvm_runtime.so beside libtvm.so
        logger.debug("TVM's runtime library alone could not be loaded (%s)", error)
        for name in [name for name in sys.modules if name == "tvm" or name.startswith("tvm.")]:
            del sys.modules[name]
        os.environ.pop(RUNTIME_LIB_VARIABLE, None)
        import tvm.runtime  # noqa: F401,F811 pylint: disable=import-outside-toplevel,reimported
    finally:
        if previous is None:
            os.environ.pop(RUNTIME_LIB_VARIABLE, None)
        else:
            os.environ[RUNTIME_LIB_VARIABLE] = previous
    return _runtime_only()


def _runtime_only() -> bool:
    from tvm._ffi import base  # pylint: disable=import-outside-toplevel

    return bool(base._RUNTIME_ONLY)  # pylint: disable=protected-access
