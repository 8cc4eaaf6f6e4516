"""TVM failures past the user's input (issue 32): the fusion report goes on when its measure fails
on one task, naming the task and TVM's reason; a TVM check failure in import or task extraction is
one line that names the op or step and says "this is a quantfuse bug", the trace with --verbose."""

import json
import re

import numpy as np
import pytest
import tvm
from tvm import relay

from meta_rules import fusion
from meta_rules.tvm_errors import QuantfuseBug, bug_line, is_tvm_failure, tvm_error_op
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
    args = ["fusion", *TINY, "--target", LLVM, "--variants", "ours"]
    assert cli.main([*args, "--out", str(markdown)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("fused_")]
    failed = [line for line in rows if "failed [1]" in line]
    assert len(failed) == 1, out
    failed_task = failed[0].split()[0].removesuffix("...")  # the table cuts long names
    measured_rows = [line for line in rows if re.search(r"\s\d+ \(\d", line)]
    assert len(measured_rows) == len(rows) - 1 >= 3, out  # every other task was measured
    assert re.search(r"TOTAL\s+\d+ tasks.*; 1 failed", out), out
    note = [line for line in out.splitlines() if line.startswith("[1] ")]
    assert len(note) == 1 and "the fusion measure failed on task " + failed_task in note[0], out
    assert "this is a quantfuse bug" in note[0] and "Check failed" in note[0], note
    assert "Traceback" not in out
    text = markdown.read_text()
    assert "| failed [1] |" in text and "- [1] the fusion measure failed on task fused_" in text, text

    calls.clear()
    assert cli.main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["totals"]["ours"]["tasks_failed"] == 1
    first = report["tasks"][0]["variants"]["ours"]
    assert report["tasks"][0]["name"].startswith(failed_task)
    assert first["failed_in"] == "measure" and "design space 1 of" in first["failed"]
    assert "Check failed" in first["failed"]
    assert all(t["variants"]["ours"]["failed"] is None for t in report["tasks"][1:])


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
