"""An exported model run on a server of a TVM RPC tracker, as TVM users run on remote boards.

    model = load_remote("model.so", "127.0.0.1:9190:cpu")   # uploads model.so to a server
    (out,) = model(x)                                       # runs there; the output comes back

The library is checked against its model.json here, uploaded into the server's temporary
directory, loaded and run there on the server's CPU; inputs go up and outputs come back through
the session. Like :mod:`.runtime` this needs TVM's runtime alone (``tvm.rpc`` is part of it): no
Relay, no PyTorch. A tracker that does not answer, or has no server for the key, is a
DeployError within seconds (TVM's own client would retry for a minute, or wait forever for a
server that is not there).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Tuple

import tvm.rpc

from relay_ext.deploy.runtime import DeployError, DeployedModel, PathLike, graph_executor_of, read_manifest

CONNECT_TIMEOUT_S = 5.0
SESSION_TIMEOUT_S = 600  # the server ends a session (and frees itself) after this long


def parse_address(text: str) -> Tuple[str, int, str]:
    """``HOST:PORT:KEY`` -> (host, port, key); DeployError naming what is wrong."""
    parts = [part.strip() for part in text.rsplit(":", 2)]
    if len(parts) != 3 or not all(parts):
        raise DeployError(f"--rpc {text!r} is not HOST:PORT:KEY (e.g. 127.0.0.1:9190:cpu)")
    host, port_text, key = parts
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise DeployError(f"--rpc {text!r}: port {port_text!r} is not a number in 1-65535")
    return host.strip("[]"), int(port_text), key


def connect(address: str) -> tvm.rpc.RPCSession:
    """A session on a server registered under the key with the tracker at ``address``."""
    host, port, key = parse_address(address)
    where = f"RPC tracker {host}:{port}"
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as error:
        raise DeployError(f"cannot reach {where}: {error.strerror or error}; start one with "
                          "'python -m tvm.exec.rpc_tracker' or fix --rpc") from None
    try:
        tracker = tvm.rpc.connect_tracker(host, port)
        servers = [info for info in tracker.summary().get("server_info", [])
                   if str(info.get("key", "")).split(":", 1)[-1] == key]
    except (RuntimeError, OSError, ValueError) as error:
        raise DeployError(f"{where} did not answer as a TVM RPC tracker ({error})") from None
    if not servers:
        raise DeployError(f"{where} has no server with key {key!r}; start one with 'python -m "
                          f"tvm.exec.rpc_server --tracker {host}:{port} --key {key}'")
    return tracker.request(key, priority=1, session_timeout=SESSION_TIMEOUT_S)


def load_remote(path: PathLike, address: str) -> DeployedModel:
    """:func:`relay_ext.deploy.runtime.load`, on a server of the tracker at ``address``
    (``HOST:PORT:KEY``): the library is uploaded and loaded there; calling the model sends the
    inputs and brings the outputs back."""
    library = Path(path)
    manifest = read_manifest(library)
    session = connect(address)
    session.upload(str(library))
    try:
        module = session.load_module(library.name)
    except tvm.TVMError as error:
        raise DeployError(f"the RPC server could not load {library.name} "
                          f"({str(error).strip().splitlines()[-1][:200]})") from None
    device = session.cpu(0)
    executor = graph_executor_of(module, library, device)
    return DeployedModel(library, manifest, executor, device, remote=session)
