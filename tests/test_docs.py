"""The README and docs: every relative link resolves, the README stays short, no document, module or
test cites an issue number, `make` refuses a Python other than 3.11, and the README's Python
blocks run as written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import needs_c_compiler

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def without_code(text: str) -> str:
    """The text with fenced code blocks removed (a link inside code is not a link)."""
    return FENCE.sub("", text)


def heading_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file: lower case, punctuation other
    than '-' and '_' dropped, spaces as '-'."""
    anchors = set()
    for line in without_code(path.read_text()).splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            title = match.group(1).strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def relative_links(path: Path) -> list[str]:
    return [target for target in LINK.findall(without_code(path.read_text()))
            if not re.match(r"[a-z]+:", target)]  # http:, https:, mailto: are not checked


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked):
            broken.append(f"{target} (no heading #{anchor} in {linked.name})")
    return broken


def test_the_link_checker_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "b.md").write_text("# Title\n\n## The `bench` method\n")
    doc = tmp_path / "a.md"
    doc.write_text("[ok](b.md) [ok](b.md#the-bench-method) [anchor](#top) [web](https://x.org)\n"
                   "[gone](c.md) [bad](b.md#nowhere)\n\n# Top\n\n```sh\n[in code](d.md)\n```\n")
    assert broken_links(doc) == ["c.md (no such file)", "b.md#nowhere (no heading #nowhere in b.md)"]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_resolves(document):
    assert broken_links(document) == []


def test_the_readme_links_to_every_doc():
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in relative_links(ROOT / "README.md")}
    missing = [doc.name for doc in DOCUMENTS[2:] if doc.resolve() not in linked]
    assert missing == [], f"docs the README does not link to: {missing}"


SOURCE_PATH = re.compile(r"\b((?:relay_ext|meta_rules|benchmarks|tests)/[\w/]*\w\.(?:py|sh|patch|json))\b")
TEST_FILE_NAME = re.compile(r"(?<![\w/])(test_\w+\.py)\b")


def missing_source_files(document: Path) -> list[str]:
    """The source paths (`relay_ext/.../x.py`, `tests/...`) and test file names (`test_x.py`, found
    anywhere under tests/) a document names that do not exist: a module moved and its doc not."""
    text = document.read_text()
    test_files = {path.name for path in (ROOT / "tests").rglob("test_*.py")}
    missing = [path for path in SOURCE_PATH.findall(text) if not (ROOT / path).exists()]
    missing += [name for name in TEST_FILE_NAME.findall(text) if name not in test_files]
    return sorted(set(missing))


@pytest.mark.parametrize("document", DOCUMENTS[:1] + DOCUMENTS[2:],  # CHANGELOG keeps old paths
                         ids=lambda path: str(path.relative_to(ROOT)))
def test_every_source_file_a_document_names_exists(document):
    assert missing_source_files(document) == []


README_MAX_LINES = 150


def test_the_readme_is_at_most_150_lines():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; move detail into docs/ and link to it")


ISSUE_NUMBER = re.compile(r"issues? #?[0-9]", re.IGNORECASE)
CHECKED_FOR_ISSUE_NUMBERS = ["README.md", "CHANGELOG.md", "docs", "relay_ext", "meta_rules",
                             "benchmarks", "tests"]


def issue_number_lines(paths: list[Path]) -> list[str]:
    """`path:line: text` for every line that cites an issue number (the word, an optional "s", a
    space, an optional "#", a digit; any case), in the given files and, recursively, the text
    files of the given folders (compiled caches skipped)."""
    files = []
    for path in paths:
        files.extend(sorted(path.rglob("*")) if path.is_dir() else [path])
    found = []
    for file in files:
        if not file.is_file() or "__pycache__" in file.parts:
            continue
        try:
            text = file.read_text()
        except UnicodeDecodeError:  # not a text file
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if ISSUE_NUMBER.search(line):
                found.append(f"{file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}:"
                             f"{number}: {line.strip()}")
    return found


