"""What a tune runs inside: Ctrl-C handling, numpy's seed, and the runner's thread count."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from typing import Optional

import numpy as np
import tvm

from relay_ext.tuning.budget import TrialBudget

logger = logging.getLogger(__name__)


class TuningInterrupted(KeyboardInterrupt):
    """A tune stopped by Ctrl-C; the work dir keeps every record measured before it."""


class InterruptGuard:
    """While tuning (main thread only): the first Ctrl-C empties the trial budget, so MetaSchedule
    finishes the batches in flight, stores their records and returns; a second one aborts at once.

    A KeyboardInterrupt raised inside MetaSchedule's Python callbacks is swallowed by TVM's FFI
    and turns into an unrelated error, so the first Ctrl-C must not raise.
    """

    def __init__(self, budget: TrialBudget):
        self.budget = budget
        self.pressed = 0
        self.on_abort: list = []  # called on the second Ctrl-C (an RPC runner's close)

    def _on_sigint(self, signum, frame):  # pylint: disable=unused-argument
        self.pressed += 1
        if self.pressed == 1:
            self.budget.stop()
            logger.warning("interrupted: finishing the candidates in flight and keeping their "
                           "records; press Ctrl-C again to stop at once")
        else:
            for abort in self.on_abort:  # end the waits of candidates in flight
                abort()
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        previous_hook = sys.unraisablehook
        sys.unraisablehook = self._quiet_second_interrupt(previous_hook)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)
            sys.unraisablehook = previous_hook

    def _quiet_second_interrupt(self, previous_hook):
        """The second Ctrl-C's KeyboardInterrupt, raised inside a Python callback TVM called
        through ctypes, is "ignored" there with a printed traceback; the tune still stops and
        says so in one line, so that traceback is not shown."""
        def hook(unraisable):
            if self.pressed > 1 and isinstance(unraisable.exc_value, KeyboardInterrupt):
                logger.debug("second Ctrl-C raised inside a TVM callback", exc_info=(
                    unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback))
                return
            previous_hook(unraisable)
        return hook


@contextlib.contextmanager
def runner_threads(target: tvm.target.Target):
    """While tuning: MetaSchedule's local runner processes run candidates on ``-num-cores``
    threads (TVM's thread pool reads ``TVM_NUM_THREADS`` when a process starts it; left alone it
    uses half the logical CPUs, one thread on a 2-CPU machine). A value the user set is kept."""
    cores = target.attrs.get("num-cores")
    if cores is None or "TVM_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["TVM_NUM_THREADS"] = str(int(cores))
    try:
        yield
    finally:
        os.environ.pop("TVM_NUM_THREADS", None)


@contextlib.contextmanager
def numpy_seeded(seed: Optional[int]):
    """Within the block numpy's global generator draws from ``seed``; afterwards it continues
    the caller's stream as if the block had not run. ``seed=None``: the stream is left alone."""
    if seed is None:
        yield
        return
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)
