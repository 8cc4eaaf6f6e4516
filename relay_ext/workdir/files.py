"""A tuning work dir: its file names, what it was tuned for, and its database, opened safely.

    run = RunDescription("resnet18", None, 224, "NCHW", target, "ours")
    run.check_same_run(work_dir)      # refuses a work dir tuned for something else
    run.write(work_dir)               # quantfuse_tune.json
    repair_database(work_dir)         # sets a half-written tail aside (a killed run)
    database = open_tuned_database(work_dir)

**Files** (all names live here): MetaSchedule's ``database_workload.json`` and
``database_tuning_record.json``; ``quantfuse_tune.json`` (the :class:`RunDescription`);
``tuning_summary.json`` (what :func:`relay_ext.tune` did to each task); ``logs/`` (one log per
task, ``tvm.log`` for TVM's native lines); ``report.md`` and ``latency.png`` (``bench``);
``never_slower_timings.json`` (:data:`TASK_TIMINGS_FILE`: what the per-task schedule choice timed);
``<model>_<size>_qdq.onnx`` (:func:`onnx_export_file`: bench's ONNX export of a built-in model).

**Lock.** A tune holds an exclusive ``fcntl.flock`` on ``quantfuse.lock`` while it writes
(:func:`tuning_lock`); a second tune of the same work dir is refused with :class:`WorkDirBusy`,
naming the process that holds it. The kernel drops the lock when that process ends, however it
ends, so a killed tune never leaves the work dir locked. Readers (bench, compile) take no lock:
while a tune writes, :func:`open_tuned_database` reads a snapshot of the complete lines (never
repairing files another process is appending to).

**Repair.** A killed tuning process can leave a half-written last line in
``database_workload.json`` or ``database_tuning_record.json``; MetaSchedule's JSONDatabase then
refuses to load the work dir. :func:`repair_database` keeps every complete line, moves the broken
trailing lines to ``<name>.broken-<timestamp>`` next to the file, and logs a warning. A file that
is not MetaSchedule's at all (a complete line that is not JSON of the right shape) raises
:class:`NotADatabaseError` and is left untouched.

Line shapes (TVM 0.19, ``src/meta_schedule/database/json_database.cc``)::

    database_workload.json        ["<structural hash>", "<IRModule as base64 JSON>"]
    database_tuning_record.json   [<workload index>, [<trace>, <run secs>, <target>, <args info>]]
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple, Union

from tvm.target import Target

logger = logging.getLogger(__name__)

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
RUN_FILE = "quantfuse_tune.json"
SUMMARY_FILE = "tuning_summary.json"
LOG_DIR = "logs"
TVM_LOG_FILE = "tvm.log"
REPORT_FILE = "report.md"
CHART_FILE = "latency.png"
LOCK_FILE = "quantfuse.lock"
# What the per-task schedule choice timed (relay_ext.workdir.timing_cache), reused by the next build.
TASK_TIMINGS_FILE = "never_slower_timings.json"  # the name work dirs already hold


def onnx_export_file(model: str, image_size: int, batch_size: int = 1, seed: int = 0) -> str:
    """bench's ONNX export of a built-in model (for the ONNX Runtime and OpenVINO rows):
    ``<model>_<image size>_qdq.onnx``, with the batch size and seed when not the defaults."""
    extra = (f"_b{batch_size}" if batch_size != 1 else "") + (f"_seed{seed}" if seed else "")
    return f"{model}_{image_size}{extra}_qdq.onnx"

PathLike = Union[str, os.PathLike]


class WorkDirError(ValueError):
    """A work dir that cannot be used as asked: missing, not tuned, or tuned for something else."""


class NotADatabaseError(WorkDirError):
    """A database file whose complete lines are not MetaSchedule's."""


class WorkDirBusy(WorkDirError):
    """Another process is tuning into the work dir (it holds the work dir's lock)."""


# --- the lock a tune holds while it writes -------------------------------------------------------

