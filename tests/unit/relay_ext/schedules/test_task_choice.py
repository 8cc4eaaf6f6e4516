"""relay_ext/schedules/task_choice.py, the per-task choice: a task whose best record runs slower
than TVM's default schedule of the task is compiled with the default. The database holds a
deliberately slow record of a convolution (its loops reversed: serial, not vectorized), which
claims 1 ns."""

import numpy as np
import pytest
from tvm import meta_schedule as ms
from tvm import tir

from relay_ext.build import compile
from relay_ext.lowering import targets
from relay_ext.measure.run import run_module
from relay_ext.schedules.task_choice import choose_per_task
from relay_ext.schedules.task_inputs import task_function_module, weight_params
from conftest import AVX2
from helpers import cannot_run_here, conv_block, every_task_designed, slow_conv_database as make_slow_conv_database


@pytest.fixture(scope="module")
def slow_conv_database(tiny):
    if cannot_run_here(AVX2):
        pytest.skip(cannot_run_here(AVX2))
    target = targets.normalize_target(AVX2)
    return (target, *make_slow_conv_database(tiny, target))


def test_a_record_slower_than_the_default_is_dropped(slow_conv_database, tiny):
    target, tasks, task, database = slow_conv_database
    kept = choose_per_task(database, tiny.mod, tiny.params, target, "ours", tasks=tasks)
    # only the task that has a record is compared, and its naive record lost to TOPI's schedule
    assert [c.task for c in kept.comparisons] == [task.task_name]
    (comparison,) = kept.comparisons
    assert comparison.uses_default and kept.defaults == [comparison]
    assert comparison.record_ms > 1.5 * comparison.default_ms, comparison
    assert "TVM's default schedule used" in str(comparison)
    assert not kept.database.get_all_tuning_records()  # the record is gone; the input db kept it
    assert len(database.get_all_tuning_records()) == 1


def test_the_model_compiled_under_the_rule_is_the_default_build(slow_conv_database, tiny):
    """relay_ext.compile with the slow record: the conv gets its rule design or TVM's default,
    never the record, and the model computes what TVM's default build does."""
    target, _, task, database = slow_conv_database
    with every_task_designed():
        compiled = compile(tiny, target=target, records=database)
    (comparison,) = [c for c in compiled.choices if c.task == task.task_name]
    assert comparison.choice in ("no-search", "default"), comparison  # not the slow record
    assert task.task_name in compiled.default_tasks + compiled.rule_design_tasks
    default = compile(tiny, target=target, schedule="default")
    ours, theirs = run_module(compiled, tiny.inputs)[0], run_module(default, tiny.inputs)[0]
    np.testing.assert_array_equal(ours, theirs)


def test_the_weights_of_a_conv_task_are_bound_as_constants(slow_conv_database):
    _, _, task, _ = slow_conv_database
    func = task_function_module(task)["main"]
    names = weight_params(func)
    assert len(names) == 1 and names[0] != func.params[0].name_hint  # p0 is the data
    assert len(func.params[[p.name_hint for p in func.params].index(names[0])].checked_type.shape) >= 4


class CountingTimer:
    """Stands in for time_task: counts the tasks timed and returns fixed times (the cache's
    behaviour is under test here, not the timing)."""

    def __init__(self):
        self.timed = []

    def __call__(self, task, database, target, variant, rounds=5, on_built=None, **kwargs):
        from relay_ext.schedules.task_choice import TaskVsDefault

        self.timed.append(task.task_name)
        return TaskVsDefault(task.task_name, 2.0, 1.0, int(task.weight))  # the record loses


def _with_other_record(database, task, target):
    """A database whose record of ``task`` is another schedule (its two outer loops swapped)."""
    other = ms.database.MemoryDatabase()
    workload = other.commit_workload(task.dispatched[0])
    (func,) = task.dispatched[0].functions.values()
    sch = tir.Schedule(task.dispatched[0])
    conv = conv_block(sch)
    outer = sch.get_loops(conv)[:2]
    sch.reorder(outer[1], outer[0])
    other.commit_tuning_record(ms.database.TuningRecord(
        sch.trace, workload, [1e-9], target,
        ms.arg_info.ArgInfo.from_prim_func(func)))
    return other


