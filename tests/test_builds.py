"""relay_ext.build.whole_model: the tuned build checked whole against the no-search build (issue 29),
and the never-slower rule's in-model timing (relay_ext.measure.in_model)."""

import pytest
from tvm import meta_schedule as ms

from relay_ext.lowering import targets
from relay_ext.build import whole_model as builds
from relay_ext.measure.run import run_module
from relay_ext.build.whole_model import WholeModel, compile_builds
from relay_ext.measure.in_model import profile_in_model
from conftest import AVX2


@pytest.fixture(scope="module")
def avx2_target():
    if targets.missing_features(AVX2):
        pytest.skip(f"this host's OS does not enable {targets.missing_features(AVX2)} ({AVX2})")
    return targets.normalize_target(AVX2)


def test_whole_model_verdict():
    assert WholeModel(3.3, 3.0, 1.02).uses_no_search
    assert not WholeModel(3.0, 3.3, 0.97).uses_no_search
    assert "no-search build is compiled as the tuned one" in str(WholeModel(3.3, 3.0, 1.02))
    assert WholeModel(1.0, 2.0, 0.5).to_dict()["uses_no_search"] is False


@pytest.mark.parametrize("ratio", [1.5, 0.5])
def test_a_tuned_build_slower_as_a_whole_is_replaced_by_the_no_search_build(
        avx2_target, tiny, monkeypatch, ratio):
    """The whole-model verdict (faked here: the timing is not under test) decides which build
    is the tuned one, and which choices it reports."""
    monkeypatch.setattr(builds, "whole_model", lambda *args, **kwargs: WholeModel(1.0, 1.0, ratio))
    built = compile_builds(ms.database.MemoryDatabase(), tiny.mod, tiny.params, avx2_target,
                           "ours")
    assert built.whole_model.ratio == ratio and built.no_search is not None
    if ratio > 1:
        assert built.tuned is built.no_search and built.tuned_kept is built.no_search_kept
    else:
        assert built.tuned is not built.no_search and built.tuned_kept is not built.no_search_kept
    assert run_module(built.tuned, tiny.inputs)[0].shape == run_module(built.no_search,
                                                                       tiny.inputs)[0].shape


def test_the_whole_model_comparison_is_timed_once_and_then_read_from_the_cache(
        avx2_target, tiny, tmp_path, monkeypatch):
    from relay_ext.measure import timing

    cache = tmp_path / "never_slower_timings.json"
    first = compile_builds(ms.database.MemoryDatabase(), tiny.mod, tiny.params, avx2_target,
                           "ours", cache_path=cache)
    assert first.whole_model.tuned_ms > 0 and first.whole_model.no_search_ms > 0
    assert 0 < first.whole_model.ratio < 10
    timed = []
    real = timing.tvm_timer
    monkeypatch.setattr(timing, "tvm_timer", lambda *a, **k: timed.append(1) or real(*a, **k))
    second = compile_builds(ms.database.MemoryDatabase(), tiny.mod, tiny.params, avx2_target,
                            "ours", cache_path=cache)
    assert timed == [] and second.whole_model == first.whole_model


def test_every_kernel_is_profiled_inside_the_model_and_nothing_printed(avx2_target, tiny, capsys):
    built = compile_builds(None, tiny.mod, tiny.params, avx2_target, "ours", never_slower=False)
    capsys.readouterr()
    times = profile_in_model({"a": built.no_search, "b": built.no_search}, tiny.inputs, rounds=2)
    assert capsys.readouterr().out == ""  # the debug executor's table would break bench --json
    assert set(times) == {"a", "b"} and set(times["a"]) == set(times["b"])
    assert all(ms_ > 0 for ms_ in times["a"].values())
    conv = [name for name in times["a"] if "conv2d" in name]
    assert conv and not any(name.startswith("tvmgen_default_") for name in times["a"])
