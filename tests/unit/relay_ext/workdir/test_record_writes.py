"""A write error while records are appended (relay_ext.workdir.record_writes): the tune stops with one
line and exit code 1, the database is cut back to its last complete line and loads, and every record
written before the error is kept.

The error is real: a file size limit (RLIMIT_FSIZE) just above the record file's size makes the
kernel refuse the rest of the next record line with EFBIG, inside MetaSchedule's own C++ writer,
the way a full disk refuses it with ENOSPC.
"""

import contextlib
import json
import resource
import signal

from tvm import meta_schedule as ms

from relay_ext import cli
from relay_ext.frontend import models
from relay_ext.tuning import tune
from relay_ext.cli import commands as cli_commands
from relay_ext.workdir.record_writes import RecordWriteCheck
from relay_ext.workdir.files import RECORD_FILE, SUMMARY_FILE, WORKLOAD_FILE, repair_database
from conftest import needs_c_compiler
from helpers import small_database, small_search

LLVM = "llvm -num-cores 1"
PADDED_BYTES = 1 << 20  # more than any other file a tune of mlp writes (its built .so files)


@contextlib.contextmanager
def file_size_limit(limit: int):
    """Files this process and its children write cannot grow past ``limit`` bytes (SIGXFSZ
    ignored: the write fails with EFBIG instead of killing the process)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


@needs_c_compiler
def test_a_failed_record_write_stops_the_tune_with_one_line_and_keeps_the_database_whole(
        tmp_path, capsys, monkeypatch):
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    small_database(work_dir, 1)  # records of another workload, padded to a long tune's size
    record_file = work_dir / RECORD_FILE
    line = record_file.read_text()
    with open(record_file, "a") as file:
        while file.tell() < PADDED_BYTES:
            file.write(line)
    before = record_file.read_bytes()
    kept = len(before.splitlines())

    monkeypatch.setattr(cli_commands, "search_strategy", small_search)
    with file_size_limit(len(before) + 10):  # the next record line is torn after 10 bytes
        code = cli.main(["tune", "--model", "mlp", "--target", LLVM, "--work-dir", str(work_dir),
                         "--trials", str(kept + 2), "--seed", "0"])
    err = capsys.readouterr().err
    assert code == 1, err
    failed = [line for line in err.splitlines() if line.startswith("quantfuse: failed:")]
    assert len(failed) == 1 and "Traceback" not in err, err
    # The progress line was ended first: the error starts a line of its own.
    assert any(row.startswith("quantfuse: failed:") for row in err.split("\n")), repr(err)
    assert f"could not write {RECORD_FILE} (a file size limit" in failed[0], failed[0]
    assert f"keeps its {kept} complete records and loads" in failed[0], failed[0]
    assert record_file.read_bytes() == before  # the torn line is gone, nothing else
    assert repair_database(work_dir)["broken_records"] == 0
    assert len(ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False)) == kept
    # The summary counts what the files hold, not the record that did not reach them.
    assert json.loads((work_dir / SUMMARY_FILE).read_text())["records"] == kept


def test_the_check_cuts_a_torn_workload_line_and_every_record_after_the_failure(tmp_path):
    """Unit level: a workload line lost while later lines were written (space freed in between)
    would shift every later workload index; the cut drops everything after the failure."""
    workloads, records = tmp_path / WORKLOAD_FILE, tmp_path / RECORD_FILE
    workloads.write_text('["1", "AAAA"]\n')
    records.write_text('[0, [[], [0.001], {}, []]]\n')

    class Database:  # what the check reads of MetaSchedule's database: its record count
        count = 1

        def __len__(self):
            return self.count

    database, stopped = Database(), []
    check = RecordWriteCheck(tmp_path, database, stop=lambda: stopped.append(True))
    with open(records, "a") as file:
        file.write('[0, [[], [0.002], {}, []]]\n')
    database.count = 2
    check.check()
    assert check.failure is None and not stopped

    with open(workloads, "a") as file:
        file.write('["2", "BB')  # torn
    with open(workloads, "a") as file:
        file.write('["3", "CCCC"]\n')  # a later workload that got through
    with open(records, "a") as file:
        file.write('[2, [[], [0.003], {}, []]]\n')
    database.count = 3
    check.check()
    assert stopped == [True] and WORKLOAD_FILE in check.failure
    error = check.finish()
    assert "keeps its 2 complete records" in str(error)
    assert workloads.read_text() == '["1", "AAAA"]\n'
    assert records.read_text().splitlines() == ['[0, [[], [0.001], {}, []]]',
                                                '[0, [[], [0.002], {}, []]]']


@needs_c_compiler
def test_tune_from_python_repairs_a_torn_database_before_loading_it(tmp_path):
    # A tune killed mid-write leaves a torn last line; TVM's loader alone would reject the file.
    small_database(tmp_path, 2)
    with open(tmp_path / RECORD_FILE, "a") as file:
        file.write('[0, [[["GetBlock", [], {"name"')
    loaded = models.load("mlp")
    database = tune(loaded.mod, loaded.params, LLVM, tmp_path, max_trials=1, seed=0,
                    strategy=small_search())
    assert len(database) == 3  # the two whole records and the new one
    assert repair_database(tmp_path)["broken_records"] == 0