@pytest.fixture
def timer(monkeypatch):
    """The per-task choice's task timing replaced by a :class:`CountingTimer`."""
    from relay_ext.schedules import task_choice

    counting = CountingTimer()
    monkeypatch.setattr(task_choice, "time_task", counting)
    # no in-model profile: every task goes to the (counting) timing of one task alone
    monkeypatch.setattr(task_choice, "measure_in_model", lambda *args, **kwargs: {})
    return counting


def test_a_second_call_with_the_cache_times_nothing(slow_conv_database, tiny, tmp_path, timer):
    target, tasks, task, database = slow_conv_database
    cache = tmp_path / "never_slower_timings.json"
    first = choose_per_task(database, tiny.mod, tiny.params, target, "ours", tasks=tasks,
                                 cache_path=cache)
    assert timer.timed == [task.task_name] and cache.is_file()
    second = choose_per_task(database, tiny.mod, tiny.params, target, "ours", tasks=tasks,
                                  cache_path=cache)
    assert timer.timed == [task.task_name]  # nothing timed again
    assert [c.to_dict() for c in second.comparisons] == [c.to_dict() for c in first.comparisons]
    assert second.defaults and not second.database.get_all_tuning_records()
    # without a cache path, every call times
    choose_per_task(database, tiny.mod, tiny.params, target, "ours", tasks=tasks)
    assert len(timer.timed) == 2


def test_a_changed_record_or_target_is_timed_again(slow_conv_database, tiny, tmp_path, timer):
    target, tasks, task, database = slow_conv_database
    cache = tmp_path / "cache.json"
    choose_per_task(database, tiny.mod, tiny.params, target, "ours", tasks=tasks,
                         cache_path=cache)
    other = _with_other_record(database, task, target)
    choose_per_task(other, tiny.mod, tiny.params, target, "ours", tasks=tasks,
                         cache_path=cache)
    assert len(timer.timed) == 2  # another trace: timed
    one_core = targets.normalize_target(AVX2.replace("-num-cores 2", "-num-cores 1"))
    choose_per_task(database, tiny.mod, tiny.params, one_core, "ours", tasks=tasks,
                         cache_path=cache)
    assert len(timer.timed) == 3  # another target string: timed
    choose_per_task(database, tiny.mod, tiny.params, target, "ours", tasks=tasks,
                         cache_path=cache)
    assert len(timer.timed) == 3  # both kept: the first one is still there
    cache.write_text("{not json")
    choose_per_task(database, tiny.mod, tiny.params, target, "ours", tasks=tasks,
                         cache_path=cache)
    assert len(timer.timed) == 4  # an unreadable cache is read as empty, and rewritten
    assert '"entries"' in cache.read_text()


def test_the_cache_key_holds_tvms_thread_count(slow_conv_database):
    from relay_ext.workdir.timing_cache import TimingCache
    from relay_ext.measure.timing import with_tvm_threads

    target, _, task, database = slow_conv_database
    (record,) = database.get_all_tuning_records()
    workload = task.dispatched[0]
    one = with_tvm_threads(1, lambda: TimingCache.key(workload, record, target))
    two = with_tvm_threads(2, lambda: TimingCache.key(workload, record, target))
    assert one != two
    assert one == with_tvm_threads(1, lambda: TimingCache.key(workload, record, target))


def _with_and_without_quantfuse(tmp_path, body: str, done: str):
    """``body`` run in two fresh processes (TVM warns once per process), one importing
    ``relay_ext.lowering.relay_build`` first: {"tvm": ..., "quantfuse": ...} CompletedProcess, both
    checked to have printed ``done``."""
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text("import sys, tvm\n"
                      "if sys.argv[1] == 'quantfuse':\n"
                      "    import relay_ext.lowering.relay_build\n" + body + f"print({done!r})\n")
    runs = {how: subprocess.run([sys.executable, str(script), how], capture_output=True,
                                text=True, timeout=300) for how in ("tvm", "quantfuse")}
    assert all(r.returncode == 0 and done in r.stdout for r in runs.values()), runs
    return runs


