"""quantfuse export writes what bench timed as model.so + model.json; TVM's runtime alone (no
PyTorch, no Relay) loads and runs it, here, in a fresh process and on an RPC server."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tvm

import relay_ext
from relay_ext import cli
from relay_ext.build import Compiled, compile
from relay_ext.build import entry as build_entry
from relay_ext.deploy import export as deploy_export
from relay_ext.deploy.runtime import DeployError, load
from relay_ext.lowering import targets
from relay_ext.report.accuracy import quantization_step_error
from relay_ext.measure.run import run_module
from relay_ext.workdir.files import open_tuned_database
from conftest import ROOT, AVX2, C_COMPILER_PROBLEM, TINY_32, TUNED_TRIALS, needs_c_compiler
from helpers import cannot_run_here, one_error_line

MAX_STEPS = 3

# What a deploy machine runs: TVM's runtime library alone, numpy, json; nothing of quantfuse
# (the child runs outside the checkout, without PYTHONPATH).
RUNTIME_ONLY_CHILD = """
import json, os, sys
os.environ["TVM_USE_RUNTIME_LIB"] = "1"  # libtvm_runtime.so, not the compiler's libtvm.so
import numpy as np
import tvm.runtime

library, data, out = sys.argv[1:4]
manifest = json.load(open(library[:-len(".so")] + ".json"))
device = tvm.runtime.cpu(0)
executor = tvm.runtime.load_module(library)["default"](device)
name = manifest["inputs"][0]["name"]
executor["set_input"](name, tvm.runtime.ndarray.array(np.load(data), device))
executor["run"]()
np.save(out, executor["get_output"](0).numpy())
assert tvm._ffi.base._LIB_NAME == "libtvm_runtime.so", tvm._ffi.base._LIB_NAME
assert "torch" not in sys.modules
heavy = [m for m in sys.modules if m.startswith(("tvm.relay", "tvm.meta_schedule", "relay_ext"))]
assert not heavy, heavy
"""


@pytest.fixture(scope="module")
def avx2_here():
    if cannot_run_here(AVX2):
        pytest.skip(cannot_run_here(AVX2))


def inputs_of(model):
    """The model's example input and a second random one."""
    rng = np.random.default_rng(30)
    return [model.example_input,
            rng.uniform(-1, 1, size=model.example_input.shape).astype("float32")]


def run_runtime_only(library: Path, data: np.ndarray, tmp_path: Path) -> np.ndarray:
    """``library``'s output on ``data`` in a fresh process that has TVM's runtime alone."""
    np.save(tmp_path / "x.npy", data)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TVM_NUM_THREADS")}
    child = subprocess.run(
        [sys.executable, "-c", RUNTIME_ONLY_CHILD, str(library), str(tmp_path / "x.npy"),
         str(tmp_path / "y.npy")], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300, check=False)
    assert child.returncode == 0, child.stderr[-3000:]
    return np.load(tmp_path / "y.npy")


@pytest.fixture(scope="module")
def untuned(avx2_here, tiny32, tmp_path_factory):
    """tiny_resnet 32x32 exported without a work dir through the API: (library, result)."""
    if C_COMPILER_PROBLEM is not None:
        pytest.skip(f"needs a C compiler: {C_COMPILER_PROBLEM}")
    library = tmp_path_factory.mktemp("untuned") / "model.so"
    return library, relay_ext.export(library, tiny32.mod, tiny32.params, AVX2,
                                     schedule="default", model_name="tiny_resnet")


