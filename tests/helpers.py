"""Helpers shared by the tests that tune or drive the CLI."""

from tvm import meta_schedule as ms


def small_search() -> ms.search_strategy.EvolutionarySearch:
    """An evolutionary search small enough for a tiny tuning budget in a test."""
    return ms.search_strategy.EvolutionarySearch(
        population_size=16, init_measured_ratio=0.5, init_min_unmeasured=4,
        genetic_num_iters=1, genetic_max_fail_count=2)


def one_error_line(capsys, *fragments) -> str:
    """The CLI wrote exactly one error line to stderr, no traceback, containing ``fragments``."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("quantfuse: error: ") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
