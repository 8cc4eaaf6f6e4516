"""The custom schedule rule ``compute_inline``, reachable for every target.

A block annotated ``schedule_rule = "compute_inline"``::

    with T.block("compile_engine_const"):
        T.block_attr({"schedule_rule": "compute_inline"})
        T.reads()
        T.writes(compile_engine_const[()])
        compile_engine_const[()] = 3

is handed by MetaSchedule's ApplyCustomRule, the first rule of every default rule set, to the
PackedFunc ``meta_schedule.<key>.compute_inline`` for the first key of the target that has one.
ApplyCustomRule knows no generic fallback, so the same function is registered under
``meta_schedule.generic.compute_inline`` and under every key that TVM's target kinds carry.
"""

from __future__ import annotations

import json
import logging
from typing import Callable, Iterable, List

import tvm
from tvm import tir
from tvm.tir.schedule import BlockRV, Schedule

from .constant_blocks import try_compute_inline

logger = logging.getLogger(__name__)

RULE_NAME = "compute_inline"
# The block annotation that names a block's custom rule (ApplyCustomRule), or "None" for no rule.
SCHEDULE_RULE_KEY = "schedule_rule"

# Keys that ApplyCustomRule must find even if probing TVM's target kinds below misses them.
REQUIRED_TARGET_KEYS = (
    "generic", "cpu", "gpu", "cuda", "rocm", "vulkan", "metal", "opencl", "webgpu", "nvptx",
    "hexagon", "arm_cpu",
)


def compute_inline(sch: Schedule, block: BlockRV) -> List[Schedule]:
    """Compute-inline ``block`` when legal; otherwise return the schedule unchanged."""
    try_compute_inline(sch, block, "custom rule compute_inline")
    return [sch]


def target_kind(name: str) -> "tvm.target.TargetKind":
    """TVM's registered TargetKind called ``name``, looked up without building a Target.

    Building a Target runs its kind's parser, which probes for a device (and warns when there is
    none, as for cuda and rocm here); TVM's serializer resolves a kind by name alone.
    """
    payload = {
        "root": 1,
        "nodes": [{"type_key": ""}, {"type_key": "TargetKind", "repr_str": name}],
        "b64ndarrays": [],
        "attrs": {"tvm_version": tvm.__version__},
    }
    return tvm.ir.load_json(json.dumps(payload))


def target_kind_keys() -> List[str]:
    """Every key that TVM's registered target kinds carry by default (``cpu``, ``gpu``, ``cuda`` ...)."""
    keys = set()
    for name in tvm.target.Target.list_kinds():
        keys.update(str(key) for key in target_kind(name).default_keys)
    return sorted(keys)


def custom_rule_name(key: str, rule: str = RULE_NAME) -> str:
    """The PackedFunc name under which ApplyCustomRule looks for ``rule`` on target key ``key``."""
    return f"meta_schedule.{key}.{rule}"


def register_for_every_key(rule: str, function_for_key: Callable[[str], Callable],
                           extra_keys: Iterable[str] = ()) -> List[str]:
    """Register the custom rule ``rule`` for every target key (``function_for_key(key)``: the
    function for that key); return the names registered now.

    A name that someone else already registered is left alone; registering twice is harmless
    (our own earlier registration counts as someone's).
    """
    keys = sorted(set(REQUIRED_TARGET_KEYS) | set(target_kind_keys()) | set(extra_keys))
    registered = []
    for key in keys:
        name = custom_rule_name(key, rule)
        if tvm.get_global_func(name, allow_missing=True) is None:
            tvm.register_func(name, function_for_key(key))
            registered.append(name)
        else:
            logger.debug("%s is already registered; left as it is", name)
    return registered


def register_compute_inline(extra_keys: Iterable[str] = ()) -> List[str]:
    """Register :func:`compute_inline` for every target key; return the names registered now
    (see :func:`register_for_every_key`)."""
    return register_for_every_key(RULE_NAME, lambda key: compute_inline, extra_keys)


def with_schedule_rule(block: tir.Block, rule: str) -> tir.Block:
    """``block`` with the annotation ``schedule_rule = rule`` (added, or replacing its value)."""
    annotations = dict(block.annotations)
    annotations[SCHEDULE_RULE_KEY] = rule
    return tir.Block(block.iter_vars, block.reads, block.writes, block.name_hint, block.body,
                     block.init, block.alloc_buffers, block.match_buffers, annotations)
