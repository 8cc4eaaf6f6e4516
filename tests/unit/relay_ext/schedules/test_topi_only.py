"""relay_ext/schedules/topi_only.py: the int16 convs of x86 targets without VNNI keep TOPI's
schedule; tuning, the no-search designs and the fusion report leave them to it."""

import logging

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_ext.report.fusion import fusion_report
from relay_ext.report.fusion_table import fusion_rows
from relay_ext.schedules.rule_designs import task_design
from relay_ext.schedules.topi_only import TOPI_SCHEDULE, topi_only
from relay_ext.tuning import extract_tasks, read_tuning_summary, tune
from relay_ext.tuning.contexts import tune_contexts
from conftest import AVX2, needs_c_compiler
from helpers import VNNI, needs_host_for


def _two_convs() -> tvm.IRModule:
    """A 3x3 conv (64 channels: a Winograd conv without VNNI) and a 1x1 conv (a direct int16
    conv), full-range int8 weights (``vpmaddubsw`` could saturate), each requantized to uint8."""
    generator = np.random.default_rng(0)
    data = relay.var("data", shape=(1, 64, 8, 8), dtype="uint8")
    out = data
    for kernel in (3, 1):
        weights = generator.integers(-128, 128, (64, 64, kernel, kernel)).astype("int8")
        conv = relay.qnn.op.conv2d(out, relay.const(weights), relay.const(3), relay.const(0),
                                   relay.const(0.05), relay.const(0.02),
                                   kernel_size=(kernel, kernel), channels=64,
                                   padding=(kernel // 2, kernel // 2), out_dtype="int32")
        out = relay.qnn.op.requantize(conv, relay.const(0.001), relay.const(0), relay.const(0.05),
                                      relay.const(3), out_dtype="uint8")
    return tvm.IRModule.from_expr(relay.Function([data], out))


@pytest.fixture(scope="module")
def avx2_tasks():
    return extract_tasks(_two_convs(), {}, AVX2)


def test_the_int16_and_winograd_convs_keep_topi_without_vnni_only(avx2_tasks):
    kept = {t.task_name: topi_only(t.dispatched[0]) for t in avx2_tasks}
    reasons = sorted(why for why in kept.values() if why is not None)
    assert [why.split(" tensorized")[0] for why in reasons] == ["int16 Winograd GEMMs", "int16 conv"]
    assert any(why is None for why in kept.values())  # the input's layout copy is MetaSchedule's
    assert all(topi_only(t.dispatched[0]) is None for t in extract_tasks(_two_convs(), {}, VNNI))


def test_tuning_gives_them_no_context_and_the_no_search_build_no_design(avx2_tasks, tmp_path):
    target = tvm.target.Target(AVX2)
    contexts, weights, reports = tune_contexts(avx2_tasks, target, "ours", tmp_path)
    kept = [r for r in reports if r.generation == TOPI_SCHEDULE]
    assert len(kept) == 2 and not any(r.tuned for r in kept)
    assert all("vpmaddwd" in r.failures[0] for r in kept)
    assert len(contexts) == len(weights) == len(avx2_tasks) - 2
    assert {c.task_name for c in contexts}.isdisjoint(r.name for r in kept)
    for task in avx2_tasks:
        if topi_only(task.dispatched[0]) is not None:
            design = task_design(task, target, "ours")
            assert not design.has_record and design.design.startswith(TOPI_SCHEDULE)


def test_the_fusion_report_says_they_keep_topi():
    report = fusion_report(_two_convs(), {}, AVX2, variants=("ours",))
    assert report.totals["ours"]["tasks_topi_schedule"] == 2
    rows = fusion_rows(report)
    assert sum(row[2] == TOPI_SCHEDULE for row in rows[:-1]) == 2
    assert "2 keep TOPI's schedule" in rows[-1][2]


@needs_c_compiler
@needs_host_for(AVX2)
def test_a_tune_spends_no_trial_on_them(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="relay_ext.tuning.search"):
        tune(_two_convs(), {}, AVX2, tmp_path, max_trials=4, num_trials_per_iter=2, seed=0)
    assert "2 keep TOPI's schedule, not tuned" in caplog.text
    summary = read_tuning_summary(tmp_path)
    kept = summary["topi_schedule"]
    assert len(kept) == 2 and set(kept) <= set(summary["left_to_default_schedule"])
    assert summary["design_space_failed"] == []
    tuned = [t for t in summary["tasks"] if t["name"] not in kept]
    assert tuned and all(t["tuned"] for t in tuned)
    assert not any(t["measured"] for t in summary["tasks"] if t["name"] in kept)
