"""Every script under benchmarks/ imports: a module it names that moved, or a name it imports that
was renamed, fails here rather than the next time someone runs the script. Only the import runs
(``__name__`` is not ``"__main__"``), never the benchmark."""

import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py") if p.stem != "__init__")


def test_the_scripts_are_found():
    assert "candidate_validity" in SCRIPTS and len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_script_imports(script):
    module = importlib.import_module(f"benchmarks.{script}")
    if '__name__ == "__main__"' in (BENCHMARKS / f"{script}.py").read_text():  # a script, not a helper
        assert callable(getattr(module, "main", None)), f"benchmarks/{script}.py has no main()"