# (resolved work dir, thread) -> [open lock file, depth]: re-entrant within one thread (the CLI
# and tune() both take it); another thread of this process is refused like another process.
_held: Dict[Tuple[str, int], List] = {}
_held_guard = threading.Lock()


def _key(work_dir: PathLike) -> Tuple[str, int]:
    return str(Path(work_dir).resolve()), threading.get_ident()


def lock_holder(work_dir: PathLike) -> Optional[str]:
    """Who holds ``work_dir``'s lock ("process 123 (quantfuse tune ...) since 15:02:11 UTC"), or
    None when no other process does (probed with a non-blocking shared lock, dropped at once)."""
    path = Path(work_dir) / LOCK_FILE
    if _key(work_dir) in _held or not path.exists():
        return None
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as file:
            try:
                fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _describe_holder(file.read())
            except OSError:  # a filesystem without flock: nobody can be seen holding it
                return None
            fcntl.flock(file, fcntl.LOCK_UN)
    except OSError:
        return None
    return None


def _describe_holder(text: str) -> str:
    try:
        info = json.loads(text)
        return f"process {info['pid']} ({info['command']}) since {info['since']}"
    except (ValueError, KeyError, TypeError):
        return "another process"


@contextlib.contextmanager
def tuning_lock(work_dir: PathLike) -> Iterator[None]:
    """Hold ``work_dir``'s lock while the block writes its database; :class:`WorkDirBusy` when
    another process holds it. Re-entrant within one process (the CLI and :func:`tune` both take
    it), not across threads. Where the filesystem has no ``flock`` (some network filesystems) a warning is logged and
    the block runs unlocked."""
    work_dir = Path(work_dir)
    key = _key(work_dir)
    with _held_guard:
        if key in _held:
            _held[key][1] += 1
            acquired = None
        else:
            acquired = _acquire(work_dir)
            if acquired is not None:
                _held[key] = [acquired, 1]
    try:
        yield
    finally:
        with _held_guard:
            if key in _held:
                _held[key][1] -= 1
                if _held[key][1] == 0:
                    file = _held.pop(key)[0]
                    file.close()  # drops the flock


def _acquire(work_dir: Path):
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / LOCK_FILE
    file = open(path, "a+", encoding="utf-8")  # pylint: disable=consider-using-with
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        file.seek(0)
        holder = _describe_holder(file.read())
        file.close()
        raise WorkDirBusy(f"work dir {str(work_dir)!r} is in use: {holder} is tuning into it; "
                          "wait for it to end or pick another --work-dir") from None
    except OSError as error:
        if error.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            file.close()
            raise
        logger.warning("%s: this filesystem cannot lock files (%s); nothing stops a second tune of "
                       "this work dir", path, error.strerror)
        file.close()
        return None
    command = " ".join(["quantfuse", *sys.argv[1:]]) if Path(sys.argv[0]).name == "quantfuse" \
        else " ".join(sys.argv) or "python"
    try:
        file.seek(0)
        file.truncate()
        file.write(json.dumps({"pid": os.getpid(), "command": command[:200],
                               "since": time.strftime("%H:%M:%S UTC", time.gmtime())}))
        file.flush()
    except OSError:  # a full disk: the lock holds all the same, only its note is missing
        pass
    return file


