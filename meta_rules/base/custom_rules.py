"""What quantfuse's custom schedule rules share: their registration and their block annotation.

MetaSchedule's ApplyCustomRule, the first rule of every default rule set, hands a block annotated
``schedule_rule = "<rule>"`` to the PackedFunc ``meta_schedule.<key>.<rule>`` for the first key of
the target that has one, and knows no generic fallback. So a custom rule is registered under
every key that TVM's target kinds carry (:func:`register_for_every_key`), and a block is handed to
it by its annotation (:func:`with_schedule_rule`). Used by ``compute_inline``
(:mod:`meta_rules.generic.compute_inline`), ``quantfuse_layout_transform``
(:mod:`meta_rules.cpu.layout_transform_rule`) and the TE->TIR converter that annotates the blocks.
"""

from __future__ import annotations

import json
import logging
from typing import Callable, Iterable, List

import tvm
from tvm import tir

logger = logging.getLogger(__name__)

# The block annotation that names a block's custom rule (ApplyCustomRule), or "None" for no rule.
SCHEDULE_RULE_KEY = "schedule_rule"

# Keys that ApplyCustomRule must find even if probing TVM's target kinds below misses them.
REQUIRED_TARGET_KEYS = (
    "generic", "cpu", "gpu", "cuda", "rocm", "vulkan", "metal", "opencl", "webgpu", "nvptx",
    "hexagon", "arm_cpu",
)


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


def custom_rule_name(key: str, rule: str) -> str:
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


def with_schedule_rule(block: tir.Block, rule: str) -> tir.Block:
    """``block`` with the annotation ``schedule_rule = rule`` (added, or replacing its value)."""
    annotations = dict(block.annotations)
    annotations[SCHEDULE_RULE_KEY] = rule
    return tir.Block(block.iter_vars, block.reads, block.writes, block.name_hint, block.body,
                     block.init, block.alloc_buffers, block.match_buffers, annotations)
