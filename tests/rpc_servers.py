"""A TVM RPC tracker and servers on 127.0.0.1 for the tests that measure through them."""

import os
import signal
import socket
import subprocess
import sys
import time

from relay_ext.measure import rpc_tracker


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_rpc(logs, key: str, servers: int, server_module: str = "tvm.exec.rpc_server"):
    """A TVM RPC tracker and ``servers`` servers under ``key`` (``server_module``: TVM's, or
    quantfuse's that asks for AMX tile data), each process in its own group; returns (tracker
    port, processes: the tracker first, server log paths)."""
    port = _free_port()
    processes = [subprocess.Popen(
        [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
         "--port-end", str(port + 1)],
        stdout=open(logs / "tracker.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)]
    server_logs = []
    try:
        for i in range(servers):
            server_port = _free_port()
            server_logs.append(logs / f"server{i}.log")
            processes.append(subprocess.Popen(
                [sys.executable, "-m", server_module, "--tracker", f"127.0.0.1:{port}",
                 "--key", key, "--host", "127.0.0.1", "--port", str(server_port),
                 "--port-end", str(server_port + 1)],
                stdout=open(server_logs[-1], "w"), stderr=subprocess.STDOUT,
                start_new_session=True))  # its own group: its popen workers go with it
        address = rpc_tracker.RpcAddress("127.0.0.1", port, key)
        deadline = time.monotonic() + 120
        while True:
            try:
                if rpc_tracker.check_tracker(address, timeout_s=2) == servers:
                    break
            except rpc_tracker.TrackerError:
                pass
            assert time.monotonic() < deadline, "the RPC tracker and servers did not come up"
            time.sleep(0.5)
    except BaseException:
        _stop_rpc(processes)
        raise
    return port, processes, server_logs


def _stop_rpc(processes) -> None:
    # Each server starts TVM popen workers of its own; terminating the server alone left three
    # of them (250 MB each) running after every test session, so the whole group goes.
    for process in processes:
        _signal_group(process, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        _signal_group(process, signal.SIGKILL)


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)  # start_new_session: the group is the process's own pid
    except ProcessLookupError:
        pass  # the group is gone already