def test_tvms_not_tuned_warning_does_not_reach_stderr(tmp_path):
    """Relay's TE compiler warns once per process on the autotvm logger; importing quantfuse's
    build routes it to quantfuse's DEBUG log (a fresh process: TVM warns only once per process;
    the same build without quantfuse's import prints it, so the check can fail)."""
    runs = _with_and_without_quantfuse(tmp_path, (
        "import numpy as np\n"
        "from tvm import relay\n"
        "x = relay.var('x', shape=(1, 16), dtype='float32')\n"
        "w = relay.const(np.ones((8, 16), 'float32'))\n"
        "mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.dense(x, w)))\n"
        "with tvm.transform.PassContext(opt_level=3):\n"
        "    relay.build(mod, 'llvm')\n"), "built")
    assert "One or more operators have not been tuned" in runs["tvm"].stderr
    assert "not been tuned" not in runs["quantfuse"].stderr + runs["quantfuse"].stdout


def test_tvms_fallback_configuration_warning_does_not_reach_stderr(tmp_path):
    """AutoTVM's "Cannot find config ... A fallback configuration is used" (once per workload, on
    the autotvm logger, from TOPI's default schedules outside relay.build's silencing: a ResNet-18
    bench printed 7) goes to quantfuse's DEBUG log too; without quantfuse's import it prints."""
    runs = _with_and_without_quantfuse(tmp_path, (
        "from tvm import autotvm\n"
        "autotvm.task.FallbackContext().query(tvm.target.Target('llvm'), ('conv2d', 'a test'))\n"),
        "queried")
    assert "Cannot find config for target=" in runs["tvm"].stderr
    assert "Cannot find config" not in runs["quantfuse"].stderr + runs["quantfuse"].stdout


# --- the rule design beside the tuned record (relay_ext.build.whole_model) ---

@pytest.fixture(scope="module")
def no_search_designs(slow_conv_database, tiny):
    """The compilable rule design records of tiny_resnet's tasks (AVX2)."""
    from relay_ext.schedules.records import compilable_records
    from relay_ext.schedules.rule_designs import rule_design_records

    target, tasks, _, _ = slow_conv_database
    with every_task_designed():  # tiny_resnet's AVX2 convs: TOPI's alone otherwise
        found = rule_design_records(tiny.mod, tiny.params, target, "ours", tasks)
    assert any(d.has_record for d in found.designs)
    return compilable_records(found.database).database


def _trace_of(database, workload):
    from relay_ext.schedules.task_choice import best_record

    record = best_record(database, workload)
    return None if record is None else str(record.trace)


def test_the_slow_record_loses_to_its_no_search_schedule_or_the_default_and_every_task_is_timed(
        slow_conv_database, no_search_designs, tiny):
    """Timed for real: the deliberately slow record is beaten; every task with a no-search design
    but no tuned record is timed too (its no-search schedule against the default)."""
    from relay_ext.measure.timing import with_tvm_threads

    target, tasks, task, database = slow_conv_database
    # one thread: a parallel kernel's barrier can wait out a time slice of the CPU that the
    # other test process holds, a serial one cannot
    kept = with_tvm_threads(1, lambda: choose_per_task(
        database, tiny.mod, tiny.params, target, "ours", tasks=tasks, designs=no_search_designs))
    by_task = {c.task: c for c in kept.comparisons}
    slow = by_task[task.task_name]
    assert slow.record_source == "tuned" and slow.no_search_ms is not None, slow
    assert slow.choice in ("no-search", "default"), slow
    assert slow.record_ms > 1.5 * min(slow.no_search_ms, slow.default_ms), slow
    designed = [t for t in tasks if _trace_of(no_search_designs, t.dispatched[0]) is not None]
    assert {t.task_name for t in designed} <= set(by_task)
    for other in designed:
        if other.task_name != task.task_name:
            assert by_task[other.task_name].record_source == "no-search"
    # what the kept database holds for each task is what its comparison chose
    for t in designed:
        comparison, workload = by_task[t.task_name], t.dispatched[0]
        held = _trace_of(kept.database, workload)
        if comparison.choice == "default":
            assert held is None, comparison
        else:
            assert held == _trace_of(no_search_designs, workload), comparison