def test_the_issue_number_finder_finds_what_grep_finds(tmp_path):
    word = "iss" + "ue"  # spelled apart, so that this file passes its own check
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.py").write_text(f"x = 1  # see {word.title()} 29\nok\n")
    (tmp_path / "b.md").write_text(f"fixed in {word}s #18 and 28\nan {word}-free line, {word}s\n")
    (tmp_path / "c.bin").write_bytes(b"\xff\xfe " + f"{word} 3".encode())
    found = issue_number_lines([tmp_path / "sub", tmp_path / "b.md", tmp_path / "c.bin"])
    assert found == [f"{tmp_path / 'sub' / 'a.py'}:1: x = 1  # see {word.title()} 29",
                     f"{tmp_path / 'b.md'}:1: fixed in {word}s #18 and 28"]


def test_no_document_module_or_test_cites_an_issue_number():
    """Documents, code comments, `--help` texts and tests speak of what the software does, not
    of the issue that asked for it (CHANGELOG.md tells the history without issue numbers)."""
    found = issue_number_lines([ROOT / name for name in CHECKED_FOR_ISSUE_NUMBERS])
    assert found == [], f"{len(found)} lines cite an issue number:\n" + "\n".join(found)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_refuses_a_python_other_than_3_11_in_one_line(tmp_path):
    """The README's prerequisite, enforced: `make` checks $(PYTHON) before it makes the venv."""
    fake_python = tmp_path / "python3"
    fake_python.write_text("#!/bin/sh\necho 3.12\n")
    fake_python.chmod(0o755)
    venv = tmp_path / "venv"
    child = subprocess.run(["make", "-C", str(ROOT), "--no-print-directory", f"VENV={venv}",
                            f"PYTHON={fake_python}", "install"],
                           capture_output=True, text=True, timeout=60, check=False)
    assert child.returncode != 0
    lines = child.stderr.strip().splitlines()
    assert len(lines) == 1, child.stderr
    assert "3.12" in lines[0] and "make PYTHON=python3.11" in lines[0]
    assert not venv.exists()


def readme_python_blocks() -> list[str]:
    return [code for lang, code in FENCE.findall((ROOT / "README.md").read_text()) if lang == "python"]


def test_the_readme_has_a_python_quickstart():
    assert any("relay_ext.tune(" in block for block in readme_python_blocks())


@needs_c_compiler  # the quickstart tunes
@pytest.mark.parametrize("index", range(len(readme_python_blocks())))
def test_readme_python_block_runs_as_written(index, tmp_path):
    """Run the README's Python block in a fresh interpreter, in an empty directory (it writes its
    work dir there); the quickstart prints its distance from PyTorch, which must be <= 3 steps."""
    code = readme_python_blocks()[index]
    env = dict(os.environ, TOPHUB_LOCATION="NONE")
    child = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                           text=True, timeout=900, env=env)
    assert child.returncode == 0, child.stderr[-3000:]
    for steps in re.findall(r"steps from PyTorch: ([0-9.]+)", child.stdout):
        assert round(float(steps), 3) <= 3, child.stdout


def readme_command_lines() -> list[list[str]]:
    """Every `quantfuse ...` line of the README's shell blocks, as argument lists (comments cut)."""
    import shlex

    commands = []
    for lang, code in FENCE.findall((ROOT / "README.md").read_text()):
        if lang in ("sh", "bash", "shell"):
            for line in code.splitlines():
                words = shlex.split(line, comments=True)
                if words and words[0] == "quantfuse":
                    commands.append(words[1:])
    return commands


def test_the_readme_has_command_line_examples():
    assert {words[0] for words in readme_command_lines()} >= {"models", "fusion", "tune", "bench"}


@pytest.mark.parametrize("words", readme_command_lines(), ids=" ".join)
def test_readme_command_lines_parse(words):
    """The README's command lines tune ResNets for minutes, too long for the suite: each is parsed
    by the real parser instead, so an option renamed or removed fails here."""
    from relay_ext.cli.parser import build_parser

    args = build_parser().parse_args(words)
    assert args.command == words[0]
