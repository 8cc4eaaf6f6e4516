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

from .tir_converter import CONVERTER_NAME, DEFAULT_CONVERTER_NAME

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
    }