class ChoosingTimer:
    """Stands in for time_task with fixed times: the tuned record 2 ms, the no-search schedule
    ``no_search_ms``, TVM's default 3 ms (the choice is under test here, not the timing)."""

    def __init__(self, no_search_ms):
        self.no_search_ms = no_search_ms

    def __call__(self, task, database, target, variant, rounds=5, on_built=None, design=None,
                 record_source="tuned"):
        from relay_ext.schedules.task_choice import TaskVsDefault

        record_ms = self.no_search_ms if record_source == "no-search" else 2.0
        return TaskVsDefault(task.task_name, record_ms, 3.0, int(task.weight),
                             self.no_search_ms if design is not None else None, record_source)


@pytest.mark.parametrize("no_search_ms, expected", [(1.0, "no-search"), (2.5, "tuned"),
                                                    (9.0, "tuned")])
def test_the_faster_of_the_tuned_record_and_the_no_search_schedule_is_compiled(
        slow_conv_database, no_search_designs, tiny, monkeypatch, no_search_ms, expected):
    from relay_ext.schedules import task_choice
    from relay_ext.build.whole_model import _design_choice

    monkeypatch.setattr(task_choice, "time_task", ChoosingTimer(no_search_ms))
    monkeypatch.setattr(task_choice, "measure_in_model", lambda *args, **kwargs: {})
    target, tasks, task, database = slow_conv_database
    if _trace_of(no_search_designs, task.dispatched[0]) is None:
        pytest.skip(f"{task.task_name} has no no-search design on {AVX2}")
    kept = choose_per_task(database, tiny.mod, tiny.params, target, "ours", tasks=tasks,
                                designs=no_search_designs)
    (comparison,) = [c for c in kept.comparisons if c.task == task.task_name]
    assert comparison.choice == expected, comparison
    held = _trace_of(kept.database, task.dispatched[0])
    source = no_search_designs if expected == "no-search" else database
    assert held == _trace_of(source, task.dispatched[0])
    assert (task.task_name in [c.task for c in kept.rule_designs_used]) == (expected == "no-search")
    # the rule designs' build, from the same timings: its schedule unless the default (3 ms) beat it
    alone = _design_choice(no_search_designs, kept)
    held = _trace_of(alone.database, task.dispatched[0])
    if no_search_ms > 3.0 * (1 + task_choice.MARGIN):
        assert held is None
    else:
        assert held == _trace_of(no_search_designs, task.dispatched[0])
    assert len(alone.comparisons) == len([c for c in kept.comparisons])


def test_every_task_is_timed_inside_the_model_once_and_then_read_from_the_cache(
        slow_conv_database, no_search_designs, tiny, tmp_path, monkeypatch):
    """The default measurement profiles three builds of the whole model (records, no-search,
    default), one call for every task; no task is timed alone; a second call reads the cache."""
    from relay_ext.schedules import task_choice

    profiled, alone = [], []
    real = task_choice.measure_in_model
    monkeypatch.setattr(task_choice, "measure_in_model",
                        lambda plans, *rest: profiled.append(len(plans)) or real(plans, *rest))
    monkeypatch.setattr(task_choice, "time_task",
                        lambda task, *rest, **kwargs: alone.append(task.task_name))
    target, tasks, task, database = slow_conv_database
    cache = tmp_path / "cache.json"
    first = choose_per_task(database, tiny.mod, tiny.params, target, "ours", tasks=tasks,
                                 cache_path=cache, designs=no_search_designs)
    assert profiled == [len(first.comparisons)] and alone == [], (profiled, alone)
    slow = [c for c in first.comparisons if c.task == task.task_name][0]
    assert slow.record_ms > 1.5 * min(slow.default_ms, slow.no_search_ms), slow
    assert all(c.default_ms > 0 and c.record_ms > 0 for c in first.comparisons)
    second = choose_per_task(database, tiny.mod, tiny.params, target, "ours", tasks=tasks,
                                  cache_path=cache, designs=no_search_designs)
    assert profiled == [len(first.comparisons)] and alone == []
    assert [c.to_dict() for c in second.comparisons] == [c.to_dict() for c in first.comparisons]