def test_untuned_export_is_benchs_untuned_build_run_by_tvms_runtime_alone(untuned, tiny32,
                                                                          tmp_path):
    library, result = untuned
    manifest = json.loads(result.manifest_path.read_text())
    assert manifest == result.manifest and result.manifest_path == library.with_suffix(".json")
    assert manifest["inputs"] == [{"name": "input", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    (output,) = manifest["outputs"]
    assert output["shape"] == [1, 10] and output["dtype"] == "float32"
    assert output["scale"] == pytest.approx(tiny32.output_scale) and isinstance(
        output["zero_point"], int)
    assert manifest["build"] == "untuned" and manifest["records"]["count"] == 0
    assert manifest["tvm"] == tvm.__version__ and "-mcpu=core-avx2" in manifest["target"]
    bench_lib = compile(tiny32, target=AVX2, schedule="default")  # bench's untuned row
    model = load(library)  # relay_ext.load, in this process
    for data in inputs_of(tiny32):
        deployed = run_runtime_only(library, data, tmp_path)
        np.testing.assert_array_equal(deployed, run_module(bench_lib, {"input": data})[0])
        np.testing.assert_array_equal(model(data)[0], deployed)
        assert quantization_step_error(deployed, tiny32.run_reference(data),
                                       tiny32.output_scale) <= MAX_STEPS


def test_tuned_export_is_benchs_tuned_build_run_by_tvms_runtime_alone(
        tiny_tuned, tiny32, tmp_path, capsys, monkeypatch):
    """The work dir's records under the per-task choice, timed with bench's thread count (all
    CPUs); the library's output equals the tuned build bench makes, made here as
    relay_ext.latency.run.measure_latency makes it (the choice is a timing, so it may differ
    between the two builds on a busy machine: int8 schedules of one task give the same integers,
    and both builds are also checked against PyTorch)."""
    work_dir, _ = tiny_tuned
    real_builds, threads_timed = build_entry._make_builds, []

    def spied_builds(*args, **kwargs):
        threads_timed.append(os.environ.get("TVM_NUM_THREADS"))
        return real_builds(*args, **kwargs)

    monkeypatch.setattr(build_entry, "_make_builds", spied_builds)
    library = tmp_path / "out" / "tiny.so"
    library.parent.mkdir()
    assert cli.main(["export", *TINY_32, "--target", AVX2, "--work-dir", str(work_dir),
                     "--out", str(library)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {library}" in out and f"{TUNED_TRIALS} records" in out, out
    assert threads_timed == [str(os.cpu_count())]  # bench's default: every CPU
    assert sorted(p.name for p in library.parent.iterdir()) == ["tiny.json", "tiny.so"]
    manifest = json.loads(library.with_suffix(".json").read_text())
    database = open_tuned_database(work_dir)
    assert manifest["build"] == "tuned" and manifest["never_slower"] is True
    assert manifest["records"]["count"] == TUNED_TRIALS
    assert manifest["records"]["digest"] == deploy_export.records_digest(database)
    assert manifest["threads"] == os.cpu_count()

    bench_lib = compile(tiny32, target=AVX2, records=database, with_no_search=True)  # bench's
    api_lib = relay_ext.compile(tiny32, target=AVX2, records=work_dir)  # the same, from the path
    assert threads_timed == [str(os.cpu_count())] * 3
    for data in inputs_of(tiny32):
        deployed = run_runtime_only(library, data, tmp_path)
        np.testing.assert_array_equal(deployed, run_module(bench_lib, {"input": data})[0])
        np.testing.assert_array_equal(deployed, run_module(api_lib, {"input": data})[0])
        assert quantization_step_error(deployed, tiny32.run_reference(data),
                                       tiny32.output_scale) <= MAX_STEPS


def test_quantfuse_run_imports_neither_torch_nor_relay(untuned, tiny32, tmp_path):
    library, _ = untuned
    data = tiny32.example_input
    np.save(tmp_path / "x.npy", data)
    code = f"""
        import sys
        from relay_ext import cli
        code = cli.main(["run", "--lib", {str(library)!r}, "--input", {str(tmp_path / 'x.npy')!r},
                         "--out", {str(tmp_path / 'y.npy')!r}, "--repeat", "5"])
        heavy = [m for m in sys.modules if m == "torch" or m.startswith((
            "tvm.relay", "tvm.meta_schedule", "relay_ext.tuning", "relay_ext.frontend", "meta_rules"))]
        assert not heavy, heavy
        sys.exit(code)
    """
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                           capture_output=True, text=True, timeout=300, check=False,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert child.returncode == 0, child.stderr[-3000:]
    assert "median of 5 runs:" in child.stdout and "output 0: 1x10 float32" in child.stdout
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), load(library)(data)[0])


def test_run_refuses_a_wrong_input_a_file_that_is_not_a_library_and_a_missing_json(
        untuned, tmp_path, capsys):
    library, _ = untuned
    np.save(tmp_path / "small.npy", np.zeros((1, 3, 16, 16), "float32"))
    np.save(tmp_path / "ints.npy", np.zeros((1, 3, 32, 32), "int32"))
    run = ["run", "--lib", str(library), "--input"]
    assert cli.main([*run, str(tmp_path / "small.npy")]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "1x3x16x16 float32", "takes 1x3x32x32 float32")
    assert cli.main([*run, str(tmp_path / "ints.npy")]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "1x3x32x32 int32")

    fake = tmp_path / "fake.so"
    fake.write_text("not a library\n")
    manifest = json.loads(library.with_suffix(".json").read_text())
    manifest["library"]["sha256"] = deploy_export.file_digest(fake)
    fake.with_suffix(".json").write_text(json.dumps(manifest))
    assert cli.main(["run", "--lib", str(fake), "--input", str(tmp_path / "small.npy")]) == 2
    one_error_line(capsys, "is not a TVM library")

    alone = tmp_path / "alone" / "model.so"
    alone.parent.mkdir()
    alone.write_bytes(library.read_bytes())
    assert cli.main(["run", "--lib", str(alone), "--input", str(tmp_path / "small.npy")]) == 2
    one_error_line(capsys, "model.json is missing")

    other = tmp_path / "other.so"  # a copy of another export's .json beside this .so
    other.write_bytes(fake.read_bytes())
    other.with_suffix(".json").write_text(library.with_suffix(".json").read_text())
    assert cli.main(["run", "--lib", str(other), "--input", str(tmp_path / "small.npy")]) == 2
    one_error_line(capsys, "SHA-256 differs")
    with pytest.raises(DeployError, match="takes 1 input"):
        load(library)()


class _HalfWritten:
    """A build whose export fails (or is interrupted) after writing part of the library."""

    def __init__(self, error: BaseException):
        self.error = error

    def export_library(self, name):
        Path(name).write_bytes(b"\x7fELF" + b"\0" * 100)
        raise self.error


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), KeyboardInterrupt()],
                         ids=["disk-full", "ctrl-c"])
