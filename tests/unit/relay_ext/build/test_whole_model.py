"""relay_ext.build.whole_model: the tuned build checked whole against the rule designs' build
(bench's "TVM no-search" row), and the per-task choice's in-model timing (relay_ext.measure.in_model).
The tuned records are one deliberately slow schedule of a conv (tests/helpers.py)."""

import numpy as np
import pytest

from relay_ext.build import compile
from relay_ext.build import whole_model
from relay_ext.build.whole_model import WholeModel
from relay_ext.lowering import targets
from relay_ext.lowering.tasks import lowered_tasks
from relay_ext.measure.in_model import profile_in_model
from relay_ext.measure.run import run_module
from relay_ext.schedules.task_choice import MARGIN
from conftest import AVX2
from helpers import cannot_run_here, every_task_designed, slow_conv_database


@pytest.fixture(scope="module")
def avx2_target():
    if cannot_run_here(AVX2):
        pytest.skip(cannot_run_here(AVX2))
    return targets.normalize_target(AVX2)


@pytest.fixture(scope="module")
def slow_record(tiny, avx2_target):
    """(the slow conv's task, a database holding only its slow record)."""
    _, task, database = slow_conv_database(tiny, avx2_target)
    return task, database


@pytest.fixture(scope="module")
def default_output(tiny, avx2_target):
    """TVM's default build's output (bench's untuned row)."""
    return run_module(compile(tiny, target=avx2_target, schedule="default"), tiny.inputs)[0]


def test_whole_model_verdict():
    assert WholeModel(3.3, 3.0, 1.02).uses_no_search
    assert not WholeModel(3.0, 3.3, 0.97).uses_no_search
    assert "no-search build is compiled as the tuned one" in str(WholeModel(3.3, 3.0, 1.02))
    assert WholeModel(1.0, 2.0, 0.5).to_dict()["uses_no_search"] is False


def _check_choices(compiled):
    """Each comparison's choice is the fastest of what it timed (the default with its margin),
    and the task lists say the same."""
    for c in compiled.choices:
        timed = {"default": c.default_ms * (1 + MARGIN),
                 "no-search" if c.record_source == "no-search" else "tuned": c.record_ms}
        if c.no_search_ms is not None:
            timed["no-search"] = min(timed.get("no-search", np.inf), c.no_search_ms)
        assert c.choice == min(timed, key=timed.get) or (
            c.choice == "tuned" and timed.get("no-search") == timed["tuned"]), c
    assert compiled.default_tasks == [c.task for c in compiled.choices if c.choice == "default"]
    assert compiled.rule_design_tasks == [c.task for c in compiled.choices
                                          if c.choice == "no-search"]


@pytest.mark.parametrize("ratio", [1.5, 0.5])
def test_a_tuned_build_slower_as_a_whole_is_replaced_by_the_no_search_build(
        avx2_target, tiny, slow_record, default_output, tmp_path_factory, monkeypatch, ratio):
    """The whole-model verdict (faked here: the timing is not under test) decides which build is
    the tuned one and which choices it reports; the per-task timings are real (kept in a cache
    both parameters share). The slow record never survives, every other task with a rule design
    is compared through it, and all three builds compute the same integers."""
    task, database = slow_record
    monkeypatch.setattr(whole_model, "_time_whole_models",
                        lambda *args, **kwargs: WholeModel(1.0, 1.0, ratio))
    cache = tmp_path_factory.getbasetemp() / "test_builds_timings.json"
    # one thread: a parallel kernel's barrier can wait out a time slice of the CPU that the
    # other test process holds (the default's 6 us timed 3.9 ms so), a serial one cannot
    compiled = compile(tiny, target=avx2_target, records=database, timing_cache=cache,
                       with_no_search=True, threads=1)
    designs = compiled.no_search
    assert compiled.schedule == "tuned" and designs.schedule == "no-search"
    assert compiled.whole_model.ratio == ratio and compiled.threads == designs.threads > 0
    if ratio > 1:
        assert compiled.lib is designs.lib and compiled.choices == designs.choices
        assert all(c.record_source == "no-search" for c in compiled.choices)
    else:
        assert compiled.lib is not designs.lib
        by_task = {c.task: c for c in compiled.choices}
        assert by_task[task.task_name].record_source == "tuned"
        assert by_task[task.task_name].choice in ("no-search", "default"), by_task
        designed = [d.task for d in compiled.designs.designs if d.has_record]
        assert set(designed) <= set(by_task)
        assert all(by_task[name].record_source == "no-search" for name in designed
                   if name != task.task_name)
    _check_choices(compiled)
    _check_choices(designs)
    for built in (compiled, designs):
        np.testing.assert_array_equal(run_module(built, tiny.inputs)[0], default_output)


def test_the_whole_model_comparison_is_timed_once_and_then_read_from_the_cache(
        avx2_target, tiny, slow_record, tmp_path, monkeypatch):
    from relay_ext.measure import timing

    _, database = slow_record
    cache = tmp_path / "never_slower_timings.json"
    first = compile(tiny, target=avx2_target, records=database, timing_cache=cache)
    assert first.whole_model.tuned_ms > 0 and first.whole_model.no_search_ms > 0
    assert 0 < first.whole_model.ratio < 10
    timed = []
    real = timing.tvm_timer
    monkeypatch.setattr(timing, "tvm_timer", lambda *a, **k: timed.append(1) or real(*a, **k))
    second = compile(tiny, target=avx2_target, records=database, timing_cache=cache)
    assert timed == [] and second.whole_model == first.whole_model
    assert [c.to_dict() for c in second.choices] == [c.to_dict() for c in first.choices]


def test_without_records_or_the_choice_nothing_is_timed_and_the_designs_build_is_exact(
        avx2_target, tiny, default_output, capsys):
    """No records: the rule designs' build, untimed with ``choose_per_task=False``; every kernel
    of it is profiled inside the model, and nothing printed."""
    with every_task_designed():  # tiny_resnet's AVX2 convs: TOPI's alone otherwise
        compiled = compile(tiny, target=avx2_target, schedule="no-search", choose_per_task=False)
    assert compiled.schedule == "no-search" and compiled.choices is None
    assert compiled.threads is None and compiled.whole_model is None
    assert compiled.default_tasks == compiled.rule_design_tasks == []
    assert any(d.has_record for d in compiled.designs.designs)
    np.testing.assert_array_equal(run_module(compiled, tiny.inputs)[0], default_output)
    capsys.readouterr()
    tasks = lowered_tasks(tiny.mod, tiny.params, avx2_target, "ours")
    times = profile_in_model({"a": compiled.lib, "b": compiled.lib}, tiny.inputs, tasks, rounds=2)
    assert capsys.readouterr().out == ""  # the debug executor's table would break bench --json
    # every kernel timed under its task's name (a reshape runs no kernel: not timed)
    assert set(times) == {"a", "b"} and set(times["a"]) == set(times["b"])
    names = {str(task.task_name) for task in tasks}
    assert set(times["a"]) <= names
    assert {name for name in names if "conv2d" in name or "dense" in name} <= set(times["a"])
    assert all(ms_ > 0 for ms_ in times["a"].values())
