"""The timing toolkit every CPU measurement of quantfuse shares: bench's interleaved rounds
(:mod:`relay_ext.latency.run`), the per-task schedule choice's timing
(:mod:`relay_ext.schedules.task_choice`) and the benchmarks.

* :class:`Timing` -- seconds per round, with their median and spread;
* :class:`TVMThread`, :func:`with_tvm_threads` -- TVM work on a thread whose pool really has the
  threads asked for;
* :func:`tvm_timer`, :func:`evaluator_timer` -- one warm-up run, then a function that times one
  round (PyTorch's: :func:`relay_ext.peers.pytorch.torch_timer`);
* :func:`settle`, :func:`interleaved_rounds` -- rounds that time every configuration once, after
  a pause that lets the previous runtime's spinning threads go idle;
* :func:`load_average` -- whether other processes compete for the CPU.

The measurements behind its choices are in docs/BENCHMARKS.md ("How bench times").
"""

from __future__ import annotations

import dataclasses
import os
import queue
import statistics
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple, TypeVar

import numpy as np
import tvm

from relay_ext.measure.run import graph_module

@dataclasses.dataclass
class Timing:
    """Seconds per run, one value per round (each the mean of ``number`` runs)."""

    seconds: List[float]

    @property
    def median_ms(self) -> float:
        return 1e3 * statistics.median(self.seconds)

    @property
    def spread_ms(self) -> float:
        """max - min over rounds, in ms."""
        return 1e3 * (max(self.seconds) - min(self.seconds))


T = TypeVar("T")


