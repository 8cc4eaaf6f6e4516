"""Write errors while a tune appends records: found after every batch, the database kept whole.

    check = RecordWriteCheck(work_dir, database, stop=budget.stop)
    ms.tune_tasks(..., measure_callbacks=[*defaults, check])   # checks the files after each batch
    error = check.finish()  # cuts the files back to the last good line; the error, if any

MetaSchedule's JSONDatabase appends each workload and record with a C++ ``std::ofstream`` and never
checks the write (TVM 0.19, ``src/meta_schedule/database/json_database.cc``,
``JSONFileAppendLine``): a full disk, a file size limit or an I/O error leaves a torn line, or
none, and the tune goes on. A torn line followed by later good ones would make the database
unloadable, and a workload line lost while the process keeps counting workloads would make
later records point at the wrong workload.

:class:`RecordWriteCheck` runs after MetaSchedule's own callbacks: it reads only the bytes
appended since its last look and checks they are complete lines, one record line per record
committed. On the first mismatch it notes the failure and ``stop()``\\ s the tune; from then on
nothing new is trusted, and :meth:`finish` truncates both files to the end of the last line known
good (truncating needs no free space), so the database loads with every record written before
the failure, and raises :class:`DatabaseWriteError` (one line for the CLI, exit code 1).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Callable, List, Optional, Tuple

from tvm import meta_schedule as ms
from tvm.meta_schedule.utils import derived_object

from relay_ext.workdir.files import RECORD_FILE, WORKLOAD_FILE

logger = logging.getLogger(__name__)


class DatabaseWriteError(OSError):
    """Records could not be appended to the work dir's database (disk full, a file size limit,
    an I/O error); the database was cut back to its last complete line and loads."""


class _AppendedFile:
    """One append-only database file: the offset up to which its lines are known good."""

    def __init__(self, path: Path):
        self.path = path
        self.good_bytes = path.stat().st_size if path.exists() else 0

    def new_lines(self) -> Tuple[List[bytes], bytes]:
        """The complete lines appended since ``good_bytes``, and what follows them (a torn line)."""
        try:
            with open(self.path, "rb") as file:
                file.seek(self.good_bytes)
                data = file.read()
        except FileNotFoundError:
            return [], b""
        *complete, rest = data.split(b"\n")
        return complete, rest

    def accept(self, lines: List[bytes]) -> None:
        self.good_bytes += sum(len(line) + 1 for line in lines)

    def cut_back(self) -> int:
        """Truncate the file to its last good line; the bytes dropped."""
        try:
            size = self.path.stat().st_size
            if size > self.good_bytes:
                os.truncate(self.path, self.good_bytes)
            return max(0, size - self.good_bytes)
        except FileNotFoundError:
            return 0


def _parses(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), list)
    except ValueError:
        return False


@derived_object
class RecordWriteCheck(ms.measure_callback.PyMeasureCallback):
    """A measure callback that checks every batch reached the database files whole."""

    def __init__(self, work_dir, database: ms.Database, stop: Callable[[], None]):
        super().__init__()
        self.work_dir = Path(work_dir)
        self.database = database
        self.stop = stop
        self.workloads = _AppendedFile(self.work_dir / WORKLOAD_FILE)
        self.records = _AppendedFile(self.work_dir / RECORD_FILE)
        self.records_seen = len(database)
        self.failure: Optional[str] = None

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
              runner_results) -> None:
        self.check()

    def check(self) -> None:
        """Compare the files with what the database holds in memory; on a mismatch, stop."""
        if self.failure is not None:
            return
        committed = len(self.database) - self.records_seen
        workload_lines, workload_rest = self.workloads.new_lines()
        record_lines, record_rest = self.records.new_lines()
        good_workloads = _good_prefix(workload_lines)
        self.workloads.accept(workload_lines[:good_workloads])
        if workload_rest or good_workloads < len(workload_lines):
            self._failed(self.workloads.path)  # this batch's records may name the lost workload
            return
        good_records = _good_prefix(record_lines)
        self.records.accept(record_lines[:min(good_records, committed)])
        self.records_seen += min(good_records, committed)
        if record_rest or good_records < len(record_lines) or len(record_lines) != committed:
            self._failed(self.records.path)

    def _failed(self, path: Path) -> None:
        self.failure = f"could not write {path.name} ({_likely_cause(self.work_dir)})"
        logger.info("%s; stopping the tune", self.failure)  # the error the tune raises says it
        self.stop()

    def finish(self) -> Optional[DatabaseWriteError]:
        """After the tune: check once more; when a write failed, cut both files back to their last
        good line and return the :class:`DatabaseWriteError` to raise (None when all went well)."""
        self.check()
        if self.failure is None:
            return None
        dropped = self.workloads.cut_back() + self.records.cut_back()
        kept = _count_lines(self.records.path)
        return DatabaseWriteError(
            f"{self.failure}; the database keeps its {kept} complete records and loads "
            f"({dropped} bytes cut); free some space and run the same command again to resume")


def _good_prefix(lines: List[bytes]) -> int:
    """How many of ``lines`` parse, up to the first that does not."""
    for number, line in enumerate(lines):
        if not _parses(line):
            return number
    return len(lines)


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as file:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def _likely_cause(work_dir: Path) -> str:
    try:
        free = shutil.disk_usage(work_dir).free
    except OSError as error:
        return f"the disk cannot be read: {error.strerror or error}"
    if free < (1 << 20):
        return f"disk full: {free} bytes free"
    return "a file size limit or an I/O error"
