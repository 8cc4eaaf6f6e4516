"""The RPC runner's kill of its popen workers, racing the pool thread's own kill."""

import threading

import pytest
from tvm.contrib.popen_pool import PopenWorker

from relay_ext.measure.rpc_tracker import RpcAddress, WatchedRPCRunner


class _WriterThatLetsTheOtherKillFinish:
    """Stands for the pipe of a worker whose other ``kill()`` (the pool thread's, after its
    read ended) completes while this one closes the pipe: ``_proc`` becomes None in between
    TVM's check of it and its read of ``_proc.pid``."""

    def __init__(self, worker: PopenWorker):
        self.worker, self.writer = worker, worker._writer

    def close(self) -> None:
        self.writer.close()
        self.worker.join(timeout=5.0)
        self.worker._proc = None


def _started_worker() -> PopenWorker:
    worker = PopenWorker()
    worker.send(sum, ([1, 2],))
    assert worker.recv() == 3
    assert worker._proc is not None and worker._proc.poll() is None
    return worker


def test_killing_the_workers_survives_the_pool_threads_own_kill_and_kills_every_worker():
    pytest.importorskip("psutil")
    runner = WatchedRPCRunner(RpcAddress("127.0.0.1", 9, "k"), max_workers=2)
    racing, other = _started_worker(), _started_worker()
    racing._writer = _WriterThatLetsTheOtherKillFinish(racing)
    other_process = other._proc
    runner.pool._worker_map.update({1: racing, 2: other})
    try:
        runner._kill_workers()  # raised "'NoneType' object has no attribute 'pid'" before
        assert racing._proc is None
        assert other._proc is None
        other_process.wait(timeout=5.0)  # the worker after the racing one was killed too
    finally:
        runner.close()


def test_two_threads_killing_the_workers_at_once_both_return():
    pytest.importorskip("psutil")
    runner = WatchedRPCRunner(RpcAddress("127.0.0.1", 9, "k"), max_workers=2)
    workers = [_started_worker() for _ in range(2)]
    processes = [worker._proc for worker in workers]
    runner.pool._worker_map.update(dict(enumerate(workers)))
    errors = []

    def kill() -> None:
        try:
            runner._kill_workers()
        except Exception as error:  # pylint: disable=broad-except
            errors.append(error)

    threads = [threading.Thread(target=kill) for _ in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30.0)
        assert not errors, errors
        for process in processes:
            process.wait(timeout=5.0)
    finally:
        runner.close()
