"""What a tune is asked to do, in one object: its budget, rules, search and where it measures.

    options = TuneOptions(max_trials=200, seed=0)
    tune(mod, params, target, work_dir, options)
    tune(mod, params, target, work_dir, max_trials=200, seed=0)   # the same, fields as keywords

The options are checked when the object is made (a ValueError names the field), so a tune
refuses bad options before it touches the work dir.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, Union

from tvm import meta_schedule as ms
from tvm.target import Target

from meta_rules.rule_sets import check_variant

from relay_ext.lowering.x86.amx import request_amx_tile_data_in_worker
from relay_ext.measure.candidate_timing import CANDIDATE_TIMINGS, default_candidate_timing
from relay_ext.tuning.progress import ProgressSnapshot

RunnerLike = Union[str, ms.runner.Runner]
StrategyLike = Union[str, ms.search_strategy.SearchStrategy]


@dataclasses.dataclass(frozen=True)
class TuneOptions:
    """The options of :func:`relay_ext.tuning.tune`.

    Budget (at least one of the two): ``max_trials`` new measurements in this call (records
    already in the work dir do not count), ``max_minutes`` of wall-clock time counted from
    ``clock_started`` (a ``time.monotonic()`` value; None: when ``tune`` is called).
    ``max_trials_per_task`` caps one task (MetaSchedule's own cap; None: no cap).

    Search: ``variant`` names the rule set (:data:`meta_rules.VARIANTS`); ``strategy`` is
    ``"sized"`` (quantfuse's EvolutionarySearch sized for the budget,
    :mod:`relay_ext.tuning.strategy`), a MetaSchedule strategy name (``"evolutionary"`` for TVM's
    own defaults) or a SearchStrategy object; ``num_trials_per_iter`` candidates per batch;
    ``seed`` seeds every random choice of the search (None: unseeded); ``num_tuning_cores``
    threads search and design-space generation use (``"physical"``: the physical cores).

    Measuring: ``runner`` is ``"local"`` (candidates run on this machine) or a MetaSchedule
    Runner (such as :func:`relay_ext.measure.rpc_tracker.rpc_runner`'s); ``builder`` a
    MetaSchedule Builder (None: a local one with quantfuse's build options).
    ``candidate_timing``: ``"cold"``, each run after the candidate's weights and outputs were
    flushed from the caches, or ``"warm"`` (MetaSchedule's default;
    :mod:`relay_ext.measure.candidate_timing`); None: cold for a CPU target, warm for any other.
    It sets the evaluator of the local runner or of a given runner that has one (an RPCRunner).
    ``measure_rule_designs_first``: before the search, measure each task's rule design
    (:mod:`relay_ext.tuning.rule_designs_first`), one trial of the budget each.

    ``progress`` is called after every measured batch with a :class:`ProgressSnapshot`.
    """

    max_trials: Optional[int] = None
    max_minutes: Optional[float] = None
    clock_started: Optional[float] = None
    max_trials_per_task: Optional[int] = None
    variant: str = "ours"
    strategy: StrategyLike = "sized"
    num_trials_per_iter: int = 16
    seed: Optional[int] = None
    num_tuning_cores: Union[str, int] = "physical"
    runner: RunnerLike = "local"
    builder: Optional[ms.builder.Builder] = None
    measure_rule_designs_first: bool = False
    candidate_timing: Optional[str] = None
    progress: Optional[Callable[[ProgressSnapshot], None]] = None

    def __post_init__(self) -> None:
        check_variant(self.variant)
        if self.max_trials is None and self.max_minutes is None:
            raise ValueError("tune needs max_trials, max_minutes or both")
        if self.max_minutes is not None and not float(self.max_minutes) > 0:
            raise ValueError(f"max_minutes must be a positive number of minutes, got "
                             f"{self.max_minutes}")
        if self.max_trials is not None and int(self.max_trials) <= 0:
            raise ValueError(f"max_trials must be a positive number of trials, got "
                             f"{self.max_trials}")
        if int(self.num_trials_per_iter) <= 0:
            raise ValueError(f"num_trials_per_iter must be positive, got {self.num_trials_per_iter}")
        if not isinstance(self.runner, ms.runner.Runner) and self.runner != "local":
            raise ValueError(f"runner must be 'local' or a tvm.meta_schedule.runner.Runner (such "
                             f"as an RPCRunner), got {self.runner!r}")
        if self.candidate_timing is not None and self.candidate_timing not in CANDIDATE_TIMINGS:
            raise ValueError(f"candidate_timing must be one of {', '.join(CANDIDATE_TIMINGS)}, got "
                             f"{self.candidate_timing!r}")
        if isinstance(self.runner, ms.runner.Runner) and self.candidate_timing == "cold" and \
                not hasattr(self.runner, "evaluator_config"):
            raise ValueError(f"candidate_timing={self.candidate_timing!r} sets a runner's "
                             f"evaluator_config, and {type(self.runner).__name__} has none; give "
                             "it tvm.meta_schedule.runner.EvaluatorConfig("
                             "enable_cpu_cache_flush=True, number=1) yourself")

    @classmethod
    def merged(cls, options: Optional["TuneOptions"], fields: Mapping[str, Any]) -> "TuneOptions":
        """``options`` (default: none set) with ``fields`` replacing some of them; a name that is
        not a field is a TypeError."""
        if options is None:
            return cls(**fields)
        return dataclasses.replace(options, **fields) if fields else options

    def make_runner(self, target: Target) -> ms.runner.Runner:
        """The runner to measure ``target``'s candidates with: ``runner`` itself (its evaluator
        set where the candidates are timed cold), or for ``"local"`` a LocalRunner whose worker
        processes may run AMX code, timing candidates as :meth:`timing` says."""
        timing = self.timing(target)
        if isinstance(self.runner, ms.runner.Runner):
            if timing == "cold" and hasattr(self.runner, "evaluator_config"):
                self.runner.evaluator_config = CANDIDATE_TIMINGS[timing]
            return self.runner
        # Each runner worker is a fresh process: it asks for AMX tile data itself (nothing where
        # the OS does not enable AMX), so that candidates built with AMX run there.
        return ms.runner.LocalRunner(evaluator_config=CANDIDATE_TIMINGS[timing],
                                     initializer=request_amx_tile_data_in_worker)

    def timing(self, target: Target) -> str:
        """How ``target``'s candidates are timed: ``candidate_timing``, or by default cold for a
        CPU target and warm for any other."""
        if self.candidate_timing is not None:
            return self.candidate_timing
        return default_candidate_timing(target)
