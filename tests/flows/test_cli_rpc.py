"""quantfuse tune --rpc: measuring through TVM's own RPC tracker and two servers on 127.0.0.1;
clear, fast errors for a tracker that is not there or has no server for the key."""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from relay_ext import cli
from relay_ext.cli import commands as cli_commands
from relay_ext.lowering.x86.amx import request_amx_tile_data
from relay_ext.measure import rpc_tracker
from relay_ext.workdir.files import RECORD_FILE
from tvm import meta_schedule as ms
from conftest import ROOT, needs_c_compiler
from helpers import small_search, one_error_line
from rpc_servers import _free_port, _start_rpc, _stop_rpc
from rpc_servers import _signal_group

LLVM = "llvm -num-cores 1"
TINY = ["--model", "tiny_resnet", "--image-size", "16"]
KEY = "quantfuse-test"
CHILD_TUNE = """
import os, sys
sys.path.insert(0, "tests")
from helpers import small_search
from relay_ext import cli
from relay_ext.cli import commands
from relay_ext.measure import rpc_tracker
commands.search_strategy = small_search
if os.environ.get("QUANTFUSE_TEST_BLIND_WATCH"):
    # A runner that never learns its server died, and whose jobs wait an hour: only Ctrl-C ends
    # this tune, so how it ends does not depend on which comes first.
    rpc_tracker.ServerWatch.check = lambda self, now=False: None
    watched = rpc_tracker.rpc_runner
    rpc_tracker.rpc_runner = lambda address, max_workers=None: watched(
        address, max_workers=max_workers, session_timeout_s=3600)
sys.exit(cli.main(sys.argv[1:]))
"""
# A bound on waits for things that happen within seconds unless something hangs (not a timing).
HANG_GUARD_S = 600


@pytest.fixture(scope="module")
def tracker(tmp_path_factory):
    """A TVM RPC tracker and two servers registered under KEY; yields (port, server log paths)."""
    port, processes, server_logs = _start_rpc(tmp_path_factory.mktemp("rpc"), KEY, 2)
    try:
        yield port, server_logs
    finally:
        _stop_rpc(processes)


@needs_c_compiler
def test_tune_through_rpc_tracker_records_real_run_times(tracker, tmp_path, capsys, monkeypatch):
    port, server_logs = tracker
    monkeypatch.setattr(cli_commands, "search_strategy", small_search)
    work_dir = tmp_path / "work"
    assert cli.main(["tune", *TINY, "--target", LLVM, "--work-dir", str(work_dir), "--trials", "6",
                     "--seed", "0", "--rpc", f"127.0.0.1:{port}:{KEY}"]) == 0
    assert "measuring on 2 RPC server(s)" in capsys.readouterr().out
    run_times = [json.loads(line)[1][1] for line in
                 (work_dir / RECORD_FILE).read_text().splitlines()]
    assert len(run_times) == 6
    measured = [t for t in run_times if t and max(t) < 1e9]
    assert measured, run_times  # real run times, not MetaSchedule's 1e10 for a failed run
    assert all(0 < s < 1.0 for t in measured for s in t), run_times
    for log in server_logs:  # both servers ran candidates
        assert "load_module" in log.read_text(), log.read_text()[-2000:]


@needs_c_compiler
def test_rpc_key_without_servers_is_a_clear_error(tracker, tmp_path, capsys):
    port, _ = tracker
    assert cli.main(["tune", *TINY, "--target", LLVM, "--work-dir", str(tmp_path), "--trials", "4",
                     "--rpc", f"127.0.0.1:{port}:no-such-key"]) == 2
    one_error_line(capsys, "no server with key 'no-such-key'", KEY, "tvm.exec.rpc_server")


def test_quantfuses_server_holds_amx_tile_data_where_the_host_grants_it_and_tvms_cannot_say(
        tracker, tmp_path):
    """A tune whose candidates use AMX needs servers that asked the kernel for tile data
    (relay_ext.measure.rpc_server); TVM's own server is refused with what to start instead."""
    port, _ = tracker
    with pytest.raises(rpc_tracker.TrackerError, match="could not say.*relay_ext.measure.rpc_server"):
        rpc_tracker.check_servers_run_amx(rpc_tracker.RpcAddress("127.0.0.1", port, KEY))
    ours_port, processes, logs = _start_rpc(tmp_path, "amx", 1, "relay_ext.measure.rpc_server")
    try:
        address = rpc_tracker.RpcAddress("127.0.0.1", ours_port, "amx")
        if request_amx_tile_data():  # this host's OS enables AMX int8, the kernel grants it
            rpc_tracker.check_servers_run_amx(address)  # the session process holds it too
        else:
            with pytest.raises(rpc_tracker.TrackerError, match="holds no permission"):
                rpc_tracker.check_servers_run_amx(address)
    finally:
        _stop_rpc(processes)
    assert "AMX tile data" in logs[0].read_text()


