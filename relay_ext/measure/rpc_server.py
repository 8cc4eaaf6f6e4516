"""``python -m relay_ext.measure.rpc_server``: TVM's RPC server, holding the kernel's permission
for AMX tile data, for ``quantfuse tune --rpc`` with an AMX target.

A candidate that uses AMX (``meta_rules.cpu.amx_conv``) dies with SIGILL in a process that did not
ask the kernel for tile data, and TVM's ``python -m tvm.exec.rpc_server`` asks for nothing. This
server is TVM's own (``tvm.rpc.Server``, the same options as ``tvm.exec.rpc_server``) with one
addition, its ``server_init_callback``: the server process asks for tile data when it starts
(where the OS enables AMX int8; elsewhere it asks nothing and serves as TVM's does), and the
process of each session, forked from it, inherits the permission. The server also answers
``quantfuse.amx_tile_data_granted()`` (a remote function, for checks and tests)::

    python -m relay_ext.measure.rpc_server --tracker TRACKER_HOST:9190 --key cpu

``--no-fork`` is not offered: TVM then starts each session in a fresh interpreter, which would
not hold the permission.
"""

from __future__ import annotations

import argparse
import logging
from typing import List, Optional

import tvm
from tvm import rpc

from relay_ext.lowering.x86.amx import request_amx_tile_data
from relay_ext.lowering.x86.amx_permission import amx_tile_data_granted

GRANTED_FUNCTION = "quantfuse.amx_tile_data_granted"


def server_init() -> None:
    """The server's init callback (runs in the server process): ask for AMX tile data, and
    register :data:`GRANTED_FUNCTION` for the sessions."""
    granted = request_amx_tile_data()
    tvm.register_func(GRANTED_FUNCTION, amx_tile_data_granted, override=True)
    # the server's own process (TVM's popen worker): its output is the server's log
    print(f"quantfuse rpc_server: AMX tile data {'granted' if granted else 'not held'} "
          f"(asked for where the OS enables AMX int8)", flush=True)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m relay_ext.measure.rpc_server",
        description="TVM's RPC server, asking the kernel for AMX tile data when it starts.")
    parser.add_argument("--host", default="0.0.0.0", help="the host IP address to listen on")
    parser.add_argument("--port", type=int, default=9090, help="the first port to try")
    parser.add_argument("--port-end", type=int, default=9199, help="the last port to try")
    parser.add_argument("--tracker", help="the tracker, HOST:PORT")
    parser.add_argument("--key", default="", help="the key the server registers under")
    parser.add_argument("--custom-addr", help="the address the tracker gives clients")
    parser.add_argument("--load-library", help="an additional library to load")
    parser.add_argument("--silent", action="store_true", help="less logging")
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    tracker = None
    if args.tracker:
        host, _, port = args.tracker.rpartition(":")
        if not host or not port.isdigit() or not args.key:
            raise SystemExit("--tracker must be HOST:PORT, and a server with a tracker needs --key")
        tracker = (host, int(port))
    server = rpc.Server(args.host, args.port, args.port_end, key=args.key, tracker_addr=tracker,
                        load_library=args.load_library, custom_addr=args.custom_addr,
                        silent=args.silent, server_init_callback=server_init)
    try:
        server.proc.join()  # serves until killed, as TVM's rpc_server does
    except KeyboardInterrupt:
        pass
    finally:
        server.terminate()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    raise SystemExit(main())
