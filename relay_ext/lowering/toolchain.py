"""The C compiler that TVM links compiled code with, checked before work that needs it.

TVM turns a compiled module into a shared library by calling a C compiler: every candidate a tune
measures on this machine (MetaSchedule's runner links each one), every export, and PyTorch
Inductor's kernels. Without one those steps fail deep inside TVM; :func:`require_c_compiler`
says so in one line before anything starts.

    problem = c_compiler_problem()   # None, or what is missing and how to fix it
    require_c_compiler()             # MissingCCompiler (a ValueError) with that sentence

TVM looks for the compiler as :func:`tvm.contrib.cc.get_cc` does: ``CXX`` or else ``CC`` when set
(taken as they are), otherwise the first of ``g++``, ``gcc``, ``clang++``, ``clang``, ``c++``,
``cc`` on ``PATH``. Only stdlib is imported at module level, so the command line can map
:class:`MissingCCompiler` to its exit code without loading TVM.
"""

from __future__ import annotations

import os
import shutil
from typing import Optional

FIX = "install one (Debian/Ubuntu: apt-get install build-essential; Fedora: dnf install gcc) or " \
      "set CC to the path of an installed C compiler"


class MissingCCompiler(ValueError):
    """No C compiler for TVM to link compiled code with (see :func:`c_compiler_problem`)."""


def c_compiler_problem() -> Optional[str]:
    """None when TVM finds a C compiler that exists; else one sentence naming what is missing and
    how to fix it."""
    for variable in ("CXX", "CC"):  # TVM's order: the first one set is used, as it is
        value = os.environ.get(variable)
        if value:
            if shutil.which(value) is None:
                return (f"{variable}={value!r} names no executable C compiler, and TVM links "
                        f"compiled code with it: point {variable} at an installed compiler "
                        f"(e.g. gcc), or unset it")
            return None
    from tvm.contrib.cc import get_cc  # pylint: disable=import-outside-toplevel

    if get_cc() is None:
        return ("no C compiler found on PATH (TVM looks for g++, gcc, clang++, clang, c++, cc) "
                f"to link compiled code with: {FIX}")
    return None


def require_c_compiler() -> None:
    """Raise :class:`MissingCCompiler` saying what is missing when TVM would find no C compiler."""
    problem = c_compiler_problem()
    if problem is not None:
        raise MissingCCompiler(problem)
