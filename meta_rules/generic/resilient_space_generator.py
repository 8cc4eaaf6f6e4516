"""ResilientPostOrderApply: PostOrderApply that survives TVM's own design-space failures.

TVM 0.19's ``MultiLevelTilingTensorCore`` raises a ScheduleError for some random states (``The
scope tir.Block#0 is not a stage pipeline`` in compute-at), and one such failure ends a whole tune.
This generator applies the same rules as PostOrderApply, and when generation raises it

1. retries with other random states (``retry_seeds`` of them), then
2. retries with one rule left out, tensor-core tiling rules first, then any other rule that is
   not one of the first-in-line rules (custom rule and constant inlining), and finally
3. gives up with :class:`DesignSpaceGenerationError`; the tuning flow then leaves that task to
   TVM's default schedule.

What happened is kept in :attr:`outcome` and logged. The configuration that worked (random state and
rule list) is reused by later calls and by clones, so a task that was checked before tuning is
generated the same way during tuning.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from typing import Dict, List, Optional, Sequence, Tuple

import tvm
from tvm import meta_schedule as ms
from tvm.meta_schedule.space_generator import PySpaceGenerator
from tvm.meta_schedule.utils import derived_object
from tvm.tir import Schedule

from meta_rules.base.tvm_errors import tvm_error_message
from meta_rules.generic.inline_constant_blocks import InlineConstantBlocks

logger = logging.getLogger(__name__)


class DesignSpaceGenerationError(RuntimeError):
    """Every random state and every rule set we tried failed to generate design spaces."""


@dataclasses.dataclass
class GenerationOutcome:
    """How a task's design spaces were finally generated."""

    status: str  # "ok", "reseeded", "rule dropped", "failed"
    rand_state: Optional[int] = None
    dropped_rule: Optional[str] = None
    failures: List[str] = dataclasses.field(default_factory=list)

    def describe(self) -> str:
        if self.status == "ok":
            return "ok"
        if self.status == "reseeded":
            return f"reseeded (rand_state {self.rand_state}) after {len(self.failures)} failure(s)"
        if self.status == "rule dropped":
            return f"generated without {self.dropped_rule} after {len(self.failures)} failure(s)"
        return f"failed after {len(self.failures)} attempts; left to TVM's default schedule"


def rule_name(rule: ms.ScheduleRule) -> str:
    return type(rule).__name__


def _is_first_in_line(rule: ms.ScheduleRule) -> bool:
    """Rules that must stay: the custom-rule hook and constant inlining."""
    return isinstance(rule, (ms.schedule_rule.ApplyCustomRule,
                             ms.schedule_rule.InlineConstantScalars, InlineConstantBlocks))


def drop_candidates(rules: Sequence[ms.ScheduleRule]) -> List[int]:
    """Indices of rules worth leaving out, tensor-core tiling first, in rule order otherwise."""
    order = [i for i, r in enumerate(rules) if not _is_first_in_line(r)]
    return sorted(order, key=lambda i: not isinstance(rules[i], ms.schedule_rule.MultiLevelTilingTensorCore))


