"""Issue 18's never-slower rule: a task whose best record runs slower than TVM's default schedule
of the task is compiled with the default. The database holds a deliberately slow record of a
convolution (its loops reversed: serial, not vectorized), which claims 1 ns."""

import numpy as np
import pytest
import tvm
from tvm import meta_schedule as ms
from tvm import tir

from relay_ext.lowering import targets
from relay_ext.report.accuracy import build_untuned
from relay_ext.tuning import extract_tasks, run_module
from relay_ext.tuning.never_slower import (
    compile_never_slower,
    never_slower_records,
    weight_params,
    task_function_module,
)
from conftest import AVX2


@pytest.fixture(scope="module")
def slow_conv_database(tiny):
    if targets.missing_features(AVX2):
        pytest.skip(f"this host's OS does not enable {targets.missing_features(AVX2)} ({AVX2})")
    target = targets.normalize_target(AVX2)
    tasks = extract_tasks(tiny.mod, tiny.params, target)
    convs = [t for t in tasks if "conv2d" in t.task_name]
    task = max(convs, key=lambda t: t.task_name)  # any conv; the same one every run
    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(task.dispatched[0])
    # deliberately slow: the convolution's loops in reverse order (reduction outermost, no
    # vectorization, no parallel loop), claiming 1 ns
    slow = tir.Schedule(task.dispatched[0])
    (conv,) = slow.get_child_blocks(slow.get_block("root"))
    slow.reorder(*reversed(slow.get_loops(conv)))
    (func,) = task.dispatched[0].functions.values()
    database.commit_tuning_record(ms.database.TuningRecord(
        slow.trace, workload, [1e-9], target, ms.arg_info.ArgInfo.from_prim_func(func)))
    return target, tasks, task, database


def test_a_record_slower_than_the_default_is_dropped(slow_conv_database, tiny):
    target, tasks, task, database = slow_conv_database
    kept = never_slower_records(database, tiny.mod, tiny.params, target, "ours", tasks=tasks)
    # only the task that has a record is compared, and its naive record lost to TOPI's schedule
    assert [c.task for c in kept.comparisons] == [task.task_name]
    (comparison,) = kept.comparisons
    assert comparison.uses_default and kept.defaults == [comparison]
    assert comparison.record_ms > 1.5 * comparison.default_ms, comparison
    assert "TVM's default schedule used" in str(comparison)
    assert not kept.database.get_all_tuning_records()  # the record is gone; the input db kept it
    assert len(database.get_all_tuning_records()) == 1


def test_the_model_compiled_under_the_rule_is_the_default_build(slow_conv_database, tiny):
    target, tasks, task, database = slow_conv_database
    lib, kept = compile_never_slower(database, tiny.mod, tiny.params, target, "ours", tasks=tasks)
    assert [c.task for c in kept.defaults] == [task.task_name]
    with tvm.transform.PassContext(opt_level=3):
        untuned = build_untuned(tiny.mod, tiny.params, target)
    ours, default = run_module(lib, tiny.inputs)[0], run_module(untuned, tiny.inputs)[0]
    np.testing.assert_array_equal(ours, default)


def test_the_weights_of_a_conv_task_are_bound_as_constants(slow_conv_database):
    _, _, task, _ = slow_conv_database
    func = task_function_module(task)["main"]
    names = weight_params(func)
    assert len(names) == 1 and names[0] != func.params[0].name_hint  # p0 is the data
    assert len(func.params[[p.name_hint for p in func.params].index(names[0])].checked_type.shape) >= 4
