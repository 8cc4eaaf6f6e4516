"""ZeroBasedLoops: a loop that a partition left starting elsewhere than 0 (which TVM's CPU code
generator refuses) becomes one from 0 over the same iterations."""

import numpy as np
import pytest
import tvm
from tvm import tir
from tvm.script import tir as T

from relay_ext.lowering.config import BUILD_OPTIONS
from relay_ext.lowering.zero_based_loops import zero_based_loops


@T.prim_func
def shift_right(a: T.Buffer((16,), "int32"), b: T.Buffer((16,), "int32")):
    for i in range(16):
        with T.block("copy"):
            vi = T.axis.spatial(16, i)
            b[vi] = T.if_then_else(3 <= vi and vi < 13, a[vi - 3] * 2, -1)


def partitioned() -> tvm.IRModule:
    sch = tir.Schedule(shift_right)
    sch.loop_partition(sch.get_loops(sch.get_block("copy"))[0], [3, 10, None])
    return sch.mod


def _loop_starts(func):
    found = []
    tir.stmt_functor.post_order_visit(
        func.body, lambda n: found.append(int(n.min)) if isinstance(n, tir.For) else None)
    return found


def test_the_partition_leaves_loops_that_do_not_start_at_zero_and_the_pass_moves_them():
    lowered = tvm.lower(partitioned())  # the pass is not in TVM's own pipeline
    assert sorted(_loop_starts(lowered["main"])) == [0, 3, 13]
    after = zero_based_loops(lowered)["main"]
    assert _loop_starts(after) == [0, 0, 0]


def test_a_function_without_such_loops_comes_out_unchanged():
    mod = tvm.lower(tvm.IRModule({"main": shift_right}))
    assert zero_based_loops(mod)["main"].same_as(mod["main"])


def test_the_partitioned_kernel_builds_with_the_pass_and_computes_the_same():
    with pytest.raises(tvm.TVMError, match="is_zero"):
        tvm.build(partitioned(), target="llvm")
    with tvm.transform.PassContext(config=BUILD_OPTIONS):
        lib = tvm.build(partitioned(), target="llvm")
    a = np.arange(16, dtype="int32")
    b = tvm.nd.empty((16,), "int32")
    lib(tvm.nd.array(a), b)
    expected = np.full(16, -1, dtype="int32")
    expected[3:13] = a[:10] * 2
    np.testing.assert_array_equal(b.numpy(), expected)
