"""The search strategy ``quantfuse tune`` uses by default, sized so that searching costs less than
measuring.

MetaSchedule's default EvolutionarySearch samples a population of 512 candidates and evolves it
for 4 generations for every batch of 16 measurements: on a machine of a few cores that is
seconds of search per measured trial, while one measurement of a small model's kernel takes well
under a second (docs/BENCHMARKS.md, "Search population size"). :func:`default_search`
keeps the same algorithm with a population of 64 and fewer generations, so a tune of an hour
measures many more candidates. The sizes are a starting point that the benchmark
``benchmarks/latency_after_tuning.py`` compares with MetaSchedule's defaults by the model latency
reached after a given number of minutes (docs/BENCHMARKS.md); see docs/tuning.md.

    strategy = default_search()             # what the CLI uses
    tune(mod, params, target, work_dir, max_trials=200, strategy=strategy)
"""

from __future__ import annotations

from typing import Dict

from tvm import meta_schedule as ms

# MetaSchedule 0.19's EvolutionarySearch defaults (python/tvm/meta_schedule/search_strategy/
# evolutionary_search.py), for comparison.
TVM_DEFAULTS: Dict[str, float] = {
    "population_size": 512,
    "init_measured_ratio": 0.2,
    "init_min_unmeasured": 50,
    "max_fail_count": 5,
    "genetic_num_iters": 4,
    "genetic_mutate_prob": 0.85,
    "genetic_max_fail_count": 10,
    "eps_greedy": 0.05,
}

# quantfuse's default: a population of 64 (docs/BENCHMARKS.md, "Search population size"), two
# generations, the measured share of the initial population raised so that good candidates keep
# being refined.
SIZED_DEFAULTS: Dict[str, float] = {
    "population_size": 64,
    "init_measured_ratio": 0.25,
    "init_min_unmeasured": 16,
    "max_fail_count": 5,
    "genetic_num_iters": 2,
    "genetic_mutate_prob": 0.85,
    "genetic_max_fail_count": 4,
    "eps_greedy": 0.05,
}

SETTINGS = {"tvm": TVM_DEFAULTS, "sized": SIZED_DEFAULTS}


def evolutionary_search(settings: Dict[str, float]) -> ms.search_strategy.EvolutionarySearch:
    """An EvolutionarySearch with ``settings`` (keys as :data:`SIZED_DEFAULTS`)."""
    return ms.search_strategy.EvolutionarySearch(
        population_size=int(settings["population_size"]),
        init_measured_ratio=float(settings["init_measured_ratio"]),
        init_min_unmeasured=int(settings["init_min_unmeasured"]),
        max_fail_count=int(settings["max_fail_count"]),
        genetic_num_iters=int(settings["genetic_num_iters"]),
        genetic_mutate_prob=float(settings["genetic_mutate_prob"]),
        genetic_max_fail_count=int(settings["genetic_max_fail_count"]),
        eps_greedy=float(settings["eps_greedy"]),
    )


def default_search() -> ms.search_strategy.EvolutionarySearch:
    """The CLI's default search: MetaSchedule's EvolutionarySearch at :data:`SIZED_DEFAULTS`."""
    return evolutionary_search(SIZED_DEFAULTS)
