"""TVM failures past the user's input: the fusion report goes on when its measure fails
on one task, naming the task and TVM's reason; a TVM check failure in import or task extraction is
one line that names the op or step and says "this is a quantfuse bug", the trace with --verbose."""

import json
import re

import numpy as np
import pytest
import tvm
from tvm import relay

from meta_rules.base.tvm_errors import QuantfuseBug, bug_line, is_tvm_failure, tvm_error_op
from meta_rules.measure import fusion
from relay_ext import cli
from relay_ext.frontend import models

LLVM = "llvm -num-cores 2"
TINY = ["--model", "tiny_resnet", "--image-size", "16"]


def _unsigned_zero_minus_one() -> None:
    """TVM's arithmetic refusing an unsigned 0 - 1: the check the EfficientNet-style QDQ net hit."""
    _ = tvm.tir.const(0, "uint8") - tvm.tir.const(1, "uint8")


def _per_channel_scale_type_check() -> None:
    """Relay's type check of a qnn.conv2d given a per-channel input scale (a scalar is required):
    the check GoogLeNet's PT2E import hit."""
    data = relay.var("x", shape=(1, 4, 8, 8), dtype="uint8")
    weight = relay.const(np.ones((4, 4, 1, 1), "int8"))
    per_channel = relay.const(np.ones(4, "float32"))
    conv = relay.qnn.op.conv2d(data, weight, relay.const(0), relay.const(0), per_channel,
                               per_channel, kernel_size=(1, 1), channels=4)
    relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([data], conv)))


def _tvm_error(raise_it) -> Exception:
    with pytest.raises(tvm.error.TVMError) as caught:
        raise_it()
    return caught.value


def test_the_unsigned_subtraction_check_is_a_tvm_failure_and_a_bug_line():
    error = _tvm_error(_unsigned_zero_minus_one)
    assert is_tvm_failure(error)
    line = bug_line(error)
    assert line.startswith("InternalError: Check failed") and line.endswith("this is a quantfuse bug")
    assert "\n" not in line


def test_a_type_relation_failure_names_the_relay_op():
    error = _tvm_error(_per_channel_scale_type_check)
    assert tvm_error_op(error) == ("qnn.conv2d", "QnnConv2DRel")
    text = str(QuantfuseBug("importing net.pt2", error))
    assert text.startswith("importing net.pt2: Relay op qnn.conv2d (TVM's type relation QnnConv2DRel): "
                           "InternalError: Check failed: tensor_type->shape.size() == 0"), text
    assert text.endswith("this is a quantfuse bug") and "\n" not in text


def test_an_rpc_error_is_not_called_a_quantfuse_bug():
    error = tvm.error.RPCError("Cannot connect to tracker 127.0.0.1:9190")
    assert not is_tvm_failure(error)
    assert "quantfuse bug" not in bug_line(error)


