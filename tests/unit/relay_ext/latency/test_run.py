"""relay_ext.bench without the CLI: the library call returns the BenchResult that 'quantfuse bench'
prints and '--json' serialises, and writes its report into the work dir."""

import pytest

import relay_ext
from relay_ext.latency.report import text_report
from relay_ext.latency.result import TUNED, UNTUNED, NO_SEARCH, BenchResult
from relay_ext.workdir.files import CHART_FILE, REPORT_FILE
from conftest import AVX2

# The keys of 'quantfuse bench --json' (docs/bench.md); a key renamed breaks its readers.
JSON_KEYS = {
    "model", "input_shape", "target", "variant", "threads", "host_flags", "repeats", "number",
    "rows", "peers", "fastest_peer", "main", "reference", "max_steps", "mean_steps",
    "fraction_equal", "untuned_max_steps", "no_search_max_steps", "runtime_steps", "machine",
    "date", "load_average", "stolen_share", "busy_warning", "tasks_vs_default", "whole_model",
    "layout_transforms",
}


def test_relay_ext_bench_is_the_library_bench_function_even_after_its_modules_load():
    import relay_ext.latency.run  # a package named like the function would shadow it here

    assert relay_ext.bench is relay_ext.latency.run.bench


def test_bench_of_a_tuned_work_dir_returns_the_result_and_writes_the_report(tiny_tuned, tiny32):
    work_dir, _ = tiny_tuned
    (work_dir / REPORT_FILE).unlink(missing_ok=True)
    result = relay_ext.bench(tiny32, target=AVX2, records=work_dir, repeats=2, number=2,
                             threads=1, choose_per_task=False, peers=False)
    assert isinstance(result, BenchResult) and result.main == TUNED
    assert list(result.timings)[:3] == [TUNED, NO_SEARCH, UNTUNED]
    assert "PyTorch int8" in result.timings and result.peers is None
    assert result.max_steps <= 3 and result.tasks_vs_default is None
    assert set(result.to_dict()) == JSON_KEYS
    counts = result.to_dict()["layout_transforms"]  # the main row's build, counted by place
    assert set(counts) == {"between_convs", "at_input", "at_output", "tasks"}
    assert counts["at_input"] >= 1 and counts["between_convs"] + counts["at_input"] + counts[
        "at_output"] == sum(task["runs"] for task in counts["tasks"])
    text = text_report(result)
    assert "TVM tuned (ours)" in text and "median ms" in text
    assert (work_dir / REPORT_FILE).exists() and (work_dir / CHART_FILE).exists()


def test_bench_refuses_what_it_cannot_time(tiny):
    with pytest.raises(ValueError, match="must be llvm"):
        relay_ext.bench(tiny, target="cuda")
