"""relay_ext/build/entry.py: ``relay_ext.compile`` is the one build entry point. Its arguments are
checked before anything is built, and export, bench and the accuracy check all build through it
(shown by patching its steps: nothing is compiled here)."""

import pytest

import relay_ext
from relay_ext.build import SCHEDULES, Compiled, compile
from relay_ext.build import entry
from relay_ext.build.whole_model import _Builds
from relay_ext.measure.run import run_module
from conftest import needs_c_compiler


class _Reached(Exception):
    """Raised by a patched build step: the caller got there."""


@pytest.fixture
def build_steps(monkeypatch):
    """compile's two steps replaced: the tuned / rule designs' builds return a stand-in for the
    rule designs' build, TVM's default build raises :class:`_Reached`. The list records the
    steps called and their schedule-deciding arguments."""
    calls = []

    def make_builds(database, mod, params, target, variant, choose, cache_path, designs_build):
        calls.append(("rule designs and records", database is None, choose))
        return _Builds(None, object(), None)

    def default_build(mod, params, target, opt_level=3):
        calls.append(("default", opt_level))
        raise _Reached

    monkeypatch.setattr(entry, "_make_builds", make_builds)
    monkeypatch.setattr(entry, "_default_build", default_build)
    return calls


def test_relay_ext_compile_is_the_build_entry_point():
    assert relay_ext.compile is compile and SCHEDULES == ("tuned", "no-search", "default")
    assert relay_ext.run_module is run_module


@pytest.mark.parametrize("kwargs, message", [
    (dict(schedule="fastest"), "unknown schedule 'fastest'"),
    (dict(schedule="default", records="work"), "records are built with schedule='tuned'"),
    (dict(schedule="no-search", opt_level=2), "opt_level 2 is for schedule='default'"),
    (dict(variant="nonsense"), "nonsense"),
])
def test_arguments_are_checked_before_anything_is_built(tiny, build_steps, kwargs, message):
    with pytest.raises(ValueError, match=message):
        compile(tiny, target="llvm", **kwargs)
    with pytest.raises(ValueError, match="brings its own params"):
        compile(tiny, tiny.params, target="llvm")
    assert build_steps == []


def test_without_records_the_tuned_schedule_is_the_rule_designs_build(tiny, build_steps):
    compiled = compile(tiny.mod, tiny.params, "llvm", threads=1)
    assert isinstance(compiled, Compiled) and compiled.schedule == "no-search"
    assert compiled.threads == 1 and compiled.no_search is None
    assert build_steps == [("rule designs and records", True, True)]
    with pytest.raises(_Reached):
        compile(tiny, target="llvm", schedule="default")
    assert build_steps[-1] == ("default", 3)


@needs_c_compiler
def test_export_bench_and_the_accuracy_check_build_through_compile(tiny, build_steps, tmp_path):
    from relay_ext.latency.run import measure_latency
    from relay_ext.report.accuracy import compare_untuned_with_reference

    with pytest.raises(_Reached):
        relay_ext.export(tmp_path / "model.so", tiny, target="llvm", schedule="default")
    assert build_steps == [("default", 3)] and list(tmp_path.iterdir()) == []

    build_steps.clear()  # bench: the rule designs' build (no work dir), then TVM's default
    with pytest.raises(_Reached):
        measure_latency(tiny, None, "llvm", threads=1, peers=False)
    assert build_steps == [("rule designs and records", True, True), ("default", 3)]

    build_steps.clear()  # the accuracy check: TVM's default build at Relay's default level
    with pytest.raises(_Reached):
        compare_untuned_with_reference(tiny)
    assert build_steps == [("default", 2)]