class TVMThread:
    """A thread whose TVM CPU thread pool really has ``threads`` workers, to run TVM work on.

    TVM 0.19 sizes a thread's pool once, when that thread first runs parallel code, from
    ``TVM_NUM_THREADS`` (else half the logical CPUs: one thread on a 2-CPU machine), and reads
    the variable again before every parallel launch; ``runtime.config_threadpool(0, n)`` cannot
    widen a pool beyond its size. So TVM work goes to this thread, whose pool is created with
    the variable set, and the variable stays set while the thread lives. Everything else stays
    on the caller's thread (PyTorch runs slower from a second Python thread).

        with TVMThread(2) as tvm_thread:
            output, timer = tvm_thread.tvm_timer(lib, inputs, 10)
            seconds = timer()
    """

    def __init__(self, threads: int):
        self.threads = int(threads)
        self._jobs: "queue.Queue" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._previous: Optional[str] = None

    def __enter__(self) -> "TVMThread":
        self._previous = os.environ.get("TVM_NUM_THREADS")
        os.environ["TVM_NUM_THREADS"] = str(self.threads)
        self._thread = threading.Thread(target=self._serve, name=f"tvm-{self.threads}-threads",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._jobs.put(None)
        self._thread.join()
        if self._previous is None:
            os.environ.pop("TVM_NUM_THREADS", None)
        else:
            os.environ["TVM_NUM_THREADS"] = self._previous

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            work, answer = job
            try:
                answer.put((True, work()))
            except BaseException as error:  # pylint: disable=broad-except - re-raised in run()
                answer.put((False, error))

    def run(self, work: Callable[[], T]) -> T:
        """``work()`` on the TVM thread; its result, or its exception raised here."""
        answer: "queue.Queue" = queue.Queue(maxsize=1)
        self._jobs.put((work, answer))
        ok, value = answer.get()
        if not ok:
            raise value
        return value

    def timer(self, one_round: Callable[[], float]) -> Callable[[], float]:
        """A timer that times ``one_round`` on the TVM thread (the hop is outside the timing)."""
        return lambda: self.run(one_round)

    def tvm_timer(self, lib, inputs: Dict[str, np.ndarray],
                  number: int) -> Tuple[np.ndarray, Callable[[], float]]:
        """:func:`tvm_timer` made and timed on the TVM thread: ``lib``'s first output and a
        timer of one round (the mean seconds of ``number`` runs)."""
        output, one_round = self.run(lambda: tvm_timer(lib, inputs, number))
        return output, self.timer(one_round)


def with_tvm_threads(threads: int, work: Callable[[], T]) -> T:
    """``work()`` run where TVM's CPU thread pool really has ``threads`` workers (a
    :class:`TVMThread`); its result."""
    with TVMThread(threads) as tvm_thread:
        return tvm_thread.run(work)


def cpu_ticks() -> Optional[Tuple[int, int]]:
    """(busy, stolen) clock ticks of the whole machine so far, from the ``cpu`` line of
    /proc/stat: busy is user + nice + system + irq + softirq + steal, stolen is steal (time a
    hypervisor gave another guest while this VM had work). None where the OS does not tell."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    return user + nice + system + irq + softirq + steal, steal


def stolen_share(before: Optional[Tuple[int, int]],
                 after: Optional[Tuple[int, int]]) -> Optional[float]:
    """The share of this machine's busy time between two :func:`cpu_ticks` that the hypervisor
    stole; None when unknown or nothing ran."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


def load_average() -> Optional[float]:
    """The 1-minute load average (runnable processes), None where the OS does not tell."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def tvm_timer(lib, inputs: Dict[str, np.ndarray], number: int,
              min_repeat_ms: int = 0) -> Tuple[np.ndarray, Callable[[], float]]:
    """Load ``lib`` on the CPU, run it once (warm-up) and return its first output with a
    function that times one round: the mean seconds of ``number`` runs (``time_evaluator``'s
    ``min_repeat_ms``: more runs until a round lasts that long)."""
    device = tvm.cpu()
    module = graph_module(lib, inputs, device)
    module.run()
    output = module.get_output(0).numpy()
    # time_evaluator makes one untimed call before the timed ones, on every call (ROUND_WARM_UP).
    evaluator = module.module.time_evaluator("run", device, number=number, repeat=1,
                                             min_repeat_ms=min_repeat_ms)
    return output, lambda: float(evaluator().results[0])


# ROUND_WARM_UP: every timer's round starts with one untimed run. After the pause below, the first
# run of a runtime is slow (its worker threads, and on a VM the vCPUs, must wake up); TVM's
# time_evaluator already makes an untimed call first. A run untimed for each, the same for all.
#
# A pause before each configuration of a round: TVM's and PyTorch's worker threads spin for a
# while after a run before they sleep, and the runtime timed next would share the cores with them.
# How long they spin depends on the machine (TVM's pool workers call sched_yield
# TVM_THREAD_POOL_SPIN_COUNT times before they sleep). So the pause lasts at least SETTLE_S and
# then until this process's threads stop using the CPU (at most SETTLE_MAX_S).
SETTLE_S = 0.05
SETTLE_MAX_S = 2.0
_SETTLE_WINDOW_S = 0.02
_SETTLE_BUSY_FRACTION = 0.1  # of one CPU: above it, some thread of ours still spins


def settle(min_s: float = SETTLE_S, max_s: float = SETTLE_MAX_S,
           window_s: float = _SETTLE_WINDOW_S) -> float:
    """Sleep ``min_s``, then in ``window_s`` steps until this process's threads used less than a
    tenth of one CPU over the last step, for at most ``max_s`` in all; the seconds slept.

    The CPU time is the process's own (``time.process_time``: every thread of it, TVM's, PyTorch's
    and ONNX Runtime's pools included), so other processes' load does not prolong the wait."""
    start = time.perf_counter()
    time.sleep(min_s)
    while time.perf_counter() - start < max_s:
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(window_s)
        if time.process_time() - cpu < _SETTLE_BUSY_FRACTION * (time.perf_counter() - wall):
            break
    return time.perf_counter() - start


def interleaved_rounds(timers: Dict[str, Callable[[], float]], repeats: int,
                       settle_s: Optional[float] = SETTLE_S) -> Dict[str, List[float]]:
    """``repeats`` rounds, each calling every timer once in order after a pause of at least
    ``settle_s`` that also waits for this process's spinning worker threads to go idle
    (:func:`settle`): a change of load during the measurement hits every configuration alike, and
    no runtime's spinning threads are left running into the next one's time. Seconds per round,
    per timer. ``settle_s=None``: no pause (timers of one runtime on one thread, such as the
    per-task choice's record and default builds of a task)."""
    samples: Dict[str, List[float]] = {label: [] for label in timers}
    for _ in range(repeats):
        for label, one_round in timers.items():
            if settle_s is not None:
                settle(settle_s)
            samples[label].append(one_round())
    return samples
