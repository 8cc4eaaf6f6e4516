"""A Relay module's MetaSchedule tasks, lowered with the variant's TE->TIR converter, and the
fused graph they come from."""

from __future__ import annotations
from typing import List, Mapping, Optional
import tvm
from tvm import meta_schedule as ms
from tvm import relay
from tvm.target import Target
from meta_rules.rule_sets import TargetLike, check_variant
from relay_ext.lowering.config import pass_config
from relay_ext.lowering.targets import normalize_target
from relay_ext.lowering.prefold import passes_done, prefold_or_keep
from relay_ext.lowering.relay_build import copy_module


def extract_tasks(
    mod: tvm.IRModule,
    params: Optional[Mapping[str, tvm.nd.NDArray]],
    target: TargetLike,
    variant: str = "ours",
) -> List[ms.ExtractedTask]:
    """The tuning tasks of a Relay module, lowered with ``variant``'s converter.

    Works on a copy: Relay's QNN canonicalization writes attributes into the module it lowers.
    """
    return lowered_tasks(mod, params, normalize_target(target), check_variant(variant))


def lowered_tasks(mod: tvm.IRModule, params: Optional[Mapping[str, tvm.nd.NDArray]],
                  target: Target, variant: str) -> List[ms.ExtractedTask]:
    """:func:`extract_tasks` for a target and variant already checked (``normalize_target``,
    ``check_variant``), as :func:`relay_ext.tuning.tune` and the reports pass them. From the
    module prefolded as every build prefolds it (:func:`relay_ext.lowering.prefold.prefold`,
    which also keeps padded conv channels), so that tuning and the build see the same tasks."""
    mod, params = prefold_or_keep(mod, params, target, pass_config(variant))
    return list(ms.relay_integration.extract_tasks(
        copy_module(mod), target, params, pass_config=pass_config(variant),
        disabled_pass=passes_done(mod)))


def fused_main(mod: tvm.IRModule, params: Optional[Mapping[str, tvm.nd.NDArray]],
               target: Target, variant: str) -> relay.Function:
    """The ``main`` function the tasks of :func:`lowered_tasks` are cut from: a copy of ``mod``
    after the passes task extraction runs (QNN canonicalization, Relay's layout pass for
    ``target``, constant folding, operator fusion), each call of a primitive (fused) function one
    task's kernel run once per inference, in the order of the graph. Nothing is lowered to TIR."""
    from tvm import autotvm  # pylint: disable=import-outside-toplevel

    mod, params = prefold_or_keep(mod, params, target, pass_config(variant))
    mod = copy_module(mod)
    if params:
        mod["main"] = relay.build_module.bind_params_by_name(mod["main"], dict(params))
    prefix = tvm.get_global_func("relay.backend.GetPassPrefixSeq")(True, True)  # as extraction
    silent, autotvm.GLOBAL_SCOPE.silent = autotvm.GLOBAL_SCOPE.silent, True
    try:
        with target, tvm.transform.PassContext(opt_level=3, config=pass_config(variant),
                                               disabled_pass=passes_done(mod)):
            return tvm.transform.Sequential([prefix, relay.transform.FuseOps()])(mod)["main"]
    finally:
        autotvm.GLOBAL_SCOPE.silent = silent
