"""What the per-task choice runs a task and a model on: one fused task as a model of its own, its
weights bound as constants, and random inputs of the right types.

    mod = task_function_module(task)          # the task's Relay function as ``main``
    constants = weight_params(mod["main"])    # the parameters that are conv/dense weights
    values = random_inputs(mod["main"])       # one array per parameter
    inputs = model_inputs(mod, params)        # a whole model's unbound inputs
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional

import numpy as np
import tvm
from tvm import meta_schedule as ms
from tvm import relay


def task_function_module(task: ms.ExtractedTask) -> tvm.IRModule:
    """The task's fused Relay function as a module of its own (``main``, no Primitive mark, so
    that Relay fuses and lowers it as it does inside the model). Its parameters are renamed
    ``arg0``, ``arg1`` ...: the fused function's own ``p0``, ``p1`` ... are the names Relay's
    build gives the constants it binds, and would collide with them."""
    (_, func), = task.mod.functions.items()
    args = [relay.var(f"arg{i}", type_annotation=param.checked_type)
            for i, param in enumerate(func.params)]
    body = relay.bind(func.body, dict(zip(func.params, args)))
    return tvm.transform.Sequential([relay.transform.InferType()])(
        tvm.IRModule.from_expr(relay.Function(args, body, func.ret_type, func.type_params)))


def weight_params(func: relay.Function) -> List[str]:
    """The parameters of ``func`` that are the weights of its convolutions and dense layers (the
    second argument of an op whose name has ``conv`` or ``dense`` or ``matmul``): constants in
    the model, bound as constants here too, so that MetaSchedule's weight layout rewrite is
    folded at build time as it is in the model's build, not timed as a kernel of its own."""
    params = {param: param.name_hint for param in func.params}
    names: List[str] = []

    def visit(node):
        if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op) and len(node.args) > 1:
            if any(key in node.op.name for key in ("conv", "dense", "matmul")):
                weight = node.args[1]
                if isinstance(weight, relay.Var) and weight in params and \
                        params[weight] not in names:
                    names.append(params[weight])

    relay.analysis.post_order_visit(func.body, visit)
    return names


def random_inputs(func: relay.Function, seed: int = 0) -> Dict[str, np.ndarray]:
    """Random values for ``func``'s parameters (integers in [-128, 127] within their type's range,
    floats in [-1, 1))."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for param in func.params:
        ty = param.checked_type
        shape, dtype = [int(d) for d in ty.shape], str(ty.dtype)
        if dtype.startswith(("int", "uint")):
            info = np.iinfo(dtype)
            low, high = max(int(info.min), -128), min(int(info.max), 127)
            inputs[param.name_hint] = rng.integers(low, high + 1, size=shape).astype(dtype)
        else:
            inputs[param.name_hint] = rng.uniform(-1, 1, size=shape).astype(dtype)
    return inputs


def model_inputs(mod: tvm.IRModule,
                 params: Optional[Mapping[str, tvm.nd.NDArray]]) -> Dict[str, np.ndarray]:
    """Random values (:func:`random_inputs`) for the parameters of ``mod``'s ``main`` that
    ``params`` does not bind: the inputs to time the whole model on."""
    main = tvm.transform.Sequential([relay.transform.InferType()])(mod)["main"]
    bound = set(params or {})
    return {name: value for name, value in random_inputs(main).items() if name not in bound}
