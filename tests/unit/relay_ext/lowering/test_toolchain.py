"""A missing C compiler (relay_ext.lowering.toolchain) is one clear line before any work: TVM
links every candidate a tune measures here with it."""

import subprocess
import sys

import pytest

from relay_ext import cli
from relay_ext.lowering.toolchain import MissingCCompiler, c_compiler_problem, require_c_compiler
from relay_ext.tuning import search
from relay_ext.tuning.search import tune
from conftest import ROOT, AVX2, needs_avx2_host, needs_c_compiler
from helpers import one_error_line

LLVM = "llvm -num-cores 2"
TINY = ["--model", "tiny_resnet", "--image-size", "16"]


@pytest.fixture
def no_compiler_named(monkeypatch, tmp_path):
    """CC names a compiler that does not exist (and CXX, which TVM reads first, is unset)."""
    missing = str(tmp_path / "no-such-gcc")
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("CC", missing)
    return missing


def test_cc_naming_a_missing_compiler_is_one_line_saying_so(no_compiler_named):
    problem = c_compiler_problem()
    assert problem is not None and "\n" not in problem
    assert f"CC={no_compiler_named!r}" in problem and "point CC at an installed compiler" in problem
    with pytest.raises(MissingCCompiler) as refused:
        require_c_compiler()
    assert isinstance(refused.value, ValueError) and str(refused.value) == problem


def test_no_compiler_on_path_names_what_was_looked_for_and_the_fix(monkeypatch, tmp_path):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory
    problem = c_compiler_problem()
    assert problem is not None and "\n" not in problem
    assert "no C compiler found on PATH" in problem and "gcc" in problem
    assert "build-essential" in problem and "set CC" in problem


def test_cxx_is_read_before_cc_as_tvm_does(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-g++"))
    monkeypatch.setenv("CC", "sh")  # exists, but TVM would use CXX
    assert "CXX=" in c_compiler_problem()


@needs_c_compiler
def test_a_compiler_found_is_no_problem():
    assert c_compiler_problem() is None
    require_c_compiler()


def test_tune_refuses_before_any_work(tiny, tmp_path, monkeypatch, no_compiler_named):
    def no_work(*args, **kwargs):
        raise AssertionError("tune started working without a C compiler")

    monkeypatch.setattr(search, "lowered_tasks", no_work)
    monkeypatch.setattr(search, "tuning_lock", no_work)
    work_dir = tmp_path / "work"
    with pytest.raises(MissingCCompiler, match="CC="):
        tune(tiny.mod, tiny.params, LLVM, work_dir, max_trials=4)
    assert not work_dir.exists()  # not even the work dir was made


@needs_avx2_host
def test_the_cli_says_it_in_one_line_with_exit_code_2(tmp_path, capsys, monkeypatch,
                                                      no_compiler_named):
    monkeypatch.setattr(search, "lowered_tasks", lambda *args, **kwargs: pytest.fail("tuned"))
    assert cli.main(["tune", *TINY, "--target", AVX2, "--work-dir", str(tmp_path / "work"),
                     "--trials", "4"]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, f"CC={no_compiler_named!r}", "point CC at an installed compiler")


def test_the_check_imports_without_tvm():
    """The command line maps MissingCCompiler to its exit code without loading TVM ('run')."""
    code = ("import sys, relay_ext.cli.entry_point, relay_ext.lowering.toolchain; "
            "assert 'tvm' not in sys.modules, 'tvm imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_export_refuses_before_anything_is_built(tiny, tmp_path, monkeypatch, no_compiler_named):
    from relay_ext.deploy import export as deploy_export

    monkeypatch.setattr(deploy_export, "compile", lambda *a, **k: pytest.fail("built"))
    with pytest.raises(MissingCCompiler, match="CC="):
        deploy_export.export(tmp_path / "tiny.so", tiny, target=LLVM, schedule="default")
    assert not list(tmp_path.iterdir())


@needs_avx2_host
def test_the_cli_export_says_it_in_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch,
                                                                   no_compiler_named):
    from relay_ext.cli import deploy_commands

    monkeypatch.setattr(deploy_commands, "load_model", lambda *a, **k: pytest.fail("loaded"))
    assert cli.main(["export", *TINY, "--target", AVX2, "--out", str(tmp_path / "t.so")]) \
        == cli.EXIT_BAD_INPUT
    one_error_line(capsys, f"CC={no_compiler_named!r}", "point CC at an installed compiler")
