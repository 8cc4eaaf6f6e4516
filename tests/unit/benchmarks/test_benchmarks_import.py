"""Every script under benchmarks/ imports: a module it names that moved, or a name it imports that
was renamed, fails here rather than the next time someone runs the script. Only the import runs
(``__name__`` is not ``"__main__"``), never the benchmark. The scripts drive the library
(relay_ext.load_model, relay_ext.tune, relay_ext.compile, relay_ext.bench), never the command
line's modules, and none shares its name with a module of the library."""

import ast
import importlib
from pathlib import Path

import pytest

from conftest import ROOT

BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py") if p.stem != "__init__")


def test_the_scripts_are_found():
    assert "candidate_validity" in SCRIPTS and len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_script_imports(script):
    module = importlib.import_module(f"benchmarks.{script}")
    if '__name__ == "__main__"' in (BENCHMARKS / f"{script}.py").read_text():  # a script, not a helper
        assert callable(getattr(module, "main", None)), f"benchmarks/{script}.py has no main()"


def _imported_modules(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_benchmark_goes_through_the_command_line(script):
    cli = [name for name in _imported_modules(BENCHMARKS / f"{script}.py")
           if name == "relay_ext.cli" or name.startswith("relay_ext.cli.")]
    assert not cli, f"benchmarks/{script}.py imports {cli}: call the library instead"


def test_no_benchmark_is_named_like_a_library_module():
    library = {p.stem for package in ("relay_ext", "meta_rules")
               for p in (ROOT / package).rglob("*.py") if p.stem != "__init__"}
    assert not sorted(set(SCRIPTS) & library)
