"""Check and repair MetaSchedule's JSON database files before the database is opened.

A killed tuning process can leave a half-written last line in ``database_workload.json`` or
``database_tuning_record.json``; MetaSchedule's JSONDatabase then refuses to load the work dir.
:func:`repair_database` keeps every complete line, moves the broken trailing lines to
``<name>.broken-<timestamp>`` next to the file, and logs a warning. A file that is not
MetaSchedule's at all (a complete line that is not JSON of the right shape) raises
:class:`NotADatabaseError` and is left untouched.

Line shapes (TVM 0.19, ``src/meta_schedule/database/json_database.cc``)::

    database_workload.json        ["<structural hash>", "<IRModule as base64 JSON>"]
    database_tuning_record.json   [<workload index>, [<trace>, <run secs>, <target>, <args info>]]
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import List, Optional, Tuple, Union

logger = logging.getLogger(__name__)

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


class NotADatabaseError(ValueError):
    """A database file whose complete lines are not MetaSchedule's."""


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


def repair_database(work_dir: Union[str, os.PathLike]) -> dict:
    """Check and repair ``work_dir``'s JSON database files; returns what was kept and set aside.

    Raises :class:`NotADatabaseError` when a file is not MetaSchedule's.
    """
    work_dir = Path(work_dir)
    workloads, broken_workloads = _repair_file(work_dir / WORKLOAD_FILE, _is_workload)
    records, broken_records = _repair_file(work_dir / RECORD_FILE, _is_record, max_workload=workloads)
    return {"workloads": workloads, "records": records,
            "broken_workloads": len(broken_workloads), "broken_records": len(broken_records)}
