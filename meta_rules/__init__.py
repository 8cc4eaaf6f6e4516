"""meta_rules: MetaSchedule rules and postprocs that let quantized epilogues fuse.

Importing this package registers the custom schedule rules ``compute_inline``,
``quantfuse_layout_transform`` and ``quantfuse_padded_layout`` for every target key (see
:mod:`meta_rules.generic.compute_inline`, :mod:`meta_rules.cpu.layout_transform_rule` and
:mod:`meta_rules.cpu.padded_layout_rule`); that is the only side effect.

Folders, lowest first: ``base/`` (what every rule shares), ``analysis/`` (reading TIR), then the
rules, one folder per kind of target that imports only those two: ``generic/`` (every target),
``cpu/``, ``gpu/``. Each rule says for which targets it applies (``is_target_available``) and
where it goes among TVM's defaults; :mod:`meta_rules.rule_sets` and
:mod:`meta_rules.database_intrinsics` put the folders together per target; ``measure/`` and
``testing/`` build on the rule sets.
"""

from meta_rules.cpu.layout_transform_rule import register_layout_transform_rule
from meta_rules.cpu.padded_layout_rule import register_padded_layout_rule
from meta_rules.cpu.reject_flat_layout_rewrite import RejectFlatLayoutRewrite
from meta_rules.generic.compute_inline import compute_inline, register_compute_inline
from meta_rules.generic.inline_constant_blocks import InlineConstantBlocks
from meta_rules.gpu.compute_reduction_at_consumer import ComputeReductionAtConsumer
from meta_rules.gpu.reverse_inline_after_inlining import ReverseInlineAfterInlining
from meta_rules.gpu.verify_lowered_gpu_code import VerifyLoweredGPUCode
from meta_rules.measure import fusion
from meta_rules.rule_sets import (VARIANTS, mutator_probs, postprocs, rule_set, schedule_rules,
                                  space_generator)

# --- registration, in one place ------------------------------------------------------------------
register_compute_inline()
register_layout_transform_rule()
register_padded_layout_rule()

__all__ = [
    "VARIANTS",
    "ComputeReductionAtConsumer",
    "InlineConstantBlocks",
    "RejectFlatLayoutRewrite",
    "ReverseInlineAfterInlining",
    "VerifyLoweredGPUCode",
    "compute_inline",
    "fusion",
    "mutator_probs",
    "postprocs",
    "register_compute_inline",
    "register_layout_transform_rule",
    "register_padded_layout_rule",
    "rule_set",
    "schedule_rules",
    "space_generator",
]