@needs_c_compiler
def test_an_amx_tune_through_tvms_servers_is_refused_in_one_line(tracker, tmp_path, capsys):
    if not request_amx_tile_data():
        pytest.skip("this host cannot run AMX code, so no local target keeps AMX (the server "
                    "check itself is tested above on every host)")
    port, _ = tracker
    assert cli.main(["tune", *TINY, "--target", "host", "--work-dir", str(tmp_path), "--trials",
                     "4", "--rpc", f"127.0.0.1:{port}:{KEY}"]) == 2
    one_error_line(capsys, "--rpc", "uses AMX", "relay_ext.measure.rpc_server")
    assert not (tmp_path / RECORD_FILE).exists()


def _connection_attempts(monkeypatch) -> list:
    """Every socket connection rpc_tracker opens from now on, as (address, timeout)."""
    attempts = []
    connect = rpc_tracker.socket.create_connection

    def counted(address, timeout=None, *args, **kwargs):
        attempts.append((tuple(address), timeout))
        return connect(address, timeout, *args, **kwargs)

    monkeypatch.setattr(rpc_tracker.socket, "create_connection", counted)
    return attempts


@needs_c_compiler
def test_unreachable_tracker_is_one_bounded_attempt_and_a_clear_error(tmp_path, capsys,
                                                                      monkeypatch):
    port = _free_port()  # nothing listens there
    attempts = _connection_attempts(monkeypatch)
    assert cli.main(["tune", *TINY, "--target", LLVM, "--work-dir", str(tmp_path), "--trials", "4",
                     "--rpc", f"127.0.0.1:{port}:{KEY}"]) == 2
    # one attempt, with a timeout: TVM's own client would retry for a minute
    assert attempts == [(("127.0.0.1", port), rpc_tracker.DEFAULT_TIMEOUT_S)]
    one_error_line(capsys, "--rpc", f"cannot reach RPC tracker 127.0.0.1:{port}")
    assert not (tmp_path / RECORD_FILE).exists()


def test_silent_tracker_times_out(tmp_path, monkeypatch):
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = rpc_tracker.RpcAddress("127.0.0.1", listener.getsockname()[1], KEY)
        attempts = _connection_attempts(monkeypatch)
        with pytest.raises(rpc_tracker.TrackerError, match="did not answer within 1 s"):
            rpc_tracker.check_tracker(address, timeout_s=1)
    assert attempts == [((address.host, address.port), 1)]  # the socket's every wait is bounded


@needs_c_compiler  # quantfuse tune asks for one before it reads --rpc
@pytest.mark.parametrize("text, fragment", [
    ("127.0.0.1:9190", "is not HOST:PORT:KEY"),
    ("127.0.0.1:port:key", "port 'port' is not a number"),
    ("127.0.0.1:70000:key", "out of range"),
])
def test_malformed_rpc_address(text, fragment, tmp_path, capsys):
    assert cli.main(["tune", *TINY, "--target", LLVM, "--work-dir", str(tmp_path), "--trials", "4",
                     "--rpc", text]) == 2
    one_error_line(capsys, "--rpc", fragment)


def _records(work_dir) -> list:
    path = work_dir / RECORD_FILE
    return path.read_text().splitlines() if path.exists() else []