@derived_object
class ResilientPostOrderApply(PySpaceGenerator):
    """PostOrderApply with retries over random states and rule sets; see the module docstring."""

    def __init__(
        self,
        sch_rules: List[ms.ScheduleRule],
        postprocs: List[ms.Postproc],
        mutator_probs: Dict[ms.Mutator, float],
        retry_seeds: int = 8,
        _config: Optional[Tuple[int, Tuple[int, ...]]] = None,
    ) -> None:
        super().__init__()
        self.sch_rules = list(sch_rules)
        self.postprocs = list(postprocs)
        self.mutator_probs = dict(mutator_probs)
        self.retry_seeds = retry_seeds
        self.outcome: Optional[GenerationOutcome] = None
        self._target: Optional[tvm.target.Target] = None
        self._rand_state = -1
        self._task_name = "task"
        # (rand_state, indices of the rules kept) that generated successfully last time
        self._config = _config
        # (module, its design spaces) of the last success: MetaSchedule's task scheduler generates
        # the spaces of a task again when tuning starts, after the tuning flow generated them to
        # check the task; for the same module object (and config) the result is the same.
        self._last: Optional[Tuple[tvm.IRModule, List[Schedule]]] = None

    def _initialize_with_tune_context(self, context: ms.TuneContext) -> None:
        self._target = context.target
        self._rand_state = int(context.rand_state)
        self._task_name = str(context.task_name)
        for item in [*self.sch_rules, *self.postprocs, *self.mutator_probs]:
            item._initialize_with_tune_context(context)  # pylint: disable=protected-access

    def _generate(self, mod: tvm.IRModule, rand_state: int, keep: Sequence[int]) -> List[Schedule]:
        inner = ms.space_generator.PostOrderApply(
            sch_rules=[self.sch_rules[i] for i in keep],
            postprocs=self.postprocs,
            mutator_probs=self.mutator_probs,
        )
        context = ms.TuneContext(mod=mod, target=self._target, space_generator=inner,
                                 rand_state=rand_state, task_name=self._task_name)
        return list(context.generate_design_space())

    def _seeds(self) -> List[int]:
        rng = random.Random(None if self._rand_state < 0 else self._rand_state)
        first = self._rand_state if self._rand_state >= 0 else rng.randrange(1, 2**30)
        return [first] + [rng.randrange(1, 2**30) for _ in range(self.retry_seeds)]

    def generate_design_space(self, mod: tvm.IRModule) -> List[Schedule]:
        if self._target is None:
            raise ValueError("ResilientPostOrderApply used before initialisation with a TuneContext")
        if self._last is not None and self._last[0].same_as(mod):
            return list(self._last[1])
        spaces = self._generate_anew(mod)
        self._last = (mod, list(spaces))
        return spaces

    def _generate_anew(self, mod: tvm.IRModule) -> List[Schedule]:
        if self._config is not None:
            try:
                return self._generate(mod, *self._config)
            except Exception as err:  # noqa: BLE001 - TVM raises ValueError, IndexError ... too
                logger.warning("%s: the configuration that worked before failed: %s",
                               self._task_name, tvm_error_message(err))
        everything = tuple(range(len(self.sch_rules)))
        seeds = self._seeds()
        failures: List[str] = []
        attempts = [(seed, everything, None) for seed in seeds]
        attempts += [(seeds[0], tuple(i for i in everything if i != drop), rule_name(self.sch_rules[drop]))
                     for drop in drop_candidates(self.sch_rules)]
        for n, (seed, keep, dropped) in enumerate(attempts):
            try:
                spaces = self._generate(mod, seed, keep)
            except Exception as err:  # noqa: BLE001 - TVM raises ValueError, IndexError ... too
                failures.append(f"rand_state {seed}"
                                + (f" without {dropped}" if dropped else "") + f": {tvm_error_message(err)}")
                continue
            status = "ok" if n == 0 else ("rule dropped" if dropped else "reseeded")
            self.outcome = GenerationOutcome(status, seed, dropped, failures)
            self._config = (seed, keep)
            if failures:
                logger.warning("%s: design-space generation %s; first failure: %s",
                               self._task_name, self.outcome.describe(), failures[0])
            return spaces
        self.outcome = GenerationOutcome("failed", None, None, failures)
        logger.warning("%s: design-space generation %s", self._task_name, self.outcome.describe())
        raise DesignSpaceGenerationError(
            f"{self._task_name}: no design space after {len(failures)} attempts; "
            f"first failure: {failures[0] if failures else '?'}"
        )

    def clone(self) -> "ResilientPostOrderApply":
        return ResilientPostOrderApply(
            sch_rules=[r.clone() for r in self.sch_rules],
            postprocs=[p.clone() for p in self.postprocs],
            mutator_probs={m.clone(): p for m, p in self.mutator_probs.items()},
            retry_seeds=self.retry_seeds,
            _config=self._config,
        )
