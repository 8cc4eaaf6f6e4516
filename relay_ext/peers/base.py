"""What every peer runtime offers bench: one interface.

    peer = OpenVINOPeer()
    ok, reason = peer.available()                 # its package here? (False, "why") if not
    prepared = peer.prepare(PeerModel(loaded, onnx_file), number=10, threads=2)
    seconds = prepared.timer()                     # one round: the mean of ``number`` runs
    prepared.reference, prepared.max_steps         # its output checked against its reference
    peer.saturation.note(prepared.max_steps, host_cpu_flags())  # why, on a CPU without VNNI

A peer is compiled or opened once in :meth:`Peer.prepare`, run once on the model's example input
(its warm-up and its output), and returns a timer of one round; a peer that cannot run this model
raises :class:`PeerUnavailable` with the reason in one line.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib.metadata
import os
from collections.abc import Callable

from relay_ext.frontend.models import LoadedModel
from relay_ext.frontend.onnx_reference import OnnxRuntimeReference
from relay_ext.frontend.optional_deps import MissingDependency

PathLike = str | os.PathLike

# /proc/cpuinfo names of the instructions that multiply uint8 x int8 into 32-bit sums directly.
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni"})


class PeerUnavailable(RuntimeError):
    """The peer cannot run this model here; the message says why in one line."""


@dataclasses.dataclass(frozen=True)
class PeerModel:
    """One network in the forms the peers run: the loaded model (its TorchScript module or PT2E
    program, its reference runtime, the example input; a built-in model's ``builtin`` arguments)
    and a QDQ ONNX file of it (the model's own ``.onnx``, or a built-in model's export; None when
    there is none)."""

    loaded: LoadedModel
    onnx_file: PathLike | None = None

    @property
    def is_onnx(self) -> bool:
        """Whether the model came from an ONNX file (ONNX Runtime running it as written is its
        reference)."""
        return isinstance(self.loaded.reference, OnnxRuntimeReference)

    @property
    def qdq_file(self) -> PathLike | None:
        """The QDQ ONNX file of the network: the model's own, else ``onnx_file``."""
        return self.loaded.reference.path if self.is_onnx else self.onnx_file


@dataclasses.dataclass
class Prepared:
    """A peer ready to time: ``timer()`` times one round (one untimed run, then the mean seconds of
    ``number`` runs); ``reference`` names what its output was checked against and ``max_steps`` is
    how far it was, in that reference's output quantization steps (both None: not checked, as for
    the model's own reference runtime)."""

    timer: Callable[[], float]
    reference: str | None = None
    max_steps: float | None = None


@dataclasses.dataclass(frozen=True)
class Saturation:
    """Why a peer's int8 output strays from its reference on an x86 CPU without VNNI. There its
    kernels multiply uint8 activations by int8 weights with ``vpmaddubsw``, which adds each pair
    of adjacent products in a signed 16-bit lane and saturates: a pair of large products (an
    activation near 255 times weights near 127) loses what exceeds 32767, where the reference
    sums in 32 bits or in float. Weights quantized to 7 bits (in [-64, 63]) cannot saturate a
    pair (255 x 128 < 32768), nor can VNNI's ``vpdpbusd``, which sums in 32 bits."""

    kernels: str           # whose kernels: "ONNX Runtime's uint8 x int8 kernels"
    remedy: str            # how a model avoids it, in a clause
    rounding_steps: float  # output steps from the reference that rounding alone explains

    def note(self, max_steps: float, cpu_flags: frozenset[str] | None) -> str | None:
        """Why the peer is ``max_steps`` output steps from its reference, when that is more than
        rounding on a CPU whose flags (``/proc/cpuinfo``) show no VNNI; None otherwise (the flags
        unknown included)."""
        if max_steps <= self.rounding_steps or cpu_flags is None or VNNI_FLAGS & set(cpu_flags):
            return None
        return (f"this CPU has no VNNI, and {self.kernels} then saturate 16-bit sums "
                f"(vpmaddubsw); {self.remedy}")


class Peer(abc.ABC):
    """A runtime a user could pick instead of TVM. ``name`` is its row in bench's table.

    ``optional`` peers (OpenVINO, PyTorch Inductor) are compiled for bench only when asked
    (``bench --no-peers`` leaves them out) and always get a line: their output check, or why they
    did not run. The others are the model's own runtimes (PyTorch, ONNX Runtime), timed whenever
    they apply to the model and left out without a word when they do not."""

    name: str = ""
    optional: bool = False
    # Where its int8 kernels saturate 16-bit sums on a CPU without VNNI: what bench says of an
    # output check beyond rounding there. None: a runtime whose output is not checked, or that is
    # the model's reference itself.
    saturation: Saturation | None = None

    @property
    @abc.abstractmethod
    def version(self) -> str | None:
        """The installed version (None where it is not installed)."""

    def available(self) -> tuple[bool, str | None]:
        """(True, None) when what this peer needs is installed here; else (False, why)."""
        return True, None

    def label(self, model: PeerModel) -> str:  # pylint: disable=unused-argument
        """Its row's label for ``model`` (``name`` unless the row names the model's runtime)."""
        return self.name

    @abc.abstractmethod
    def prepare(self, model: PeerModel, number: int, threads: int) -> Prepared:
        """Compile or open the peer for ``model`` on ``threads`` threads, run it once and return
        its timer of ``number`` runs per round; :class:`PeerUnavailable` when it cannot."""


def installed(require: Callable[[], object]) -> tuple[bool, str | None]:
    """:meth:`Peer.available` of a peer that needs one optional package: (True, None) when
    ``require()`` (a :mod:`relay_ext.frontend.optional_deps` check) finds it, else (False, its
    one-line reason)."""
    try:
        require()
    except MissingDependency as error:
        return False, first_line(error)
    return True, None


def first_line(error: BaseException, limit: int = 200) -> str:
    """An exception's first non-empty message line (its type's name when it has none), cut to
    ``limit`` characters."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return (lines[0] if lines else type(error).__name__)[:limit]


def distribution_version(distribution: str) -> str | None:
    """An installed distribution's version, without importing it (torchao's first import logs
    warnings that :func:`relay_ext.frontend.optional_deps.require_torchao` keeps quiet); None
    when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
