"""A built model's kernels known by the task they run, not by their names."""

import pytest
import tvm
from tvm import meta_schedule as ms

from relay_ext.frontend.models import load
from relay_ext.lowering.relay_build import compile_with
from relay_ext.lowering.targets import normalize_target
from relay_ext.lowering.tasks import lowered_tasks
from relay_ext.measure.in_model import _Function, kernel_tasks
from helpers import VNNI

# TVM's VNNI layout: ResNet-18's strided 1x1 convs are named in one order by the task extraction
# and in another by the build (built here, never run: any x86 host compiles it)


@pytest.fixture(scope="module")
def resnet18_build():
    model = load("resnet18", image_size=32)
    target = normalize_target(VNNI)
    tasks = lowered_tasks(model.mod, model.params, target, "ours")
    lib = compile_with(ms.database.MemoryDatabase(), model.mod, model.params, target, "ours")
    return tasks, lib


def _task_function(task):
    (_, func), = task.mod.functions.items()
    return func


def test_every_kernel_is_the_task_whose_function_it_runs_even_where_the_names_differ(
        resnet18_build):
    tasks, lib = resnet18_build
    found = kernel_tasks(lib, tasks)
    by_name = {str(task.task_name): task for task in tasks}
    kernels = {symbol[len("tvmgen_default_"):]: info for symbol, info in lib.function_metadata.items()
               if info.tir_primfuncs}
    assert set(found) == set(kernels)
    assert sorted(found.values()) == sorted(by_name)  # one kernel per task, each task once
    renamed = [kernel for kernel, task in found.items() if kernel != task]
    assert renamed  # a lookup by name would time another task's kernel
    for kernel, task in found.items():
        built, = kernels[kernel].relay_primfuncs.values()
        extracted = _task_function(by_name[task])
        assert tvm.ir.structural_equal(built.ret_type, extracted.ret_type)
        assert tvm.ir.structural_equal(
            tvm.relay.Function(list(built.params), built.body),
            tvm.relay.Function(list(extracted.params), extracted.body), map_free_vars=True)


def test_a_kernel_of_another_model_matches_no_task(tiny):
    target = normalize_target(VNNI)
    tasks = lowered_tasks(tiny.mod, tiny.params, target, "ours")
    own = compile_with(ms.database.MemoryDatabase(), tiny.mod, tiny.params, target, "ours")
    assert set(kernel_tasks(own, tasks).values()) >= {
        str(task.task_name) for task in tasks if "conv2d" in str(task.task_name)}
    mlp = load("mlp")
    other = compile_with(ms.database.MemoryDatabase(), mlp.mod, mlp.params, target, "ours")
    assert kernel_tasks(other, tasks) == {}


def _add(x_shape, w_shape):
    x, w = tvm.relay.var("x", shape=x_shape), tvm.relay.var("w", shape=w_shape)
    mod = tvm.relay.transform.InferType()(tvm.IRModule.from_expr(tvm.relay.Function([x, w], x + w)))
    return _Function.of(mod["main"])


def test_a_kernel_is_alike_a_task_with_one_parameter_of_another_type_only():
    """One parameter of another type: a weight whose layout the build rewrote. Every parameter of
    another type, the same ops and result: another function (another model's dense, padded)."""
    task = _add((1, 16), (1, 16))
    assert task.alike(_add((1, 16), (16,)))  # the weight's layout differs, the same (1, 16) sum
    assert not task.alike(_add((16,), (16,)))  # a (16,) result
    assert not _add((1, 16), (16,)).alike(_add((16,), (1, 16)))  # both parameters differ