def _tune_until_records(tmp_path, key: str, records: int = 2, blind_watch: bool = False):
    """A tracker with one server under ``key`` and a child ``quantfuse tune`` measuring on it,
    once the work dir holds ``records`` records; (tracker port, processes, the tune, its work dir,
    its popen workers)."""
    port, processes, _ = _start_rpc(tmp_path, key, 1)
    work_dir = tmp_path / "work"
    env = dict(os.environ, **({"QUANTFUSE_TEST_BLIND_WATCH": "1"} if blind_watch else {}))
    tune = None
    try:
        tune = subprocess.Popen(
            [sys.executable, "-c", CHILD_TUNE, "tune", "--model", "mlp", "--target", LLVM,
             "--work-dir", str(work_dir), "--trials", "12", "--seed", "0",
             "--rpc", f"127.0.0.1:{port}:{key}"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + HANG_GUARD_S
        while len(_records(work_dir)) < records:
            assert tune.poll() is None, tune.communicate()
            assert time.monotonic() < deadline, f"no {records} records in {HANG_GUARD_S} s"
            time.sleep(0.2)
        import psutil  # pylint: disable=import-outside-toplevel

        workers = psutil.Process(tune.pid).children(recursive=True)
    except BaseException:
        if tune is not None:
            tune.kill()
        _stop_rpc(processes)
        raise
    return port, processes, tune, work_dir, workers


def _wait_until_waiting_for_a_server(port: int, key: str, tune: subprocess.Popen) -> None:
    """Until the tune's runner has asked the tracker for a server under ``key`` that it cannot
    have (the tracker lists the request as pending)."""
    address = rpc_tracker.RpcAddress("127.0.0.1", port, key)
    deadline = time.monotonic() + HANG_GUARD_S
    while rpc_tracker.tracker_summary(address)["queue_info"].get(key, {}).get("pending", 0) < 1:
        assert tune.poll() is None, "the tune ended before it waited on the dead server"
        assert time.monotonic() < deadline, "the tune never asked for another server"
        time.sleep(0.2)


def _check_ended_cleanly(work_dir, before: int, workers) -> None:
    """The records measured before the server died are kept, the database loads, and no popen
    worker of the tune is left."""
    import psutil  # pylint: disable=import-outside-toplevel

    lines = _records(work_dir)
    assert len(lines) >= before and all(json.loads(line) for line in lines)
    assert len(ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False)) == len(lines)
    _, alive = psutil.wait_procs(workers, timeout=HANG_GUARD_S)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [p.cmdline() for p in alive]  # no popen worker outlived the tune


@needs_c_compiler
def test_a_tune_whose_only_server_dies_stops_with_one_line_keeping_its_records(tmp_path):
    """Left alone, a tune whose only RPC server is killed mid-tune stops by itself: the tracker
    has no server left under the key, so the tune ends with one line (exit 1) naming that,
    keeping every record and leaving no process behind."""
    pytest.importorskip("psutil")
    _, processes, tune, work_dir, workers = _tune_until_records(tmp_path, "k1")
    try:
        _signal_group(processes[1], signal.SIGKILL)  # the server and its popen workers
        before = len(_records(work_dir))
        out, err = tune.communicate(timeout=HANG_GUARD_S)
    finally:
        tune.kill()
        _stop_rpc(processes)
    assert tune.returncode == 1, (out, err)
    assert "Traceback" not in err and "quantfuse: error" not in err, err
    failed = [line for line in err.splitlines() if line.startswith("quantfuse: failed:")]
    assert len(failed) == 1, err
    assert "no RPC server left under key 'k1'" in failed[0], err
    assert f"keeps {len(_records(work_dir))} records" in failed[0], err
    assert "run the same command again to resume" in failed[0], err
    _check_ended_cleanly(work_dir, before, workers)


@needs_c_compiler
def test_two_ctrl_c_end_a_tune_stuck_on_a_dead_server_keeping_its_records(tmp_path):
    """A tune waiting on a server that died and that nothing else would end (here its runner
    never learns of it and waits an hour per candidate): the first Ctrl-C is acknowledged, the
    second ends it (exit 130) with its records and no process left. Each step waits for the
    tune to show the one before (its request pending at the tracker, the first Ctrl-C's
    message), so the test does not race the tune."""
    pytest.importorskip("psutil")
    port, processes, tune, work_dir, workers = _tune_until_records(tmp_path, "k2",
                                                                   blind_watch=True)
    err_lines, acknowledged = [], threading.Event()

    def read_stderr():
        for line in tune.stderr:
            err_lines.append(line)
            if "interrupted: finishing the candidates in flight" in line:
                acknowledged.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        _signal_group(processes[1], signal.SIGKILL)  # the server and its popen workers
        before = len(_records(work_dir))
        _wait_until_waiting_for_a_server(port, "k2", tune)  # stuck: nothing else would end it
        tune.send_signal(signal.SIGINT)
        assert acknowledged.wait(HANG_GUARD_S), "".join(err_lines)
        assert tune.poll() is None, "".join(err_lines)  # still waiting on the dead server
        tune.send_signal(signal.SIGINT)
        try:
            tune.wait(timeout=HANG_GUARD_S)  # a candidate would wait an hour: Ctrl-C ended it
        except subprocess.TimeoutExpired:
            pytest.fail("two Ctrl-C did not end the tune:\n" + "".join(err_lines)[-3000:])
        reader.join(timeout=HANG_GUARD_S)
    finally:
        tune.kill()
        _stop_rpc(processes)
    err = "".join(err_lines)
    assert tune.returncode == 130, err
    assert "Traceback" not in err and "quantfuse: error" not in err, err
    assert f"keeps {len(_records(work_dir))} records" in err.splitlines()[-1], err
    _check_ended_cleanly(work_dir, before, workers)
