"""Measuring candidates on devices registered with a TVM RPC tracker.

    address = parse_rpc_address("127.0.0.1:9190:cpu")
    servers = check_tracker(address)        # TrackerError within seconds when nobody answers
    runner = rpc_runner(address, servers)   # MetaSchedule's RPCRunner, for tuning.tune(runner=...)

The tracker and servers are TVM's own::

    python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190
    python -m tvm.exec.rpc_server --tracker HOST:9190 --key cpu     # on every device

:func:`check_tracker` speaks the tracker's protocol over a socket with a timeout (TVM's own
client retries a refused connection for a minute and waits forever on a silent one), and counts
the servers registered under the key, so a wrong address or key is a clear error before any
tuning starts.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
from typing import Optional

from tvm import meta_schedule as ms
from tvm.rpc import base

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


def rpc_runner(address: RpcAddress, max_workers: Optional[int] = None,
               session_timeout_s: int = 60) -> ms.runner.RPCRunner:
    """MetaSchedule's RPCRunner measuring on the tracker's servers of ``address.key``
    (``max_workers``: candidates measured at once; the number of servers is a good value)."""
    config = ms.runner.RPCConfig(tracker_host=address.host, tracker_port=address.port,
                                 tracker_key=address.key, session_timeout_sec=session_timeout_s)
    return ms.runner.RPCRunner(rpc_config=config, max_workers=max_workers)
