"""TVM's TensorIntrins, registered per target before a schedule rule or a tuning record names one.

Tensorizing rules (``MultiLevelTilingTensorCore``, the x86 VNNI / AVX-512 dot products ...) and
the records they leave in a tuning database name intrinsics from TVM's registry, which TVM fills
only on import of ``tvm.tir.tensor_intrin.<family>``. The package's ``__init__`` imports every
family, which takes seconds (CUDA's alone parses thousands of TVMScript functions); one family
such as x86's takes a fraction of that. So each target imports its own families::

    register_tensor_intrinsics("llvm -mcpu=cascadelake")  # x86 only
    register_tensor_intrinsics("nvidia/nvidia-a100")      # cuda
    register_tensor_intrinsics(None)                      # every family (target unknown)

A later plain ``import tvm.tir.tensor_intrin`` still runs TVM's ``__init__``, which reuses the
families already loaded and loads the others. MetaSchedule's ``TuneContext`` makes that import
itself, so design-space generation and tuning pay for every family anyway
(:func:`meta_rules.rule_sets.rule_set` imports them all here first, the fast way below); what a
target's own families save is the work that creates no TuneContext: opening a tuning database,
compiling with it, and the CLI's start. What a database's records name, AMX intrinsics included,
is registered by :func:`meta_rules.database_intrinsics.register_database_intrinsics`.

Parsing the families is slow for a reason outside them: TVMScript's ``@T.prim_func`` calls
``inspect.stack()`` for each function, which reads the source of every frame on the stack and
scans all of ``sys.modules`` for each one, yet only the third frame is looked at (is the function
written inside an ``@I.ir_module`` class?), so the cost grows with the modules a process has
loaded (PyTorch, ONNX). While the families are imported here, TVMScript's parser gets a stack of
its first three frames only (:func:`_shallow_tvmscript_stacks`); the functions parsed are the
same. The times are in docs/BENCHMARKS.md ("TensorIntrin families: import time").
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import sys
from typing import Iterator, List, Optional, Tuple, Union

from tvm.target import Target

PACKAGE = "tvm.tir.tensor_intrin"

# target kind -> the families whose intrinsics TVM's default rules for that kind name
_FAMILIES_BY_KIND = {
    "cuda": ("cuda",),
    "rocm": ("rocm",),
    "metal": ("metal",),
    "hexagon": ("hexagon",),
    "vulkan": (),
    "opencl": (),
    "webgpu": (),
}


def families_for(target: Union[str, Target, None]) -> Optional[Tuple[str, ...]]:
    """The families ``target`` needs; None when it is unknown (then every family)."""
    if target is None:
        return None
    target = target if isinstance(target, Target) else Target(target)
    kind = target.kind.name
    if kind == "llvm":
        triple = str(target.attrs.get("mtriple", ""))
        is_arm = "arm_cpu" in target.keys or triple.startswith(("aarch64", "arm"))
        return ("arm_cpu",) if is_arm else ("x86",)
    return _FAMILIES_BY_KIND.get(kind)


def register_tensor_intrinsics(target: Union[str, Target, None] = None) -> None:
    """Import the intrinsic families ``target`` needs (all of them when ``target`` is None)."""
    families = families_for(target)
    if families is None or PACKAGE in sys.modules:
        with _shallow_tvmscript_stacks():
            importlib.import_module(PACKAGE)  # TVM's __init__: every family (a no-op the second time)
            for family in families or ():
                importlib.import_module(f"{PACKAGE}.{family}")  # metal is not in TVM's __init__
        return
    missing = [f for f in families if f"{PACKAGE}.{f}" not in sys.modules]
    if missing:
        _import_families_alone(missing)


class _InspectWithShallowStack:
    """The ``inspect`` module as TVMScript's ``prim_func`` sees it while intrinsics are parsed:
    ``stack()`` returns the caller's first ``depth`` frames, built as ``inspect.stack`` builds
    them, instead of all of them; everything else is ``inspect`` itself."""

    def __init__(self, depth: int) -> None:
        self._depth = depth

    def __getattr__(self, name: str):
        return getattr(inspect, name)

    def stack(self, context: int = 1) -> List[inspect.FrameInfo]:
        frames: List[inspect.FrameInfo] = []
        frame = sys._getframe(1)  # pylint: disable=protected-access  # the caller, as inspect.stack
        while frame is not None and len(frames) < self._depth:
            info = inspect.getframeinfo(frame, context)
            frames.append(inspect.FrameInfo(frame, *info, positions=info.positions))
            frame = frame.f_back
        return frames


@contextlib.contextmanager
def _shallow_tvmscript_stacks(depth: int = 3) -> Iterator[None]:
    """While the block runs, TVMScript's ``prim_func`` decorator gets stacks of ``depth`` frames
    (it reads ``frames[2]`` alone, ``tvm/script/parser/core/utils.py:is_defined_in_class``).
    Where TVM's parser module is not laid out as in 0.19, nothing is changed."""
    try:
        from tvm.script.parser.tir import entry  # pylint: disable=import-outside-toplevel
    except ImportError:
        entry = None
    if entry is None or getattr(entry, "inspect", None) is not inspect:
        yield
        return
    entry.inspect = _InspectWithShallowStack(depth)
    try:
        yield
    finally:
        entry.inspect = inspect


def family_module(family: str):
    """TVM's ``tvm.tir.tensor_intrin.<family>`` module, imported alone if it is not yet."""
    name = f"{PACKAGE}.{family}"
    if name not in sys.modules:
        _import_families_alone([family])
    return sys.modules[name]


def _import_families_alone(families) -> None:
    """Import ``PACKAGE.<family>`` without running ``PACKAGE/__init__.py``: the package is put in
    ``sys.modules`` unexecuted for the duration, then taken out again, so that the next plain
    import of the package runs TVM's ``__init__`` in full."""
    spec = importlib.util.find_spec(PACKAGE)
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    try:
        with _shallow_tvmscript_stacks():
            for family in families:
                importlib.import_module(f"{PACKAGE}.{family}")
    finally:
        del sys.modules[PACKAGE]
        parent = sys.modules["tvm.tir"]
        if getattr(parent, "tensor_intrin", None) is package:
            delattr(parent, "tensor_intrin")
