"""One tune per work dir (relay_ext.workdir.files.tuning_lock): a second tune is refused with one
line naming the process that holds the lock, the first ends with its database whole; a killed
holder leaves nothing locked; bench and compile read a snapshot while a tune writes."""

import json
import logging
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tvm import meta_schedule as ms

from relay_ext import cli
from relay_ext.workdir.files import (
    LOCK_FILE,
    RECORD_FILE,
    WORKLOAD_FILE,
    lock_holder,
    open_tuned_database,
    repair_database,
    tuning_lock,
)
from conftest import ROOT, needs_c_compiler
from helpers import one_error_line, small_database

LLVM = "llvm -num-cores 1"
TINY = ["--model", "tiny_resnet", "--image-size", "16"]


def _child(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_holder(work_dir: Path, child: subprocess.Popen, timeout_s: float = 300) -> str:
    deadline = time.monotonic() + timeout_s
    while (holder := lock_holder(work_dir)) is None:
        assert child.poll() is None, f"the child ended before it locked: {child.communicate()}"
        assert time.monotonic() < deadline, "the child never took the lock"
        time.sleep(0.1)
    return holder


@needs_c_compiler
def test_a_second_tune_is_refused_while_the_first_finishes_with_its_database_whole(tmp_path,
                                                                                    capsys):
    work_dir = tmp_path / "work"
    args = ["tune", "--model", "mlp", "--target", LLVM, "--work-dir", str(work_dir), "--seed", "0"]
    first = _child("""
        import sys
        sys.path.insert(0, "tests")
        from helpers import small_search
        from relay_ext import cli
        from relay_ext.cli import commands
        commands.search_strategy = small_search
        sys.exit(cli.main(sys.argv[1:]))
    """, *args, "--trials", "2")
    try:
        holder = _wait_for_holder(work_dir, first)
        assert f"process {first.pid} (" in holder and "tune" in holder, holder
        assert cli.main([*args, "--trials", "4"]) == 2
        one_error_line(capsys, f"work dir {str(work_dir)!r} is in use", f"process {first.pid}",
                       "pick another --work-dir")
        out, err = first.communicate(timeout=600)
    finally:
        first.kill()
    assert first.returncode == 0, err[-3000:]
    assert "2 records in" in out, out
    assert repair_database(work_dir) == {"workloads": repair_database(work_dir)["workloads"],
                                         "records": 2, "broken_workloads": 0, "broken_records": 0}
    assert len(ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False)) == 2
    assert lock_holder(work_dir) is None  # released when the first tune ended


@needs_c_compiler
def test_readers_take_a_snapshot_while_a_tune_holds_the_lock_and_a_killed_holder_frees_it(
        tmp_path, capsys, caplog):
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    small_database(work_dir, 3)
    record_file = work_dir / RECORD_FILE
    lines = record_file.read_text().splitlines()
    with open(record_file, "a") as file:  # a record being appended right now
        file.write(lines[-1][: len(lines[-1]) // 2])
    appending = record_file.read_bytes()

    holder = _child("""
        import sys, time
        from relay_ext.workdir.files import tuning_lock
        with tuning_lock(sys.argv[1]):
            print("held", flush=True)
            time.sleep(600)
    """, str(work_dir))
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        assert f"process {holder.pid} (" in lock_holder(work_dir)

        # bench / compile: the complete records, the files left as the tune writes them
        with caplog.at_level(logging.WARNING):
            assert len(open_tuned_database(work_dir)) == 3
        assert "is being tuned" in caplog.text and f"process {holder.pid}" in caplog.text
        assert record_file.read_bytes() == appending
        assert not list(work_dir.glob("*.broken-*"))

        # a second tune: refused before it touches anything
        assert cli.main(["tune", *TINY, "--target", LLVM, "--work-dir", str(work_dir),
                         "--trials", "8"]) == 2
        one_error_line(capsys, "is in use", f"process {holder.pid}")
        assert record_file.read_bytes() == appending
    finally:
        holder.send_signal(signal.SIGKILL)  # a tune killed: the kernel drops its lock
        holder.wait(timeout=30)
    assert lock_holder(work_dir) is None
    assert json.loads((work_dir / LOCK_FILE).read_text())["pid"] == holder.pid  # stale note only
    assert len(open_tuned_database(work_dir)) == 3  # no tune now: repaired in place
    assert len(list(work_dir.glob(RECORD_FILE + ".broken-*"))) == 1
    with tuning_lock(work_dir), tuning_lock(work_dir):  # free, and re-entrant in one thread
        assert lock_holder(work_dir) is None  # this thread's own lock is not "another process"
    assert (work_dir / WORKLOAD_FILE).exists()
