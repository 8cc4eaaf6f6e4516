"""Measuring candidates on devices registered with a TVM RPC tracker.

    address = parse_rpc_address("127.0.0.1:9190:cpu")
    servers = check_tracker(address)        # TrackerError within seconds when nobody answers
    runner = rpc_runner(address, servers)   # a MetaSchedule runner, for tuning.tune(runner=...)
    runner.close()                          # after the tune: no popen worker outlives it

The tracker and servers are TVM's own::

    python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190
    python -m tvm.exec.rpc_server --tracker HOST:9190 --key cpu     # on every device

:func:`check_tracker` speaks the tracker's protocol over a socket with a timeout (TVM's own
client retries a refused connection for a minute and waits forever on a silent one), and counts
the servers registered under the key, so a wrong address or key is a clear error before any
tuning starts.

**Servers that die.** MetaSchedule's own RPCRunner waits forever on a candidate whose popen
worker is stuck asking the tracker for a server that will never come (its pool has no timeout):
a tune whose only server dies would hang, and its popen workers outlive it.
:class:`WatchedRPCRunner` measures with TVM's own per-candidate function in a pool whose jobs time
out (``session_timeout_s``), and while it waits on a candidate it asks the tracker every
``poll_s`` seconds whether a server is left under the key: a candidate on a server that died is
recorded as a failed run and the others go on on the servers left; when none is left twice in a
row, every waiting candidate ends as a failed run, the tune is told to stop (``stop_tune_with``),
its stuck popen workers are killed, and :func:`relay_ext.tuning.tune` raises
:class:`MeasuringStopped` after keeping every record. :meth:`WatchedRPCRunner.close` kills the
pool's workers (the CLI calls it on every exit, Ctrl-C included).
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import struct
import threading
import time
from typing import Callable, List, Optional

import tvm
from tvm import meta_schedule as ms
from tvm.contrib.popen_pool import PopenPoolExecutor, kill_child_processes
from tvm.meta_schedule.runner.rpc_runner import _worker_func as measure_on_rpc_server
from tvm.meta_schedule.utils import derived_object
from tvm.rpc import base

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 5.0


class TrackerError(RuntimeError):
    """The tracker cannot be reached, is not a TVM tracker, or has no server for the key."""


@dataclasses.dataclass(frozen=True)
class RpcAddress:
    host: str
    port: int
    key: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port}:{self.key}"


def parse_rpc_address(text: str) -> RpcAddress:
    """``HOST:PORT:KEY`` -> :class:`RpcAddress` (ValueError naming the part that is wrong)."""
    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise ValueError(f"{text!r} is not HOST:PORT:KEY (e.g. 127.0.0.1:9190:cpu)")
    host, port_text, key = (p.strip() for p in parts)
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{text!r}: port {port_text!r} is not a number (HOST:PORT:KEY)") from None
    if not 0 < port < 65536:
        raise ValueError(f"{text!r}: port {port} is out of range 1-65535")
    return RpcAddress(host.strip("[]"), port, key)


def tracker_summary(address: RpcAddress, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict:
    """The tracker's summary (``server_info``, ``queue_info``), every step bounded by ``timeout_s``."""
    where = f"RPC tracker {address.host}:{address.port}"
    try:
        with socket.create_connection((address.host, address.port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            magic = struct.unpack("<i", base.recvall(sock, 4))[0]
            if magic != base.RPC_TRACKER_MAGIC:
                raise TrackerError(f"{where} answered, but it is not a TVM RPC tracker")
            base.sendjson(sock, [base.TrackerCode.SUMMARY])
            reply = base.recvjson(sock)
    except socket.timeout:
        raise TrackerError(f"{where} did not answer within {timeout_s:g} s") from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise TrackerError(f"cannot reach {where}: {reason}") from None
    except (RuntimeError, struct.error, ValueError) as error:  # recvall/recvjson on a closed socket
        if isinstance(error, TrackerError):
            raise
        raise TrackerError(f"{where} closed the connection: is it a TVM RPC tracker?") from None
    if not isinstance(reply, list) or len(reply) != 2 or reply[0] != base.TrackerCode.SUCCESS:
        raise TrackerError(f"{where} gave an unexpected summary: {reply!r}")
    return reply[1]


def servers_for_key(summary: dict, key: str) -> int:
    """Servers registered with the tracker under ``key`` (its ``server_info``: ``server:KEY``)."""
    return sum(1 for info in summary.get("server_info", [])
               if str(info.get("key", "")).split(":", 1)[-1] == key)


def check_tracker(address: RpcAddress, timeout_s: float = DEFAULT_TIMEOUT_S) -> int:
    """The number of servers registered under the key; TrackerError when it is none."""
    summary = tracker_summary(address, timeout_s)
    count = servers_for_key(summary, address.key)
    if count == 0:
        keys = sorted({str(i.get("key", "")).split(":", 1)[-1] for i in summary.get("server_info", [])})
        raise TrackerError(
            f"RPC tracker {address.host}:{address.port} has no server with key {address.key!r} "
            f"(keys registered: {', '.join(keys) if keys else 'none'}); start one with "
            f"'python -m tvm.exec.rpc_server --tracker {address.host}:{address.port} "
            f"--key {address.key}'")
    return count


def check_servers_run_amx(address: RpcAddress, session_timeout_s: int = 30) -> None:
    """For a tune whose candidates use AMX: one session on a server of the key must hold the
    kernel's permission for AMX tile data (``relay_ext.measure.rpc_server`` asks for it, TVM's
    ``tvm.exec.rpc_server`` does not, and AMX code dies with SIGILL there); TrackerError saying
    what to start otherwise."""
    from tvm import rpc  # pylint: disable=import-outside-toplevel

    from meta_rules.base.tvm_errors import tvm_error_message  # pylint: disable=C0415
    from relay_ext.measure.rpc_server import GRANTED_FUNCTION  # pylint: disable=import-outside-toplevel

    start = (f"start the servers with 'python -m relay_ext.measure.rpc_server --tracker "
             f"{address.host}:{address.port} --key {address.key}' on hosts whose OS enables "
             f"AMX, or tune for a target without AMX")
    try:
        session = rpc.connect_tracker(address.host, address.port).request(
            address.key, session_timeout=session_timeout_s, max_retry=3)
        granted = bool(session.get_function(GRANTED_FUNCTION)())
    except (tvm.TVMError, RuntimeError, OSError, AttributeError) as error:
        raise TrackerError(f"the target uses AMX, and a server with key {address.key!r} could not "
                           f"say whether it may run AMX code ({tvm_error_message(error, 120)}): "
                           f"{start}") from None
    finally:
        session = None  # the session ends here, freeing its server for the tune
    if not granted:
        raise TrackerError(f"the target uses AMX, and a server with key {address.key!r} holds no "
                           f"permission for AMX tile data: {start}")


class MeasuringStopped(RuntimeError):
    """A tune stopped because no device is left to measure on; its records are kept."""


def rpc_runner(address: RpcAddress, max_workers: Optional[int] = None,
               session_timeout_s: int = 60) -> "WatchedRPCRunner":
    """A runner measuring on the tracker's servers of ``address.key`` (``max_workers``:
    candidates measured at once; the number of servers is a good value) that survives servers
    that die (:class:`WatchedRPCRunner`)."""
    return WatchedRPCRunner(address, max_workers=max_workers, session_timeout_s=session_timeout_s)


class ServerWatch:
    """Whether the tracker still has a server under the key, asked at most every ``poll_s``
    seconds; ``gone`` (the reason) once two answers in a row said none (or the tracker is gone)."""

    def __init__(self, address: RpcAddress, poll_s: float):
        self.address = address
        self.poll_s = poll_s
        self.gone: Optional[str] = None
        self.on_gone: List[Callable[[], None]] = []
        self._misses = 0
        self._last = 0.0
        self._lock = threading.Lock()

    def check(self, now: bool = False) -> Optional[str]:
        """``gone``, asking the tracker first when ``poll_s`` has passed (or ``now``)."""
        with self._lock:
            if self.gone is not None or (not now and time.monotonic() - self._last < self.poll_s):
                return self.gone
            self._last = time.monotonic()
            try:
                check_tracker(self.address, timeout_s=min(DEFAULT_TIMEOUT_S, self.poll_s))
                self._misses = 0
                return None
            except TrackerError as error:
                self._misses += 1
                if self._misses < 2:
                    return None
                self.gone = (f"no RPC server left under key {self.address.key!r} at tracker "
                             f"{self.address.host}:{self.address.port}")
                logger.debug("%s", error)
        logger.info("%s; stopping the tune", self.gone)  # the error the tune raises says it
        for callback in self.on_gone:
            callback()
        return self.gone

    def confirm(self) -> Optional[str]:
        """After a candidate failed (its server may have died): ask the tracker now, and once
        more a second later when it had no server, so a tune whose last server died stops after
        this batch, not two batches later."""
        if self.check(now=True) is None and self._misses:
            time.sleep(1.0)
            self.check(now=True)
        return self.gone


def _kill_worker(worker) -> None:
    """One popen worker's processes, then the worker itself (see WatchedRPCRunner._kill_workers)."""
    process = getattr(worker, "_proc", None)
    if process is not None:
        try:
            kill_child_processes(process.pid)
        except (ImportError, OSError):  # psutil missing: its own process still goes
            pass
        try:
            process.kill()
        except OSError:
            pass
    try:
        worker.kill()
    except (OSError, ImportError, AttributeError):  # AttributeError: the pool thread's own
        pass  # kill() set _proc to None meanwhile


@derived_object
class WatchedRPCFuture(ms.runner.PyRunnerFuture):
    """One candidate measured on an RPC server: its result, or a failed run when its job timed out,
    failed, or no server is left (never a wait without end)."""

    def __init__(self, future, watch: ServerWatch, timeout_s: float):
        super().__init__()
        self.future = future
        self.watch = watch
        self.timeout_s = timeout_s

    def done(self) -> bool:
        return self.future.done() or self.watch.gone is not None

    def result(self) -> ms.runner.RunnerResult:
        while not self.future.done():
            if self.watch.check() is not None:
                self.future.cancel()
                return ms.runner.RunnerResult(None, error_msg=f"RPCRunner: {self.watch.gone}")
            try:
                self.future.result(timeout=self.watch.poll_s)
            except Exception:  # pylint: disable=broad-except
                pass  # a wait that timed out, or the job's own error: read below
        try:
            return ms.runner.RunnerResult(self.future.result(), None)
        except TimeoutError:
            return ms.runner.RunnerResult(
                None, error_msg=f"RPCRunner: Timeout, killed after {self.timeout_s} seconds")
        except Exception as error:  # pylint: disable=broad-except
            self.watch.confirm()  # a server that died fails its candidate at once
            return ms.runner.RunnerResult(None, error_msg=f"RPCRunner: {error}")


@derived_object
class WatchedRPCRunner(ms.runner.PyRunner):
    """MetaSchedule's RPC measurement (TVM's own per-candidate function) with bounded waits; see
    the module docstring."""

    def __init__(self, address: RpcAddress, max_workers: Optional[int] = None,
                 session_timeout_s: int = 60, poll_s: float = 5.0):
        super().__init__()
        self.address = address
        self.rpc_config = ms.runner.RPCConfig._normalized(ms.runner.RPCConfig(  # pylint: disable=protected-access
            tracker_host=address.host, tracker_port=address.port, tracker_key=address.key,
            session_timeout_sec=session_timeout_s))
        self.evaluator_config = ms.runner.EvaluatorConfig._normalized(None)  # pylint: disable=protected-access
        self.timeout_s = session_timeout_s
        self.pool = PopenPoolExecutor(max_workers=max(1, int(max_workers or 1)),
                                      timeout=session_timeout_s)
        self.watch = ServerWatch(address, poll_s)
        self.closed = False
        self._kill_lock = threading.Lock()
        self.watch.on_gone.append(self._kill_workers)  # stuck asking the tracker: end them

    def run(self, runner_inputs):
        futures = []
        for runner_input in runner_inputs:
            args = (None, None, None, None, None, self.rpc_config, self.evaluator_config, 1,
                    str(runner_input.artifact_path), str(runner_input.device_type),
                    tuple(arg_info.as_json() for arg_info in runner_input.args_info))
            future = self.pool._threadpool.submit(self._measure, args)  # pylint: disable=protected-access
            futures.append(WatchedRPCFuture(future, self.watch, self.timeout_s))
        return futures

    def _measure(self, args):
        """In a pool thread: TVM's RPC measurement in a popen worker (timed out by the pool), or
        a failure at once when no server is left (no new worker started to wait on the tracker)."""
        if self.closed:
            raise RuntimeError("the runner was closed")
        if self.watch.gone is not None:
            raise RuntimeError(self.watch.gone)
        return self.pool._worker_run(measure_on_rpc_server, args, {})  # pylint: disable=protected-access

    def stop_tune_with(self, stop: Callable[[], None]) -> None:
        """``stop()`` is called when no server is left (tune() passes its budget's)."""
        self.watch.on_gone.append(stop)

    def lost(self) -> Optional[str]:
        """Why measuring stopped (no server left), or None."""
        return self.watch.gone

    def _kill_workers(self) -> None:
        """Kill the pool's popen workers, each one's processes first: a pool thread blocked
        reading a worker's answer (a candidate stuck asking the tracker for a server) holds the
        pipe that ``PopenWorker.kill`` closes, and closing it waits for that read, which ends
        only when the process is gone.

        Called from the watch thread (no server left) and from :meth:`close`, one at a time.
        The pool thread whose read ends with the process also calls ``PopenWorker.kill``, which
        is not thread-safe: it checks ``_proc`` and then reads ``_proc.pid``, and the other
        call may have set it to None in between (AttributeError). Either call finishing the
        kill is enough, so that error is not one."""
        with self._kill_lock:
            with self.pool._lock:  # pylint: disable=protected-access
                workers = list(self.pool._worker_map.values())  # pylint: disable=protected-access
            for worker in workers:
                _kill_worker(worker)

    def close(self) -> None:
        """Kill the pool's popen workers and end its threads (no process outlives the tune)."""
        self.closed = True  # a job a pool thread takes from now on fails without a worker
        self.pool._threadpool.shutdown(wait=False, cancel_futures=True)  # pylint: disable=protected-access
        self._kill_workers()