# --- what a work dir was tuned for -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunDescription:
    """What is tuned or benched: resolved and checked once where the input comes in (the CLI),
    trusted below. ``model`` is a built-in name or a model file's absolute path;
    ``input_shape`` ("1,3,224,224") belongs to a file, ``image_size`` to a built-in model."""

    model: str
    input_shape: Optional[str]
    image_size: Optional[int]
    layout: str
    target: Target
    variant: str
    # how tune times candidates (relay_ext.measure.candidate_timing); None: the target's default
    candidate_timing: Optional[str] = None

    def record(self) -> Dict:
        """The JSON form kept in the work dir (``quantfuse_tune.json``)."""
        from relay_ext.measure.candidate_timing import default_candidate_timing  # pylint: disable=import-outside-toplevel

        return {"model": self.model, "input_shape": self.input_shape,
                "image_size": self.image_size, "layout": self.layout,
                "target": str(self.target), "variant": self.variant,
                "candidate_timing": self.candidate_timing or default_candidate_timing(self.target)}

    def write(self, work_dir: PathLike) -> None:
        (Path(work_dir) / RUN_FILE).write_text(json.dumps(self.record(), indent=2))

    def check_same_run(self, work_dir: PathLike) -> None:
        """WorkDirError when ``work_dir`` holds tuning for another model, target, layout, variant
        or candidate timing (resuming it would mix records; a work dir from before the timing was
        recorded counts as warm)."""
        self._check(work_dir, self.record(), "holds tuning for",
                    "run the same command again to resume, or pick another --work-dir")

    def check_tuned_for(self, work_dir: PathLike) -> None:
        """WorkDirError when ``work_dir`` was tuned for another model, layout or variant (its
        records would not be found when this model is compiled)."""
        now = {k: v for k, v in self.record().items()
               if k in ("model", "layout", "variant", "image_size")}
        self._check(work_dir, now, "was tuned for", "pass the options you tuned with")

    @staticmethod
    def _check(work_dir: PathLike, now: Dict, what: str, fix: str) -> None:
        previous = recorded_run(work_dir)
        if previous is None:
            return
        different = [f"{k} {previous.get(k)!r} (now {v!r})" for k, v in now.items()
                     if k in previous and previous.get(k) != v]
        if different:
            raise WorkDirError(f"work dir {str(work_dir)!r} {what} {', '.join(different)}; {fix}")


def recorded_run(work_dir: PathLike) -> Optional[Dict]:
    """What ``work_dir`` was tuned for (its run file), or None when nothing was tuned there yet.
    A run file from before the candidate timing was recorded says warm: it was tuned so."""
    path = Path(work_dir) / RUN_FILE
    if not path.exists():
        return None
    try:
        run = json.loads(path.read_text())
    except ValueError:
        raise WorkDirError(f"{path} is not quantfuse's (not JSON); remove it or pick another "
                           "--work-dir") from None
    return {"candidate_timing": "warm", **run} if isinstance(run, dict) else run


def open_tuned_database(work_dir: PathLike):
    """``work_dir``'s tuning database, repaired first (see :func:`repair_database`); WorkDirError
    when the work dir does not exist or holds no records. The TensorIntrins its records name are
    registered first: those of the target in the work dir's run file, else all of TVM's."""
    from tvm import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    from meta_rules.database_intrinsics import register_database_intrinsics  # pylint: disable=import-outside-toplevel

    work_dir = Path(work_dir)
    if not work_dir.is_dir():
        raise WorkDirError(f"work dir {str(work_dir)!r} does not exist; run 'quantfuse tune' first")
    holder = lock_holder(work_dir)
    snapshot = _complete_lines(work_dir) if holder else None
    if not (snapshot[1] if snapshot else repair_database(work_dir)["records"]):
        raise WorkDirError(f"work dir {str(work_dir)!r} has no tuning database ({RECORD_FILE}); "
                           "run 'quantfuse tune --work-dir ...' first")
    run = recorded_run(work_dir)
    register_database_intrinsics(run.get("target") if run else None, work_dir)
    if snapshot is None:
        return ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False)
    logger.warning("work dir %s is being tuned (%s); using the %d records it holds now",
                   work_dir, holder, len(snapshot[1]))
    copy = Path(tempfile.mkdtemp(prefix="quantfuse-snapshot-"))
    try:
        for name, lines in zip((WORKLOAD_FILE, RECORD_FILE), snapshot):
            (copy / name).write_text("".join(line + "\n" for line in lines))
        return ms.database.JSONDatabase(path_workload=str(copy / WORKLOAD_FILE),
                                        path_tuning_record=str(copy / RECORD_FILE),
                                        allow_missing=False)  # loaded into memory: copy can go
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def _complete_lines(work_dir: Path) -> Tuple[List[str], List[str]]:
    """The complete workload and record lines of a database another process is appending to,
    read without changing it: workloads first, so a record never points past the ones read."""
    def read(name: str) -> str:
        path = work_dir / name
        return path.read_bytes().decode("utf-8", errors="replace") if path.exists() else ""

    try:
        workloads, _ = split_lines(read(WORKLOAD_FILE), _is_workload)
        records, _ = split_lines(read(RECORD_FILE), _is_record, max_workload=len(workloads))
    except NotADatabaseError as error:
        raise NotADatabaseError(f"{work_dir} is not a MetaSchedule JSON database ({error})") from None
    return workloads, records


