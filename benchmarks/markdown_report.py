"""Write one benchmark's section of docs/BENCHMARKS.md, leaving the other sections as they are.

Each benchmark script owns the text between ``<!-- begin: NAME -->`` and ``<!-- end: NAME -->``;
the section carries the command that produced it, the machine and the date.
"""

from __future__ import annotations

import datetime
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

from relay_ext.report.tables import machine_description, markdown_table  # noqa: F401 - re-exported

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "docs" / "BENCHMARKS.md"
HEADER = (
    "# Benchmarks\n\n"
    "Each section is written by the script it names; rerun the command to refresh it.\n"
    "Weights of the models are random (fixed seed) and calibrated on random data.\n"
)


def load_results(path: Path) -> Dict[str, Dict]:
    """The rows a benchmark stored in ``path`` (JSON, keyed by configuration), or none."""
    return json.loads(path.read_text()) if path.exists() else {}


def save_result(path: Path, key: str, row: Dict,
                replacing: Optional[Callable[[str, Dict], bool]] = None) -> None:
    """Store ``row`` under ``key`` in ``path``, keeping every other row but those stored rows for
    which ``replacing(key, row)`` is true (rows the new one supersedes under another key)."""
    rows = {old_key: old_row for old_key, old_row in load_results(path).items()
            if replacing is None or not replacing(old_key, old_row)}
    rows[key] = row
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=2) + "\n")


def utc_now() -> str:
    """The time now, as every benchmark stamps its rows."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def current_commit() -> str:
    """The short hash of this checkout's HEAD, or "" outside a git checkout."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=False, cwd=BENCHMARKS_MD.parent).stdout.strip()
    except OSError:
        return ""


def _script_path() -> str:
    """The running script, relative to the checkout when it lies inside it (``python -m`` gives an
    absolute path, which names the machine's checkout rather than the command to run)."""
    script = Path(sys.argv[0]).resolve()
    try:
        return script.relative_to(BENCHMARKS_MD.parent.parent).as_posix()
    except ValueError:
        return Path(sys.argv[0]).as_posix()


def write_section(name: str, title: str, body: str, command: List[str] | None = None) -> Path:
    """Replace (or append) the section ``name`` of docs/BENCHMARKS.md."""
    command = command if command is not None else [_script_path(), *sys.argv[1:]]
    commit = current_commit()
    stamp = utc_now()
    section = (
        f"<!-- begin: {name} -->\n## {title}\n\n"
        f"- command: `python {shlex.join(command)}`\n- date: {stamp}"
        + (f" (commit {commit})" if commit else "")
        + f"\n- machine: {machine_description()}\n\n{body.strip()}\n<!-- end: {name} -->\n"
    )
    text = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else HEADER
    pattern = re.compile(rf"<!-- begin: {re.escape(name)} -->.*?<!-- end: {re.escape(name)} -->\n",
                         re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    BENCHMARKS_MD.parent.mkdir(parents=True, exist_ok=True)
    BENCHMARKS_MD.write_text(text)
    return BENCHMARKS_MD


def write_results_section(name: str, title: str, intro: str, stored: Dict[str, Dict],
                          table: Callable[[Dict], str], command: List[str] | None = None) -> Path:
    """The section ``name``: ``intro``, then ``table(result)`` for every kept result, by key."""
    body = intro.strip() + "\n\n" + "\n".join(table(stored[key]) for key in sorted(stored))
    return write_section(name, title, body, command)

