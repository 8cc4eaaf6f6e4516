"""What the per-task schedule choice timed (:mod:`relay_ext.schedules.task_choice`), kept in a
JSON file so that the next build with the same records, target and threads times nothing again.

    cache = TimingCache.open(work_dir / TASK_TIMINGS_FILE)   # missing or unreadable: empty
    key = cache.key(workload, record, target)                  # record + target + threads
    key = cache.key(workload, record, target, rule_design)     # ... timed beside the rule design
    cache.get(key) / cache.put(key, comparison); cache.save()

A key hashes the task's workload (its structural hash), the record's trace (decisions
included), the target string and TVM's thread count in this process: a tuned record that changed,
another target or other threads miss, and that task is timed again. Entries never expire on their
own (the machine's load when they were measured is not kept apart): delete the file to time
everything again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Dict, Optional, Union

import tvm
from tvm import meta_schedule as ms
from tvm.target import Target

logger = logging.getLogger(__name__)

VERSION = 3  # 2: timed inside the whole model; 3: each kernel matched to its task by function


def tvm_threads() -> int:
    """TVM's thread-pool size in this process (the threads a timed kernel runs with)."""
    return int(tvm.get_global_func("runtime.NumThreads")())


class TimingCache:
    """The per-task choice's comparisons by key, read from and written to one JSON file."""

    def __init__(self, path: Path, entries: Optional[Dict[str, Dict]] = None) -> None:
        self.path = path
        self.entries: Dict[str, Dict] = dict(entries or {})
        self.changed = False

    @classmethod
    def open(cls, path: Union[str, os.PathLike]) -> "TimingCache":
        """The cache in ``path``; a missing, unreadable or other-version file reads as empty."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
            if data.get("version") == VERSION and isinstance(data.get("entries"), dict):
                return cls(path, data["entries"])
            logger.info("%s: another version of the task timings cache; timing again", path)
        except FileNotFoundError:
            pass
        except (OSError, ValueError, AttributeError) as error:
            logger.warning("%s: unreadable task timings cache (%s); timing again", path, error)
        return cls(path)

    @staticmethod
    def key(workload: tvm.IRModule, record: ms.database.TuningRecord, target: Target,
            rule_design: Optional[ms.database.TuningRecord] = None) -> str:
        """The key of one task's comparison (see the module doc); ``rule_design``: the task's
        rule-design record, when it was timed beside ``record``."""
        parts = [str(int(tvm.ir.structural_hash(workload))), str(record.trace)]
        if rule_design is not None:  # "no-search": as hashed into the keys of saved files
            parts += ["no-search", str(rule_design.trace)]
        text = "\n".join(parts + [str(target), str(tvm_threads())])
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> Optional[Dict]:
        return self.entries.get(key)

    def put(self, key: str, comparison: Dict) -> None:
        self.entries[key] = dict(comparison)
        self.changed = True

    def save(self) -> None:
        """Write the file (atomically: a temporary file renamed) when something was added; an
        unwritable place is logged, not raised: the build does not depend on it."""
        if not self.changed:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_name(self.path.name + ".tmp")
            temporary.write_text(json.dumps({"version": VERSION, "entries": self.entries},
                                            indent=1, sort_keys=True))
            os.replace(temporary, self.path)
            self.changed = False
        except OSError as error:
            logger.warning("could not write the task timings cache %s (%s)", self.path, error)