# --- repairing the database files --------------------------------------------------------------


def _is_workload(value) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)


def _is_record(value) -> bool:
    return (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int)
            and not isinstance(value[0], bool) and isinstance(value[1], list) and len(value[1]) >= 3)


def _parse(line: str):
    try:
        return json.loads(line)
    except ValueError:
        return None


def split_lines(text: str, is_valid, max_workload: Optional[int] = None) -> Tuple[List[str], List[str]]:
    """``text``'s lines as (kept, broken): broken lines are unparseable ones at the end that start
    like a database line (a half-written tail) and, for records, lines pointing at a workload that
    is not there.

    Raises :class:`NotADatabaseError` when a line before the tail does not parse or has the wrong
    shape, or a tail line does not even start with ``[``.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    parsed = [_parse(line) for line in lines]
    tail = len(lines)
    while tail > 0 and parsed[tail - 1] is None:
        tail -= 1
    for number, value in enumerate(parsed[:tail], start=1):
        if value is None or not is_valid(value):
            raise NotADatabaseError(f"line {number} is not a MetaSchedule database line: "
                                    f"{lines[number - 1][:60]!r}")
    kept, broken = lines[:tail], lines[tail:]
    for line in broken:
        if not line.lstrip().startswith("["):  # not the start of one of our lines: not ours at all
            raise NotADatabaseError(f"line {lines.index(line) + 1} is not a MetaSchedule database "
                                    f"line: {line[:60]!r}")
    if max_workload is not None:
        dangling = [line for line, value in zip(kept, parsed) if value[0] >= max_workload]
        kept = [line for line, value in zip(kept, parsed) if value[0] < max_workload]
        broken = dangling + broken
    return kept, broken


def _repair_file(path: Path, is_valid, max_workload: Optional[int] = None) -> Tuple[int, List[str]]:
    """Repair one file in place; returns (lines kept, broken lines set aside)."""
    if not path.exists():
        return 0, []
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    try:
        kept, broken = split_lines(text, is_valid, max_workload)
    except NotADatabaseError as error:
        raise NotADatabaseError(f"{path} is not a MetaSchedule JSON database file ({error})") from None
    if broken:
        aside = path.with_name(f"{path.name}.broken-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        aside.write_text("\n".join(broken) + "\n")
        logger.warning("%s: %d broken line(s) (a tuning process killed while writing?) moved to %s; "
                       "%d complete line(s) kept", path, len(broken), aside, len(kept))
    if broken or (raw and not raw.endswith(b"\n")):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, path)  # atomic: the database is never half-rewritten
    return len(kept), broken


def repair_database(work_dir: PathLike) -> dict:
    """Check and repair ``work_dir``'s JSON database files; returns what was kept and set aside.

    Raises :class:`NotADatabaseError` when a file is not MetaSchedule's.
    """
    work_dir = Path(work_dir)
    workloads, broken_workloads = _repair_file(work_dir / WORKLOAD_FILE, _is_workload)
    records, broken_records = _repair_file(work_dir / RECORD_FILE, _is_record, max_workload=workloads)
    return {"workloads": workloads, "records": records,
            "broken_workloads": len(broken_workloads), "broken_records": len(broken_records)}
