"""How a tuning candidate is timed: warm, as MetaSchedule does, or cold, as inside a model.

    runner = LocalRunner(evaluator_config=CANDIDATE_TIMINGS[default_candidate_timing(target)])

"warm": MetaSchedule's default, the candidate run again and again for at least 100 ms, so its
weights sit in the caches as they never do inside a model. "cold": every timed run follows a
flush of all the candidate's arguments but the first (TVM's ``cache_flush_cpu_non_first_arg``):
its input stays cached, as after the op before it in a model, while its weights and outputs come
from memory; the mean of 20 such runs is its cost. The flush is a CPU's: a CPU (llvm) target is
timed cold unless told otherwise, any other warm. :class:`relay_ext.tuning.TuneOptions` picks
the evaluator (``candidate_timing``); docs/tuning.md has what it gave."""

from __future__ import annotations

from typing import Mapping

from tvm import meta_schedule as ms
from tvm.target import Target

CANDIDATE_TIMINGS: Mapping[str, ms.runner.EvaluatorConfig] = {
    "warm": ms.runner.EvaluatorConfig(),
    "cold": ms.runner.EvaluatorConfig(number=1, repeat=20, min_repeat_ms=0,
                                      enable_cpu_cache_flush=True),
}


def default_candidate_timing(target: Target) -> str:
    """"cold" for a CPU (llvm) target, "warm" for any other (the flush is a CPU's)."""
    return "cold" if Target(target).kind.name == "llvm" else "warm"
