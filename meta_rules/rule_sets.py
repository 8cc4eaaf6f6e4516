"""Rule sets per variant, built from the defaults MetaSchedule itself picks for a target.

Variants:

* ``"upstream"`` -- TVM 0.19's defaults unchanged (with its ``InlineConstantScalars``).
* ``"legacy"``   -- TVM's defaults without ``InlineConstantScalars``: TVM before that fix.
* ``"ours"``     -- ``InlineConstantScalars`` left out, and quantfuse's rules and postprocs placed
  among the defaults, each where it says (:mod:`meta_rules.base.placement`): those that serve the
  target (``is_target_available``) go right after the defaults they follow, or in the place of
  those they replace. In :data:`OUR_RULES` and :data:`OUR_POSTPROCS`, in the order they are placed:

  ==============================  ===============================  ===========================
  rule or postproc                serves                           placed
  ==============================  ===============================  ===========================
  InlineConstantBlocks            every target                     after ApplyCustomRule
  AMXConv                         llvm with AMX int8               after AutoInline
  ReverseInlineAfterInlining      GPU targets                      after a reverse-inlining
                                                                   AutoInline
  ComputeReductionAtConsumer      GPU targets                      after CrossThreadReduction
  VerifyLoweredGPUCode            GPU targets                      instead of VerifyGPUCode
  TensorizeAMXConv                llvm with AMX int8               after RewriteReductionBlock
  RejectFlatLayoutRewrite         CPU targets                      after RewriteLayout
  ==============================  ===============================  ===========================

The defaults are not copied here: TVM is asked for them by initialising an empty PostOrderApply
with a TuneContext for the target, exactly as a tune with default rules would.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Tuple, Union

import tvm
from tvm import meta_schedule as ms
from tvm import te
from tvm.target import Target

from meta_rules.base.placement import place
from meta_rules.base.tvm_errors import tvm_error_message
from meta_rules.cpu.amx_conv import AMXConv
from meta_rules.cpu.amx_tensorize import TensorizeAMXConv
from meta_rules.cpu.reject_flat_layout_rewrite import RejectFlatLayoutRewrite
from meta_rules.generic.inline_constant_blocks import InlineConstantBlocks
from meta_rules.generic.tensor_intrinsics import register_tensor_intrinsics
from meta_rules.gpu.compute_reduction_at_consumer import ComputeReductionAtConsumer
from meta_rules.gpu.reverse_inline_after_inlining import ReverseInlineAfterInlining
from meta_rules.gpu.verify_lowered_gpu_code import VerifyLoweredGPUCode

logger = logging.getLogger(__name__)

VARIANTS = ("ours", "upstream", "legacy")
# quantfuse's schedule rules and postprocs, in the order "ours" places them among TVM's defaults
OUR_RULES = (InlineConstantBlocks, AMXConv, ReverseInlineAfterInlining, ComputeReductionAtConsumer)
OUR_POSTPROCS = (VerifyLoweredGPUCode, TensorizeAMXConv, RejectFlatLayoutRewrite)

TargetLike = Union[str, Target]
PostOrderApplyDefaults = Tuple[List[ms.ScheduleRule], List[ms.Postproc], Dict[ms.Mutator, float]]


def check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")
    return variant


def as_target(target: TargetLike) -> Target:
    if isinstance(target, Target):
        return target
    try:
        return Target(target)
    except Exception as err:  # TVM raises its own error types with a C++ trace
        raise ValueError(f"invalid target {target!r}: {tvm_error_message(err)}") from None


def _probe_module() -> tvm.IRModule:
    a = te.placeholder((4,), name="a")
    b = te.compute((4,), lambda i: a[i] + 1.0, name="b")
    return tvm.IRModule({"main": te.create_prim_func([a, b])})


def _ask_tvm(target: Target) -> PostOrderApplyDefaults:
    """TVM's default rules, postprocs and mutator probabilities for ``target``.

    TVM picks the defaults first and then initialises each rule with the target; a target missing
    an attribute that a rule needs (``-num-cores`` on llvm, shared-memory limits on vulkan) fails
    that second step, which is left to the real tune context to report. A target for which TVM
    has no defaults at all raises ValueError listing the target kinds that have them.
    """
    register_tensor_intrinsics(None)  # TuneContext imports every family; the fast way first
    space = ms.space_generator.PostOrderApply()
    try:
        ms.TuneContext(mod=_probe_module(), target=target, space_generator=space)
    except Exception as err:  # pylint: disable=broad-except
        if space.sch_rules is None:
            reason = tvm_error_message(err)
            raise ValueError(
                f"MetaSchedule has no default rules for target {str(target)!r} ({reason}); "
                f"target kinds with defaults: {', '.join(kinds_with_defaults())}"
            ) from None
        logger.debug("defaults for %s picked; initialising them failed: %s", target, err)
    return list(space.sch_rules), list(space.postprocs), dict(space.mutator_probs)


def kinds_with_defaults() -> List[str]:
    """Target kinds for which MetaSchedule picks default rules (asked of TVM, one kind at a time)."""
    kinds = []
    register_tensor_intrinsics(None)  # as in _ask_tvm
    for kind in sorted(tvm.target.Target.list_kinds()):
        space = ms.space_generator.PostOrderApply()
        try:
            ms.TuneContext(mod=_probe_module(), target=Target(kind), space_generator=space)
        except Exception:  # pylint: disable=broad-except
            pass
        if space.sch_rules is not None:
            kinds.append(kind)
    return kinds


def _edit_rules(rules: List[ms.ScheduleRule], variant: str,
                target: Target) -> List[ms.ScheduleRule]:
    if variant == "upstream":
        return rules
    rules = [r for r in rules if not isinstance(r, ms.schedule_rule.InlineConstantScalars)]
    return place(rules, OUR_RULES, target) if variant == "ours" else rules


def _edit_postprocs(procs: List[ms.Postproc], variant: str,
                    target: Target) -> List[ms.Postproc]:
    return place(procs, OUR_POSTPROCS, target) if variant == "ours" else procs


def rule_set(target: TargetLike, variant: str = "ours") -> PostOrderApplyDefaults:
    """Schedule rules, postprocs and mutator probabilities of ``variant`` for ``target``, from one
    question to TVM (fresh objects on every call)."""
    check_variant(variant)
    target = as_target(target)
    register_tensor_intrinsics(target)  # the tensorizing rules name them
    rules, procs, probs = _ask_tvm(target)
    return (_edit_rules(rules, variant, target), _edit_postprocs(procs, variant, target),
            {m: float(p) for m, p in probs.items()})


def schedule_rules(target: TargetLike, variant: str = "ours") -> List[ms.ScheduleRule]:
    """The schedule rules of ``variant`` for ``target``."""
    return rule_set(target, variant)[0]


def postprocs(target: TargetLike, variant: str = "ours") -> List[ms.Postproc]:
    """The postprocessors of ``variant`` for ``target``: TVM's defaults, with ``"ours"``'s own
    placed among them (see the module doc)."""
    return rule_set(target, variant)[1]


def mutator_probs(target: TargetLike) -> Dict[ms.Mutator, float]:
    """TVM's default mutator probabilities for ``target`` (the same for every variant)."""
    return rule_set(target, "upstream")[2]


def space_generator(target: TargetLike, variant: str = "ours") -> ms.space_generator.PostOrderApply:
    """A PostOrderApply carrying the rules, postprocs and mutators of ``variant`` for ``target``."""
    rules, procs, probs = rule_set(target, variant)
    return ms.space_generator.PostOrderApply(sch_rules=rules, postprocs=procs, mutator_probs=probs)
