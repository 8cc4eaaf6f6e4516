"""Relay's constant folding done once, with numpy, before task extraction and the model's build.

    folded = prefold(mod, params, target, pass_config("ours"))   # params bound, constants folded
    tasks = ms.relay_integration.extract_tasks(folded, target, None, pass_config=...)
    lib = ms.relay_integration.compile_relay(database, folded, target, None, pass_config=...)

Why: Relay's ``FoldConstant`` evaluates every call whose arguments are constants with its
interpreter, which lowers and compiles each one with LLVM (``intrp_fused_*``). A QNN model's
weights are float parameters behind ``qnn.quantize`` (``divide``, ``round``, ``add``, ``clip``,
``cast`` once canonicalized), with per-channel scales (``expand_dims``) and, after
``AlterOpLayout``, weight layouts (``layout_transform``): a ResNet-50 makes about a thousand such
compilations, most of its task extraction, and each whole-model build pays the same again
(docs/BENCHMARKS.md).

What it does: the passes that Relay's build runs before and around its two ``FoldConstant``
(TVM 0.19's ``GetPassPrefix``: QNN legalization and canonicalization, ``Legalize``,
``SimplifyInference``, common-subexpression elimination, parallel-op combination, then
``FoldScaleAxis`` ... ``AlterOpLayout`` ... ``FastMath``), under the same target and pass
configuration, each ``FoldConstant`` replaced by :func:`numpy_fold_constants`, and one pass of
quantfuse's before ``FoldScaleAxis`` (:mod:`relay_ext.lowering.padded_channels`); on targets whose
convs become int16 pairs, two rewrites after the layout pass (:mod:`.x86.int16_winograd_rewrite`,
then :mod:`.x86.shared_widening`). The result is
marked :data:`PREFOLDED`; Relay's build and task extraction then run their own pipeline on it
without ``AlterOpLayout`` (:func:`passes_done`): the other passes find their work done (no QNN
op), and its ``FoldConstant`` folds only what numpy did not (an op not in :data:`NUMPY_OPS`). The numpy arithmetic is the one TVM's LLVM kernels do, in the same dtype
(IEEE float32 division, ``round`` half away from zero as ``llvm.round``, integer wraparound,
truncating casts), so the folded constants are bit-identical and the tasks extracted from the
folded module are the same workloads as Relay's own extraction gives, the padded channels
apart (tests/unit/relay_ext/lowering/test_prefold.py checks both).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np
import tvm
from tvm import relay
from tvm.relay import dataflow_pattern as dfp
from tvm.target import Target

from meta_rules.base.tvm_errors import tvm_error_message
from relay_ext.frontend.models import SEVEN_BIT_ACTIVATIONS
from relay_ext.lowering.numpy_layouts import layout_transform
from relay_ext.lowering.padded_channels import keep_padded_channels_pass
from relay_ext.lowering.x86 import int16_winograd_rewrite, seven_bit_conv, shared_widening

logger = logging.getLogger(__name__)

PREFOLDED = "quantfuse.prefolded"  # a prefolded module's attribute: the target it was folded for


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """``llvm.round``: to nearest, ties away from zero (numpy's ``round`` ties to even)."""
    whole = np.trunc(x)
    return (whole + np.where(np.abs(x - whole) >= 0.5, np.sign(x), 0)).astype(x.dtype)


def _same_dtype(fn: Callable[[np.ndarray, np.ndarray], np.ndarray], floats_only: bool = False):
    def apply(args: List[np.ndarray], call: relay.Call, out_dtype: str) -> Optional[np.ndarray]:
        a, b = args
        if a.dtype != b.dtype or str(a.dtype) != out_dtype or (floats_only and a.dtype.kind != "f"):
            return None
        with np.errstate(over="ignore"):
            return np.asarray(fn(a, b), dtype=a.dtype)
    return apply


def _one(fn: Callable[[np.ndarray, Any], Optional[np.ndarray]]):
    def apply(args: List[np.ndarray], call: relay.Call, out_dtype: str) -> Optional[np.ndarray]:
        return fn(args[0], call) if len(args) == 1 else None
    return apply


def _clip(x: np.ndarray, call: relay.Call) -> np.ndarray:
    low, high = float(call.attrs.a_min), float(call.attrs.a_max)
    if x.dtype.kind != "f":
        info = np.iinfo(x.dtype)
        low, high = max(low, info.min), min(high, info.max)
    return np.minimum(np.maximum(x, np.asarray(low).astype(x.dtype)),
                      np.asarray(high).astype(x.dtype))


def _sum(x: np.ndarray, call: relay.Call) -> Optional[np.ndarray]:
    if bool(call.attrs.exclude) or x.dtype.kind == "f":  # float sums: TVM's order is not numpy's
        return None
    axis = None if call.attrs.axis is None else tuple(int(a) for a in call.attrs.axis)
    return np.sum(x, axis=axis, keepdims=bool(call.attrs.keepdims), dtype=x.dtype)


def _layout_transform(x: np.ndarray, call: relay.Call) -> np.ndarray:
    return layout_transform(x, str(call.attrs.src_layout), str(call.attrs.dst_layout))


def _reshaped(x: np.ndarray, call: relay.Call) -> None:
    return None  # shape ops take the output shape from the call's type (see _fold)


# op -> numpy: (arguments, call, output dtype) -> value, or None to leave the call to Relay.
NUMPY_OPS: Dict[str, Callable[[List[np.ndarray], relay.Call, str], Optional[np.ndarray]]] = {
    "add": _same_dtype(np.add),
    "subtract": _same_dtype(np.subtract),
    "multiply": _same_dtype(np.multiply),
    "divide": _same_dtype(np.divide, floats_only=True),
    "negative": _one(lambda x, call: -x),
    "round": _one(lambda x, call: _round_half_away(x) if x.dtype.kind == "f" else x),
    "clip": _one(_clip),
    "cast": _one(lambda x, call: x.astype(str(call.attrs.dtype))),
    "sum": _one(_sum),
    "layout_transform": _one(_layout_transform),
    "transpose": _one(lambda x, call: np.ascontiguousarray(np.transpose(
        x, None if call.attrs.axes is None else [int(a) for a in call.attrs.axes]))),
}
SHAPE_OPS = ("expand_dims", "reshape", "squeeze")  # the value's data as is, in the call's shape


class _NumpyFold(dfp.DFPatternCallback):
    """Any call of one to three constant arguments whose op numpy computes here."""

    def __init__(self) -> None:
        super().__init__(require_type=True)
        self.pattern = (dfp.wildcard()(dfp.is_constant()) |
                        dfp.wildcard()(dfp.is_constant(), dfp.is_constant()) |
                        dfp.wildcard()(dfp.is_constant(), dfp.is_constant(), dfp.is_constant()))
        self.folded: Dict[str, int] = {}

    def callback(self, pre: relay.Expr, post: relay.Expr, node_map) -> relay.Expr:
        value = _fold(pre, post)
        if value is None:
            return post
        name = post.op.name
        self.folded[name] = self.folded.get(name, 0) + 1
        return relay.const(value)


def _fold(pre: relay.Expr, post: relay.Expr) -> Optional[np.ndarray]:
    if not isinstance(post, relay.Call) or not isinstance(post.op, tvm.ir.Op):
        return None
    ty = pre.checked_type
    if not isinstance(ty, relay.TensorType):
        return None
    shape, dtype = [int(d) for d in ty.shape], str(ty.dtype)
    args = [arg.data.numpy() for arg in post.args]
    name = post.op.name
    try:
        if name in SHAPE_OPS and len(args) == 1:
            value = args[0].reshape(shape)
        elif name in NUMPY_OPS:
            value = NUMPY_OPS[name](args, post, dtype)
        else:
            return None
    except (ValueError, TypeError) as error:
        logger.debug("prefold: %s left to Relay (%s)", name, error)
        return None
    if value is None or list(value.shape) != shape or str(value.dtype) != dtype:
        return None
    return value


def numpy_fold_constants(mod: tvm.IRModule) -> Tuple[tvm.IRModule, Dict[str, int]]:
    """``mod`` with each call of constants that :data:`NUMPY_OPS` (or a shape op) computes
    replaced by its value, innermost first; returns the module and how many calls of each op
    were folded."""
    mod = relay.transform.InferType()(mod)
    fold = _NumpyFold()
    main = dfp.rewrite(fold, mod["main"])
    folded = tvm.IRModule(mod.functions, mod.type_definitions)
    folded["main"] = main
    return relay.transform.InferType()(folded), fold.folded


def _qnn_legalize() -> tvm.transform.Pass:
    """TVM's C++ ``qnn::transform::Legalize``: QNN legalization then canonicalization (Python's
    ``relay.qnn.transform.Legalize`` is the first only)."""
    return tvm.get_global_func("relay.qnn._transform.Legalize")()


def _before_fold() -> List[tvm.transform.Pass]:
    return [relay.transform.RemoveUnusedFunctions(["main"]), relay.transform.ToBasicBlockNormalForm(),
            _qnn_legalize(), relay.transform.Legalize(),
            relay.transform.SimplifyInference(), relay.transform.EliminateCommonSubexpr(),
            relay.transform.CombineParallelConv2D(3), relay.transform.CombineParallelDense(3),
            relay.transform.CombineParallelBatchMatmul(3)]


def _simplify_post_alter_op() -> tvm.transform.Pass:
    """TVM's ``SimplifyExprPostAlterOp`` (registered, not exported to ``relay.transform``)."""
    return tvm.get_global_func("relay._transform.SimplifyExprPostAlterOp")()


def _around_layout() -> List[tvm.transform.Pass]:
    # first, quantfuse's own: padded conv channels kept up to the next conv (padded_channels)
    return [keep_padded_channels_pass(),
            relay.transform.FoldScaleAxis(), relay.transform.SimplifyExpr(),
            relay.transform.CanonicalizeCast(), relay.transform.CanonicalizeOps(),
            relay.transform.FlattenAtrousConv(), relay.transform.InferType(),
            relay.transform.AlterOpLayout(), _simplify_post_alter_op(),
            relay.transform.FastMath()]


def prefold(mod: tvm.IRModule, params: Optional[Mapping[str, Any]], target: Target,
            config: Mapping[str, Any]) -> tvm.IRModule:
    """``mod`` with ``params`` bound and its constants folded as Relay's build would fold them
    (see the module doc), to build or extract tasks from with ``params=None`` under the same
    ``target`` and pass ``config``. Works on a copy (QNN canonicalization writes attributes).
    A module prefolded for ``target`` already comes back as it is (marked :data:`PREFOLDED`)."""
    if params is None and str(mod.get_attr(PREFOLDED) or "") == str(target):
        return mod
    seven_bit = bool(mod.get_attr(SEVEN_BIT_ACTIVATIONS))
    mod = tvm.ir.load_json(tvm.ir.save_json(mod))
    if params:
        bound = relay.build_module.bind_params_by_name(
            mod["main"], {name: (value if isinstance(value, tvm.nd.NDArray) else tvm.nd.array(value))
                          for name, value in params.items()})
        mod = tvm.IRModule.from_expr(bound, type_defs=mod.type_definitions)
    counts: Dict[str, int] = {}
    with tvm.transform.PassContext(opt_level=3, config=dict(config)), target, \
            seven_bit_conv.activations(seven_bit):
        for passes in (_before_fold(), _around_layout()):
            mod = tvm.transform.Sequential([relay.transform.InferType(), *passes])(mod)
            mod, folded = numpy_fold_constants(mod)
            for name, count in folded.items():
                counts[name] = counts.get(name, 0) + count
        mod = int16_winograd_rewrite.rewrite(mod, target)  # needs the layout pass's weights, folded
        mod = shared_widening.rewrite(mod, target)  # after it: the Winograd op reads the widening too
    logger.info("prefold: %d constant calls folded with numpy (%s)", sum(counts.values()),
                ", ".join(f"{n} {c}" for n, c in sorted(counts.items())))
    mod = mod.with_attr(SEVEN_BIT_ACTIVATIONS, seven_bit) if seven_bit else mod
    return mod.with_attr(PREFOLDED, str(target))


def passes_done(mod: tvm.IRModule) -> List[str]:
    """The passes Relay's own pipeline must not run again on ``mod`` (its ``disabled_pass``):
    ``AlterOpLayout`` once :func:`prefold` ran it. A second run has nothing to alter, and fails
    on a per-channel ``fixed_point_multiply_per_axis`` (what requantize becomes on a target
    without fast int8) whose axes the first run made two (TVM's ``axes.size() == 1`` check)."""
    return ["AlterOpLayout"] if mod.get_attr(PREFOLDED) is not None else []


def prefold_or_keep(mod: tvm.IRModule, params: Optional[Mapping[str, Any]], target: Target,
                    config: Mapping[str, Any]) -> Tuple[tvm.IRModule, Optional[Mapping[str, Any]]]:
    """(module, params) with the constants prefolded (:func:`prefold`; params bound: None), or
    the inputs unchanged where prefolding fails, with a warning: the build is then slower (Relay
    folds the constants), not wrong."""
    try:
        return prefold(mod, params, target, config), None
    except (tvm.TVMError, ValueError) as error:
        logger.warning("constants not prefolded (%s); Relay folds them",
                       tvm_error_message(error, limit=200) if isinstance(error, tvm.TVMError)
                       else error)
        return mod, params
