"""What the fusion rules share: look at a block, and change the schedule only when it qualifies.

A rule subclasses :class:`StructuralRule` and supplies three methods: ``blocker``, a pure analysis
that says why a block must be left alone (None when the rule may act), ``transform``, which
applies TVM's schedule primitives, and ``clone``, which must return an instance of the class as
``@derived_object`` wrapped it (the name the module exports): inside a method, ``type(self)`` is
the unwrapped class, and MetaSchedule crashes on a clone that is not a TVM object. A primitive
that refuses (a ``ScheduleError``, raised before TVM changes anything) leaves the schedule as it
was; the refusal is logged at DEBUG. Any other error reaches MetaSchedule.
"""

from __future__ import annotations

import logging
from typing import Callable, List, Optional

from tvm import tir
from tvm.meta_schedule.schedule_rule import PyScheduleRule
from tvm.tir.block_scope import StmtSRef
from tvm.tir.schedule import BlockRV, Schedule

from meta_rules.base.tvm_errors import tvm_error_message
from meta_rules.base.unchecked_schedule import live_block_sref

logger = logging.getLogger(__name__)


class StructuralRule(PyScheduleRule):
    """A schedule rule that acts on a block when :meth:`blocker` finds nothing against it."""

    def _initialize_with_tune_context(self, context) -> None:  # no target-dependent state
        pass

    def blocker(self, sch: Schedule, block: BlockRV, sref: StmtSRef) -> Optional[str]:
        """Why the rule must leave ``block`` alone, or None."""
        raise NotImplementedError

    def transform(self, sch: Schedule, block: BlockRV, sref: StmtSRef) -> None:
        """Apply the rule's primitives to ``block`` (in place)."""
        raise NotImplementedError

    def apply(self, sch: Schedule, block: BlockRV) -> List[Schedule]:
        sref = live_block_sref(sch, block)
        if sref is not None and self.blocker(sch, block, sref) is None:
            self.transform(sch, block, sref)
        return [sch]

    def clone(self) -> "StructuralRule":
        raise NotImplementedError

    def attempt(self, sref: StmtSRef, primitive: Callable[[], None]) -> bool:
        """Run ``primitive``; on a ScheduleError leave the schedule as it is and return False."""
        try:
            primitive()
        except tir.ScheduleError as err:
            logger.debug("%s: %r left as it is: %s", type(self).__name__, sref.stmt.name_hint,
                         tvm_error_message(err))
            return False
        return True