def test_a_failed_or_interrupted_export_leaves_no_half_file(untuned, tiny32, tmp_path,
                                                            monkeypatch, error):
    half_written = Compiled(_HalfWritten(error), "default", targets.normalize_target(AVX2))
    monkeypatch.setattr(deploy_export, "compile", lambda *args, **kwargs: half_written)
    with pytest.raises(type(error)):
        relay_ext.export(tmp_path / "model.so", tiny32.mod, tiny32.params, AVX2,
                         schedule="default")
    assert list(tmp_path.iterdir()) == []

    library, _ = untuned  # an earlier export at the path stays whole
    before = {name: (library.parent / name).read_bytes() for name in ("model.so", "model.json")}
    for name, content in before.items():
        (tmp_path / name).write_bytes(content)
    with pytest.raises(type(error)):
        relay_ext.export(tmp_path / "model.so", tiny32.mod, tiny32.params, AVX2,
                         schedule="default")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


@needs_c_compiler
def test_the_cli_export_that_fails_prints_one_line_and_writes_nothing(avx2_here, tmp_path,
                                                                      monkeypatch, capsys):
    half_written = Compiled(_HalfWritten(OSError(28, "No space left on device")), "default",
                            targets.normalize_target(AVX2))
    monkeypatch.setattr(deploy_export, "compile", lambda *args, **kwargs: half_written)
    assert cli.main(["export", *TINY_32, "--target", AVX2, "--out",
                     str(tmp_path / "model.so")]) == cli.EXIT_FAILED
    err = [line for line in capsys.readouterr().err.splitlines() if "failed" in line]
    assert len(err) == 1 and "No space left on device" in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_export_refuses_a_target_this_wheel_cannot_build_or_this_host_cannot_run(
        tmp_path, capsys, monkeypatch):
    out = ["--out", str(tmp_path / "model.so")]
    assert cli.main(["export", *TINY_32, "--target", "cuda", *out]) == cli.EXIT_BAD_INPUT
    line = one_error_line(capsys, "must be llvm", "'cuda'")
    if tvm.get_global_func("target.build.cuda", allow_missing=True) is None:
        assert "cannot compile for cuda" in line
    from host_flags import AMD_AVX2_VM

    monkeypatch.setattr(targets, "host_cpu_flags", lambda: AMD_AVX2_VM)
    assert cli.main(["export", *TINY_32, "--target", "llvm -mcpu=cascadelake", *out]) == 2
    one_error_line(capsys, "cannot run", "avx512")
    assert cli.main(["export", *TINY_32, "--target", AVX2, "--out",
                     str(tmp_path / "model.bin")]) == 2
    one_error_line(capsys, "must end in .so")
    assert list(tmp_path.iterdir()) == []