def test_the_fusion_report_goes_on_when_its_measure_fails_on_one_task(tmp_path, capsys, monkeypatch):
    measured = fusion.global_intermediates
    calls = []

    def fails_on_the_first_task(mod):
        calls.append(mod)
        if len(calls) == 1:
            _unsigned_zero_minus_one()
        return measured(mod)

    monkeypatch.setattr(fusion, "global_intermediates", fails_on_the_first_task)
    markdown = tmp_path / "fusion.md"
    # One run: --json on stdout, the table (fusion_rows and failure_notes, as printed) in --out.
    assert cli.main(["fusion", *TINY, "--target", LLVM, "--variants", "ours", "--json",
                     "--out", str(markdown)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["totals"]["ours"]["tasks_failed"] == 1
    failed_task = report["tasks"][0]["name"]
    first = report["tasks"][0]["variants"]["ours"]
    assert first["failed_in"] == "measure" and "design space 1 of" in first["failed"]
    assert "Check failed" in first["failed"]
    others = [t["variants"]["ours"] for t in report["tasks"][1:]]
    assert len(others) >= 3 and all(v["failed"] is None and v["spaces"] for v in others), others

    text = markdown.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| fused_")]
    failed = [line for line in rows if "| failed [1] |" in line]
    assert len(failed) == 1 and failed_task[:57] in failed[0], text  # the table cuts long names
    assert sum(bool(re.search(r"\| \d+ \(\d", line)) for line in rows) == len(rows) - 1, text
    assert re.search(r"\| TOTAL \| \d+ tasks \| .*; 1 failed", text), text
    note = [line for line in text.splitlines() if line.startswith("- [1] ")]
    assert len(note) == 1 and f"the fusion measure failed on task {failed_task} " in note[0], text
    assert "this is a quantfuse bug" in note[0] and "Check failed" in note[0], note
    assert "Traceback" not in text


def test_a_tvm_check_failure_at_import_is_one_line_naming_the_op(capsys, monkeypatch):
    def load(*_args, **_kwargs):
        _per_channel_scale_type_check()

    monkeypatch.setattr(models, "load", load)
    assert cli.main(["fusion", *TINY, "--target", LLVM]) == cli.EXIT_FAILED
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("quantfuse: failed:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "importing tiny_resnet: Relay op qnn.conv2d" in lines[0], lines[0]
    assert "this is a quantfuse bug (rerun with --verbose for the traceback)" in lines[0], lines[0]

    assert cli.main(["fusion", *TINY, "--target", LLVM, "--verbose"]) == cli.EXIT_FAILED
    err = capsys.readouterr().err
    assert "Traceback" in err and "QnnConv2DRel" in err, err[-2000:]


def test_a_tvm_check_failure_extracting_tasks_names_the_step(capsys, monkeypatch):
    from relay_ext.report import fusion as fusion_report_module

    def lowered_tasks(*_args, **_kwargs):
        _unsigned_zero_minus_one()

    monkeypatch.setattr(fusion_report_module, "lowered_tasks", lowered_tasks)
    assert cli.main(["fusion", *TINY, "--target", LLVM, "--variants", "ours"]) == cli.EXIT_FAILED
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("quantfuse: failed:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "extracting the tuning tasks (variant ours)" in lines[0], lines[0]
    assert "Check failed" in lines[0] and "this is a quantfuse bug" in lines[0], lines[0]


def test_the_printed_table_marks_a_failed_measure_apart_from_a_failed_design_space(capsys):
    from relay_ext.cli.commands import print_fusion_table
    from relay_ext.report.fusion import DESIGN_SPACE, MEASURE, FusionReport, TaskFusion, VariantResult

    measured = VariantResult(1, 2048, ["conv"], 2)
    no_space = VariantResult(0, 0, [], 0, "failed after 9 attempts", failed="ScheduleError: x",
                             failed_in=DESIGN_SPACE)
    no_measure = VariantResult(0, 0, [], 3, "ok", failed="design space 2 of 3: InternalError: "
                               "Check failed: y", failed_in=MEASURE)
    report = FusionReport("cuda", ["ours"], [
        TaskFusion("fused_nn_conv2d_add", "nn.conv2d", 1.0, {"ours": measured}),
        TaskFusion("fused_layout_transform", "layout (injective)", 1.0, {"ours": no_space}),
        TaskFusion("fused_take_multiply", "take (injective)", 2.0, {"ours": no_measure})])
    print_fusion_table(report)
    out = capsys.readouterr().out
    assert re.search(r"fused_nn_conv2d_add\s+nn\.conv2d\s+1 \(2\.0 KiB\)", out), out
    assert re.search(r"fused_layout_transform\s+.*failed \[1\]", out), out
    assert re.search(r"fused_take_multiply\s+.*failed \[2\]", out), out
    assert re.search(r"TOTAL\s+3 tasks\s+1 \(2\.0 KiB\) in 1 tasks; 2 failed", out), out
    assert "[1] TVM could not generate design spaces" in out and "ScheduleError: x" in out, out
    assert ("[2] the fusion measure failed on task fused_take_multiply (this is a quantfuse bug; "
            "rerun with --verbose for the traceback): design space 2 of 3: InternalError: Check "
            "failed: y") in out, out


def test_a_check_failure_the_frontend_wrapped_is_a_bug_and_an_unsupported_op_is_the_users(
        capsys, monkeypatch):
    def wrapped_check_failure(*_args, **_kwargs):
        try:
            _per_channel_scale_type_check()
        except tvm.error.TVMError as error:
            raise ValueError("TVM's ONNX frontend could not import 'net': InternalError") from error

    monkeypatch.setattr(models, "load", wrapped_check_failure)
    assert cli.main(["fusion", *TINY, "--target", LLVM]) == cli.EXIT_FAILED
    err = capsys.readouterr().err
    assert "importing tiny_resnet: Relay op qnn.conv2d" in err and "quantfuse bug" in err, err

    def unsupported(*_args, **_kwargs):
        try:
            raise tvm.error.OpNotImplemented("The following operators are not supported: Foo")
        except tvm.error.TVMError as error:
            raise ValueError("TVM's ONNX frontend could not import 'net': Foo") from error

    monkeypatch.setattr(models, "load", unsupported)
    assert cli.main(["fusion", *TINY, "--target", LLVM]) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "quantfuse: error: TVM's ONNX frontend could not import 'net': Foo" in err, err
    assert "quantfuse bug" not in err
