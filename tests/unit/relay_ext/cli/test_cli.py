"""The quantfuse command line: models, fusion report, resumable tune, database repair, bad input."""

import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tvm import meta_schedule as ms

from relay_ext import cli
from relay_ext.frontend import models
from relay_ext.cli import commands as cli_commands
from relay_ext.workdir.files import NotADatabaseError, RECORD_FILE, WORKLOAD_FILE, repair_database
from conftest import needs_c_compiler
from helpers import small_search, one_error_line

LLVM = "llvm -num-cores 2"
A100 = "nvidia/nvidia-a100"
TINY = ["--model", "tiny_resnet", "--image-size", "16"]




# --- console script, help, models -------------------------------------------------------------


def test_console_script_help():
    script = Path(sys.executable).with_name("quantfuse")
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for command in ("models", "fusion", "tune"):
        assert command in result.stdout


def test_version_prints_the_installed_package_version(capsys):
    from importlib import metadata

    assert cli.main(["--version"]) == 0
    version = metadata.version("quantfuse")
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", version)
    assert capsys.readouterr().out.strip() == f"quantfuse {version}"


@pytest.mark.parametrize("command", ["models", "fusion", "tune"])
def test_subcommand_help(command, capsys):
    assert cli.main([command, "--help"]) == 0
    assert f"usage: quantfuse {command}" in capsys.readouterr().out


def test_models_lists_every_model_with_its_description(capsys):
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    for name, spec in models.MODELS.items():
        assert name in out and spec.description in out


# --- fusion -----------------------------------------------------------------------------------


