"""Where a quantfuse rule or postproc goes in a rule set: for which targets, and next to which of
TVM's defaults.

Each schedule rule and postproc of :mod:`meta_rules` says of itself

* for which targets it applies, :meth:`Placement.is_target_available` (as TVM's dlight rules say
  it): ``"gpu" in target.keys`` for the GPU rules, AMX int8 features for the AMX conv ...;
* where it goes among the defaults TVM picks for such a target: right after every default it
  :meth:`~Placement.follows`, or in the place of every default it :meth:`~Placement.replaces`;
  one that finds neither goes first when it :attr:`~Placement.leads_otherwise`, else nowhere.

:func:`place` asks each rule in turn and puts it there; :mod:`meta_rules.rule_sets` composes the
variant ``"ours"`` from it::

    place(tvm_rules, (InlineConstantBlocks, AMXConv, ...), target)
"""

from __future__ import annotations

from typing import Callable, List, Sequence, TypeVar

from tvm.target import Target

T = TypeVar("T")


class Placement:
    """Mixed into a quantfuse rule or postproc: the targets it serves and its place among TVM's
    defaults. The defaults: every target, next to nothing."""

    leads_otherwise = False  # goes first in a rule set where it follows and replaces nothing

    def is_target_available(self, target: Target) -> bool:  # pylint: disable=unused-argument
        """Whether the rule belongs in the rule sets of ``target``."""
        return True

    def follows(self, default: object) -> bool:  # pylint: disable=unused-argument
        """True for a default rule (or postproc) that this one goes right after."""
        return False

    def replaces(self, default: object) -> bool:  # pylint: disable=unused-argument
        """True for a default rule (or postproc) whose place this one takes."""
        return False


def place(defaults: Sequence[T], makers: Sequence[Callable[[], T]], target: Target) -> List[T]:
    """``defaults`` with a rule from each of ``makers`` (classes of :class:`Placement` rules, in
    order) that serves ``target`` placed as it says: a fresh one at each place it finds."""
    placed = list(defaults)
    for make in makers:
        rule = make()
        if rule.is_target_available(target):  # type: ignore[attr-defined]
            placed = _place_one(placed, rule, make)
    return placed


def _place_one(rules: List[T], rule, make: Callable[[], T]) -> List[T]:
    spare = [rule]  # the rule asked first is the first one placed

    def fresh() -> T:
        return spare.pop() if spare else make()

    edited: List[T] = []
    for default in rules:
        if rule.replaces(default):
            edited.append(fresh())
            continue
        edited.append(default)
        if rule.follows(default):
            edited.append(fresh())
    if spare and rule.leads_otherwise:
        edited.insert(0, fresh())
    return edited
