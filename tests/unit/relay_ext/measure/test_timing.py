"""TVM's CPU thread pool really gets the thread count bench asks for, and the timing toolkit's
pauses wait for this process's threads (relay_ext.measure.timing). Nothing here depends on how
fast the machine is: which OS thread ran each iteration of a parallel loop is recorded by the
loop itself, and the pauses are checked against a simulated clock."""

import os
import threading
import time

import numpy as np
import pytest
import torch
import tvm
from tvm.script import tir as T

from relay_ext.measure import timing
from relay_ext.measure.timing import TVMThread, with_tvm_threads

CPUS = os.cpu_count() or 1
ITERATIONS = 64


def _pool_size() -> int:
    return int(tvm.get_global_func("runtime.NumThreads")())


@T.prim_func
def _which_thread(out: T.Buffer((ITERATIONS,), "int64")):
    # Each iteration of a parallel loop writes the id of the OS thread that ran it
    # (pthread_self, which is Python's threading.get_ident on Linux).
    for i in T.parallel(ITERATIONS):
        out[i] = T.call_extern("int64", "pthread_self")


@pytest.fixture(scope="module")
def which_thread():
    """The parallel loop above, compiled for this CPU (LLVM's JIT: no C compiler needed)."""
    return tvm.build(_which_thread, target="llvm")


def _threads_per_iteration(lib, timed: bool = False):
    """(thread id per loop iteration, the calling thread's id, its pool size), run where called;
    ``timed``: the runs of TVM's time_evaluator, as bench's timer makes them."""
    out = tvm.nd.array(np.zeros(ITERATIONS, "int64"))
    if timed:
        lib.time_evaluator(lib.entry_name, tvm.cpu(), number=3, repeat=1)(out)
    else:
        lib(out)
    return [int(v) for v in out.numpy()], threading.get_ident(), _pool_size()


@pytest.mark.skipif(CPUS < 2, reason="one CPU: no second thread to give TVM")
def test_the_pool_has_the_requested_threads():
    # config_threadpool(0, 2) cannot widen a pool of one (half the logical CPUs on a 2-CPU
    # machine); a pool created with TVM_NUM_THREADS set can.
    assert with_tvm_threads(1, _pool_size) == 1
    assert with_tvm_threads(2, _pool_size) == 2
    assert "TVM_NUM_THREADS" not in os.environ or os.environ["TVM_NUM_THREADS"] != "2"
    with pytest.raises(ZeroDivisionError):  # errors in the work come back to the caller
        with_tvm_threads(2, lambda: 1 / 0)


@pytest.mark.skipif(CPUS < 2, reason="one CPU: no second thread to give TVM")
def test_tvm_thread_keeps_one_pool_and_leaves_the_callers_thread_alone():
    caller = threading.get_ident()
    with TVMThread(2) as tvm_thread:
        first, second = tvm_thread.run(threading.get_ident), tvm_thread.run(threading.get_ident)
        assert first == second != caller  # one thread for every job: one pool, created once
        assert tvm_thread.run(_pool_size) == 2
        assert tvm_thread.timer(lambda: 0.25)() == 0.25
        with pytest.raises(KeyError):
            tvm_thread.run(lambda: {}["missing"])
        assert tvm_thread.run(_pool_size) == 2  # an error does not end the thread


@pytest.mark.skipif(CPUS < 2, reason="one CPU: no second thread to give TVM")
@pytest.mark.parametrize("timed", [False, True], ids=["called", "time_evaluator"])
def test_a_parallel_loop_is_split_over_exactly_the_threads_asked_for(which_thread, timed):
    """With 2 threads the loop's iterations are shared half and half by the TVM thread and one
    worker of its pool; with 1, the TVM thread runs them all. TVM splits a parallel loop into one
    static chunk per thread of the pool, so this holds however busy the machine is."""
    for threads in (1, 2):
        ids, tvm_thread, pool = with_tvm_threads(
            threads, lambda: _threads_per_iteration(which_thread, timed))
        assert pool == threads
        per_thread = {tid: ids.count(tid) for tid in set(ids)}
        assert len(per_thread) == threads, per_thread
        assert per_thread[tvm_thread] == ITERATIONS // threads, per_thread  # one chunk is its own
        assert sorted(per_thread.values()) == [ITERATIONS // threads] * threads, per_thread
        # the TVM thread's pool: neither the caller's thread nor another pool's threads
        assert threading.get_ident() not in per_thread


def test_every_round_starts_with_one_untimed_run():
    """PyTorch's timer (ONNX Runtime's and TVM's likewise; TVM's time_evaluator makes its own too)
    runs once untimed before the timed runs of each round, so that no runtime pays for waking up
    after bench's pause."""
    from relay_ext.peers.pytorch import torch_timer

    calls = []

    class Counting(torch.nn.Module):
        def forward(self, x):
            calls.append(time.perf_counter())
            return x + 1

    one_round = torch_timer(Counting(), np.zeros((1, 4), np.float32), number=3)
    assert len(calls) == 1  # the warm-up when the timer is made
    one_round()
    assert len(calls) == 1 + 1 + 3


class _SimulatedClock:
    """Stands for :mod:`time` in :mod:`relay_ext.measure.timing`: sleeping advances the wall
    clock, and this process uses one CPU until ``busy_until`` (seconds of wall time)."""

    def __init__(self, busy_until: float):
        self.wall = self.cpu = 0.0
        self.busy_until = busy_until
        self.sleeps = []

    def perf_counter(self) -> float:
        return self.wall

    def process_time(self) -> float:
        return self.cpu

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.cpu += max(0.0, min(self.wall + seconds, self.busy_until) - self.wall)
        self.wall += seconds


@pytest.mark.parametrize("busy_until, windows", [
    (0.0, 1),  # nothing of ours runs: the minimum and one window
    (0.30, 14),  # busy until 0.30 s: the window ending at 0.31 saw it, the next one is idle
])
def test_settle_waits_until_this_process_stops_using_the_cpu(monkeypatch, busy_until, windows):
    """bench's pause before each configuration outlasts worker threads that spin after a run."""
    clock = _SimulatedClock(busy_until)
    monkeypatch.setattr(timing, "time", clock)
    waited = timing.settle(0.05, max_s=2.0, window_s=0.02)
    assert clock.sleeps == [0.05] + [0.02] * windows
    assert waited == pytest.approx(0.05 + 0.02 * windows)
    assert waited >= busy_until  # not before the spinning stopped


def test_settle_never_waits_longer_than_its_limit_and_one_window(monkeypatch):
    clock = _SimulatedClock(busy_until=100.0)  # a thread that never stops
    monkeypatch.setattr(timing, "time", clock)
    waited = timing.settle(0.05, max_s=0.3, window_s=0.02)
    assert 0.3 <= waited <= 0.3 + 0.02 + 1e-9
    assert clock.sleeps[0] == 0.05 and set(clock.sleeps[1:]) == {0.02}