def test_fusion_report_ours_never_worse_than_legacy(a100_fusion, capsys, tmp_path):
    report = a100_fusion.to_dict()  # tiny_resnet 16x16, all variants (tests/conftest.py)
    assert report["variants"] == ["legacy", "upstream", "ours"]
    assert report["tasks"]
    for task in report["tasks"]:
        ours, legacy = task["variants"]["ours"], task["variants"]["legacy"]
        assert ours["intermediates"] <= legacy["intermediates"], task["name"]
        assert ours["intermediates"] <= task["variants"]["upstream"]["intermediates"], task["name"]
        assert task["anchor"]
    anchors = {task["anchor"] for task in report["tasks"]}
    assert {"nn.conv2d", "nn.dense"} <= anchors
    totals = report["totals"]
    assert totals["ours"]["intermediates"] < totals["legacy"]["intermediates"]
    assert totals["ours"]["bytes"] < totals["legacy"]["bytes"]

    # The command prints the same report (one variant here: the wiring, not the rules again).
    out_md = tmp_path / "fusion.md"
    assert cli.main(["fusion", *TINY, "--target", A100, "--variants", "ours", "--json",
                     "--out", str(out_md)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["variants"] == ["ours"]
    assert [t["variants"]["ours"] for t in printed["tasks"]] == \
        [t["variants"]["ours"] for t in report["tasks"]]
    markdown = out_md.read_text()
    assert "| task | anchor | ours |" in markdown and "TOTAL" in markdown


# --- tune: resumable, repaired ----------------------------------------------------------------


def _record_count(work_dir):
    return len((work_dir / RECORD_FILE).read_text().splitlines())


@needs_c_compiler
def test_tune_resumes_and_keeps_records(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli_commands, "search_strategy", small_search)
    work_dir = tmp_path / "work"
    args = ["tune", *TINY, "--target", LLVM, "--work-dir", str(work_dir), "--seed", "0"]

    assert cli.main([*args, "--trials", "2"]) == 0
    first = _record_count(work_dir)
    assert first >= 1
    first_lines = (work_dir / RECORD_FILE).read_text().splitlines()
    capsys.readouterr()

    assert cli.main([*args, "--trials", str(first + 2)]) == 0
    out = capsys.readouterr().out
    assert f"resuming: {first} records" in out
    second_lines = (work_dir / RECORD_FILE).read_text().splitlines()
    assert len(second_lines) > first  # the resumed run added records
    assert second_lines[:first] == first_lines  # the first run's records are untouched

    # A run killed while writing: a half-written last record. The next run sets it aside, keeps
    # every complete record, and MetaSchedule loads the database again.
    complete = len(second_lines)
    with open(work_dir / RECORD_FILE, "a") as f:
        f.write(second_lines[-1][: len(second_lines[-1]) // 2])
    assert cli.main([*args, "--trials", str(complete)]) == 0  # budget reached: nothing to tune
    captured = capsys.readouterr()
    assert "nothing to do" in captured.out
    assert "broken line" in captured.err
    assert len(list(work_dir.glob(RECORD_FILE + ".broken-*"))) == 1
    assert _record_count(work_dir) == complete
    assert len(ms.database.JSONDatabase(work_dir=str(work_dir))) == complete

    # Another model in the same work dir is refused (its records would mix).
    assert cli.main(["tune", "--model", "mlp", "--target", LLVM, "--work-dir", str(work_dir),
                     "--trials", "100"]) == 2
    one_error_line(capsys, "pick another --work-dir")


# --- database repair, directly ----------------------------------------------------------------

WORKLOAD = json.dumps(["123", "bW9kdWxl"])


def _record(index, secs=1e-3):
    return json.dumps([index, [[[], []], [secs], {"kind": "llvm"}, []]])


def test_repair_sets_aside_a_truncated_last_line(tmp_path, caplog):
    (tmp_path / WORKLOAD_FILE).write_text(WORKLOAD + "\n")
    half = _record(0)[:17]
    (tmp_path / RECORD_FILE).write_text(_record(0) + "\n" + _record(0, 2e-3) + "\n" + half)
    with caplog.at_level(logging.WARNING):
        result = repair_database(tmp_path)
    assert result == {"workloads": 1, "records": 2, "broken_workloads": 0, "broken_records": 1}
    assert (tmp_path / RECORD_FILE).read_text() == _record(0) + "\n" + _record(0, 2e-3) + "\n"
    (aside,) = tmp_path.glob(RECORD_FILE + ".broken-*")
    assert aside.read_text() == half + "\n"
    assert "broken line" in caplog.text
    # Repairing a sound database changes nothing.
    assert repair_database(tmp_path)["broken_records"] == 0
    assert len(list(tmp_path.glob("*.broken-*"))) == 1


def test_repair_truncated_workload_drops_records_that_point_at_it(tmp_path):
    (tmp_path / WORKLOAD_FILE).write_text(WORKLOAD + "\n" + WORKLOAD[:9])
    (tmp_path / RECORD_FILE).write_text(_record(0) + "\n" + _record(1) + "\n")
    result = repair_database(tmp_path)
    assert result["workloads"] == 1 and result["records"] == 1
    assert result["broken_workloads"] == 1 and result["broken_records"] == 1
    assert (tmp_path / RECORD_FILE).read_text() == _record(0) + "\n"


@pytest.mark.parametrize("content", [
    "hello, this is not a database\n",
    json.dumps({"workload": 1}) + "\n",
    WORKLOAD + "\nnot json\n" + WORKLOAD + "\n",
])
def test_repair_refuses_files_that_are_not_metaschedules(tmp_path, content):
    (tmp_path / WORKLOAD_FILE).write_text(content)
    with pytest.raises(NotADatabaseError, match="not a MetaSchedule"):
        repair_database(tmp_path)
    assert (tmp_path / WORKLOAD_FILE).read_text() == content  # untouched
    assert not list(tmp_path.glob("*.broken-*"))


def test_repair_of_an_empty_work_dir_is_a_no_op(tmp_path):
    assert repair_database(tmp_path) == {"workloads": 0, "records": 0,
                                         "broken_workloads": 0, "broken_records": 0}


# --- bad input: one line, exit code 2 ---------------------------------------------------------


def _one_pixel_conv(path):
    """A quantized 1x1-pixel conv + ReLU as TorchScript: in NHWC its input's layout transform
    has no loop longer than 1, and TVM's CUDA layout-transform rule cannot schedule it."""
    import torch
    from torch.ao import quantization as tq

    class OnePixel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
            self.conv, self.relu = torch.nn.Conv2d(1, 8, 1), torch.nn.ReLU()

        def forward(self, x):
            return self.dequant(self.relu(self.conv(self.quant(x))))

    torch.manual_seed(0)
    net = OnePixel().eval()
    net.qconfig = tq.get_default_qconfig("x86")
    tq.fuse_modules(net, [["conv", "relu"]], inplace=True)
    tq.prepare(net, inplace=True)
    for _ in range(4):
        net(torch.randn(1, 1, 1, 1))
    tq.convert(net, inplace=True)
    torch.jit.trace(net, torch.randn(1, 1, 1, 1)).save(str(path))
    return path


def test_fusion_lists_a_task_tvm_cannot_schedule_and_reports_the_others(capsys, tmp_path):
    model = _one_pixel_conv(tmp_path / "one_pixel.pt")
    args = ["fusion", "--model", str(model), "--input-shape", "1,1,1,1", "--layout", "NHWC",
            "--target", A100, "--variants", "upstream,ours"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if "failed [1]" in line]
    assert len(failed) == 1 and "layout_transform" in failed[0], out
    assert re.search(r"nn\.conv2d\s+\d+ \(", out), out  # the conv task is still reported
    assert re.search(r"TOTAL\s+3 tasks.*; 1 failed.*; 1 failed", out), out
    reason = [line for line in out.splitlines() if line.startswith("[1] ")]
    assert len(reason) == 1 and "Check failed" in reason[0] and "Traceback" not in out, out
    assert cli.main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["totals"]["ours"]["tasks_failed"] == 1
    failed_task = next(t for t in report["tasks"] if t["variants"]["ours"]["failed"])
    assert "Check failed" in failed_task["variants"]["ours"]["failed"]
    assert failed_task["variants"]["ours"]["generation"].startswith("failed after")


def test_unknown_model_lists_the_names(capsys):
    assert cli.main(["fusion", "--model", "resnet1000", "--target", LLVM]) == 2
    one_error_line(capsys, "resnet1000", "resnet18", "tiny_resnet")


def test_unparseable_target(capsys):
    assert cli.main(["fusion", *TINY, "--target", "not-a-target -x"]) == 2
    one_error_line(capsys, "invalid target", "llvm")


def test_vnni_cpu_fusion_report_builds_design_spaces(capsys):
    # A VNNI -mcpu used to abort the process in LLVM 22 (relay_ext.lowering.x86.vnni_intrinsics); now TVM's
    # x86 VNNI rules generate their spaces and the report comes out.
    assert cli.main(["fusion", *TINY, "--target", "llvm -mcpu=cascadelake -num-cores 2",
                     "--variants", "ours", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tasks"], report
    assert report["totals"]["ours"]["tasks_failed"] == 0, report["totals"]  # every space was built


@pytest.mark.parametrize("trials", ["0", "-3", "many"])
def test_trials_must_be_positive(trials, capsys, tmp_path):
    assert cli.main(["tune", *TINY, "--target", LLVM, "--trials", trials,
                     "--work-dir", str(tmp_path)]) == 2
    one_error_line(capsys, "--trials")


@needs_c_compiler
def test_unwritable_work_dir(capsys, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert cli.main(["tune", *TINY, "--target", LLVM, "--trials", "4",
                     "--work-dir", str(blocker / "work")]) == 2
    one_error_line(capsys, "cannot write to work dir", "--work-dir")


@needs_c_compiler
def test_work_dir_with_a_foreign_database(capsys, tmp_path):
    (tmp_path / RECORD_FILE).write_text('{"these": "are not tuning records"}\n')
    assert cli.main(["tune", *TINY, "--target", LLVM, "--trials", "4",
                     "--work-dir", str(tmp_path)]) == 2
    one_error_line(capsys, "not a MetaSchedule", "another --work-dir")


def test_torchscript_model_needs_an_input_shape(capsys, tmp_path):
    path = tmp_path / "model.pt"
    path.write_bytes(b"")
    assert cli.main(["fusion", "--model", str(path), "--target", LLVM]) == 2
    one_error_line(capsys, "--input-shape")
    assert cli.main(["fusion", "--model", str(tmp_path / "missing.pt"), "--input-shape", "1,3,8,8",
                     "--target", LLVM]) == 2
    one_error_line(capsys, "not found")
    # A mistyped path without --input-shape: the missing file is the problem, not the shape.
    assert cli.main(["fusion", "--model", str(tmp_path / "missing.pt"), "--target", LLVM]) == 2
    one_error_line(capsys, "model file not found")


def test_verbose_shows_the_traceback(capsys):
    assert cli.main(["fusion", "--model", "resnet1000", "--target", LLVM, "--verbose"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "quantfuse: error: unknown model" in err


def test_torchscript_file_as_model(tiny, capsys, tmp_path):
    path = tmp_path / "tiny.pt"
    tiny.torchscript.save(str(path))
    assert cli.main(["fusion", "--model", str(path), "--input-shape", "1,3,16,16",
                     "--target", LLVM, "--variants", "ours", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["tasks"]) >= 4 and report["variants"] == ["ours"]
