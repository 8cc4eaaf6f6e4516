"""How tune times candidates: warm (MetaSchedule's default) or cold (caches flushed before each
run)."""

import argparse
import json

import pytest
import tvm
from tvm import meta_schedule as ms
from tvm.meta_schedule.utils import derived_object

from relay_ext import cli
from relay_ext.cli import commands as cli_commands
from relay_ext.tuning import TuneOptions
from relay_ext.measure.candidate_timing import CANDIDATE_TIMINGS
from relay_ext.workdir.files import RECORD_FILE, RUN_FILE, SUMMARY_FILE, RunDescription
from conftest import needs_c_compiler
from helpers import small_search, one_error_line

LLVM = "llvm -num-cores 2"
TINY = ["--model", "tiny_resnet", "--image-size", "16"]


def test_a_cpu_target_is_timed_cold_by_default_and_a_gpu_warm():
    options = TuneOptions(max_trials=4)
    assert options.timing(tvm.target.Target(LLVM)) == "cold"
    assert options.timing(tvm.target.Target("cuda")) == "warm"  # the flush is a CPU's
    cold = options.make_runner(tvm.target.Target(LLVM))
    warm = TuneOptions(max_trials=4, candidate_timing="warm").make_runner(tvm.target.Target(LLVM))
    assert isinstance(warm, ms.runner.LocalRunner) and isinstance(cold, ms.runner.LocalRunner)
    assert not warm.evaluator_config.enable_cpu_cache_flush
    assert warm.evaluator_config.min_repeat_ms == 100  # MetaSchedule's own default
    assert cold.evaluator_config.enable_cpu_cache_flush
    assert (cold.evaluator_config.number, cold.evaluator_config.min_repeat_ms) == (1, 0)
    assert cold.evaluator_config.repeat == CANDIDATE_TIMINGS["cold"].repeat > 1


def test_a_given_runner_gets_the_cold_evaluator_or_a_clear_error():
    given = ms.runner.LocalRunner()
    assert TuneOptions(max_trials=4, runner=given).make_runner(tvm.target.Target(LLVM)) is given
    assert given.evaluator_config.enable_cpu_cache_flush

    @derived_object
    class NoEvaluator(ms.runner.PyRunner):
        def run(self, runner_inputs):
            return []

    with pytest.raises(ValueError, match="NoEvaluator has none"):
        TuneOptions(max_trials=4, runner=NoEvaluator(), candidate_timing="cold")
    with pytest.raises(ValueError, match="candidate_timing must be one of warm, cold"):
        TuneOptions(max_trials=4, candidate_timing="lukewarm")


def test_the_cli_takes_the_flag_else_the_work_dirs_timing_else_the_targets(tmp_path):
    cpu, gpu = tvm.target.Target(LLVM), tvm.target.Target("cuda")
    args = argparse.Namespace(candidate_timing=None)
    assert cli_commands.candidate_timing(args, cpu, tmp_path) == "cold"
    assert cli_commands.candidate_timing(args, gpu, tmp_path) == "warm"
    RunDescription("tiny_resnet", None, 16, "NCHW", cpu, "ours", "cold").write(tmp_path)
    assert cli_commands.candidate_timing(args, cpu, tmp_path) == "cold"
    # a work dir tuned before the option existed was tuned warm, and goes on so
    run = json.loads((tmp_path / RUN_FILE).read_text())
    del run["candidate_timing"]
    (tmp_path / RUN_FILE).write_text(json.dumps(run))
    assert cli_commands.candidate_timing(args, cpu, tmp_path) == "warm"
    args.candidate_timing = "cold"
    assert cli_commands.candidate_timing(args, cpu, tmp_path) == "cold"


@needs_c_compiler
def test_tune_cold_keeps_every_flushed_run_and_will_not_resume_warm(tmp_path, capsys,
                                                                     monkeypatch):
    monkeypatch.setattr(cli_commands, "search_strategy", small_search)
    work_dir = tmp_path / "work"
    args = ["tune", *TINY, "--target", LLVM, "--work-dir", str(work_dir), "--seed", "0"]
    assert cli.main([*args, "--trials", "2"]) == 0  # a CPU target: cold by default
    records = [json.loads(line) for line in (work_dir / RECORD_FILE).read_text().splitlines()]
    assert records
    # a record's run_secs: one entry per repeat, each one run after a flush (warm: one entry)
    assert {len(record[1][1]) for record in records} == {CANDIDATE_TIMINGS["cold"].repeat}
    assert json.loads((work_dir / RUN_FILE).read_text())["candidate_timing"] == "cold"
    assert json.loads((work_dir / SUMMARY_FILE).read_text())["candidate_timing"] == "cold"
    capsys.readouterr()

    # resuming with the other timing would mix costs measured two ways in one database
    assert cli.main([*args, "--trials", "4", "--candidate-timing", "warm"]) == 2
    one_error_line(capsys, "candidate_timing 'cold' (now 'warm')")