def test_run_on_an_rpc_server_uploads_runs_and_downloads(untuned, tiny32, tmp_path, capsys):
    from rpc_servers import _start_rpc, _stop_rpc

    library, _ = untuned
    np.save(tmp_path / "x.npy", tiny32.example_input)
    port, processes, _ = _start_rpc(tmp_path, "quantfuse-deploy", 1)
    try:
        assert cli.main(["run", "--lib", str(library), "--input", str(tmp_path / "x.npy"),
                         "--out", str(tmp_path / "y.npy"), "--repeat", "3",
                         "--rpc", f"127.0.0.1:{port}:quantfuse-deploy"]) == 0
        out = capsys.readouterr().out
        assert "on RPC server" in out and "median of 3 runs" in out, out
        np.testing.assert_array_equal(np.load(tmp_path / "y.npy"),
                                      load(library)(tiny32.example_input)[0])
        assert cli.main(["run", "--lib", str(library), "--input", str(tmp_path / "x.npy"),
                         "--rpc", f"127.0.0.1:{port}:no-such-key"]) == cli.EXIT_BAD_INPUT
        one_error_line(capsys, "no server with key 'no-such-key'")
    finally:
        _stop_rpc(processes)


def _block(document: Path, language: str, containing: str) -> str:
    """The one ``language`` code block of ``document`` that contains ``containing``."""
    import re

    (code,) = [code for lang, code in re.findall(r"```(\w*)\n(.*?)```", document.read_text(),
                                                re.S) if lang == language and containing in code]
    return code


def test_the_cpp_program_of_docs_deploy_runs_the_library_with_libtvm_runtime_alone(
        untuned, tiny32, tmp_path):
    """docs/deploy.md's C++ program and its build commands, as written (the run line is this
    test's own): linked against libtvm_runtime.so only, its output is relay_ext.load's."""
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("no g++ on this host to compile docs/deploy.md's C++ program")
    library, _ = untuned
    document = ROOT / "docs" / "deploy.md"
    (tmp_path / "run_model.cc").write_text(_block(document, "cpp", "int main"))
    build = [line for line in _block(document, "sh", "g++").replace("\\\n", " ").splitlines()
             if line.strip() and not line.startswith("./")]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    compiled = subprocess.run(["bash", "-ec", "\n".join(build)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    linked = subprocess.run(["ldd", str(tmp_path / "run_model")], capture_output=True,
                            text=True, check=False).stdout
    assert "libtvm_runtime.so" in linked and "libtvm.so" not in linked, linked
    tiny32.example_input.tofile(tmp_path / "x.bin")
    ran = subprocess.run([str(tmp_path / "run_model"), str(library), "x.bin", "y.bin"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    output = np.fromfile(tmp_path / "y.bin", dtype="float32").reshape(1, 10)
    np.testing.assert_array_equal(output, load(library)(tiny32.example_input)[0])
    (tmp_path / "small.bin").write_bytes(b"\0" * 12)
    refused = subprocess.run([str(tmp_path / "run_model"), str(library), "small.bin", "y.bin"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120,
                             check=False)
    assert refused.returncode == 2 and "12 bytes, the input takes 12288" in refused.stderr
