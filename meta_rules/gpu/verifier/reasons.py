"""Why a candidate is rejected (:class:`Rejection`), and the counts per task (:class:`TaskStats`),
kept in a :class:`RejectionBook` shared by a verifier and its clones."""

from __future__ import annotations

import logging
import threading
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List

logger = logging.getLogger("meta_rules.gpu.verify_lowered_gpu_code")


@dataclass(frozen=True)
class Rejection:
    """One reason a candidate is rejected.

    ``check`` names the check, ``detail`` is the part that is the same for every candidate failing
    the same way (used for counting), ``where`` locates this occurrence. ``tvm_checks`` is False for
    the cases TVM's VerifyGPUCode does not check (it would accept the candidate for this reason).
    """

    check: str
    detail: str
    where: str = ""
    tvm_checks: bool = True

    @property
    def key(self) -> str:
        return f"{self.check} ({self.detail})"

    def __str__(self) -> str:
        return f"{self.key} in {self.where}" if self.where else self.key


@dataclass
class TaskStats:
    """What the verifier decided for one task.

    ``counts``: rejected candidates by their first reason's key (they sum to ``rejected``);
    ``reason_counts``: candidates having each reason key (one candidate may have several);
    ``examples``: the first full reason seen for each key.
    """

    task: str
    candidates: int = 0
    rejected: int = 0
    counts: Counter = field(default_factory=Counter)
    reason_counts: Counter = field(default_factory=Counter)
    examples: Dict[str, str] = field(default_factory=dict)

    @property
    def accepted(self) -> int:
        return self.candidates - self.rejected

    def by_check(self) -> Counter:
        """Rejected candidates by the check of their first reason."""
        out: Counter = Counter()
        for key, n in self.counts.items():
            out[key.split(" (", 1)[0]] += n
        return out

    def summary(self) -> str:
        parts = ", ".join(f"{n} {key}" for key, n in self.counts.most_common())
        text = f"{self.task}: rejected {self.rejected} of {self.candidates}"
        return f"{text}: {parts}" if parts else text

    def copy(self) -> "TaskStats":
        return TaskStats(self.task, self.candidates, self.rejected, Counter(self.counts),
                         Counter(self.reason_counts), dict(self.examples))


class RejectionBook:
    """Counts per task, shared by a verifier and its clones; logs each unlogged task at release."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tasks: Dict[str, TaskStats] = {}
        self.logged: set = set()
        weakref.finalize(self, log_pending, self.lock, self.tasks, self.logged)

    def record(self, task: str, reasons: List[Rejection]) -> None:
        with self.lock:
            stats = self.tasks.setdefault(task, TaskStats(task))
            stats.candidates += 1
            if reasons:
                stats.rejected += 1
                stats.counts[reasons[0].key] += 1
                for reason in reasons:
                    stats.reason_counts[reason.key] += 1
                    stats.examples.setdefault(reason.key, str(reason))


def log_pending(lock: threading.Lock, tasks: Dict[str, TaskStats], logged: set) -> Dict[str, str]:
    with lock:
        pending = [s.copy() for name, s in tasks.items() if name not in logged and s.candidates]
        logged.update(s.task for s in pending)
    for stats in pending:
        logger.info("VerifyLoweredGPUCode %s", stats.summary())
    return {s.task: s.summary() for s in pending}
