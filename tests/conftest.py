import os
import pickle
import shutil
from pathlib import Path

import pytest
from filelock import FileLock

from helpers import cannot_run_here, needs_host_for

ROOT = Path(__file__).resolve().parents[1]  # the repository

os.environ.setdefault("TOPHUB_LOCATION", "NONE")

# The target of the shared tuned work dir: AVX2 + FMA, which every machine this project runs on
# (AVX-512 VNNI Intel, AVX2-only AMD) executes; a host without them skips what uses it.
AVX2 = "llvm -mcpu=core-avx2 -num-cores 2"
TINY_32 = ["--model", "tiny_resnet", "--image-size", "32"]
TUNED_TRIALS = 16
A100 = "nvidia/nvidia-a100"
FUSION_VARIANTS = ["legacy", "upstream", "ours"]


def _c_compiler_problem():
    from relay_ext.lowering.toolchain import c_compiler_problem

    return c_compiler_problem()


# For tests that link compiled code (a tune measuring here, an export, Inductor): without a C
# compiler they skip, saying what is missing, instead of failing deep inside TVM.
C_COMPILER_PROBLEM = _c_compiler_problem()
needs_c_compiler = pytest.mark.skipif(C_COMPILER_PROBLEM is not None,
                                      reason=f"needs a C compiler: {C_COMPILER_PROBLEM}")

# For tests that run code built for AVX2 (the shared tuned work dir's target).
needs_avx2_host = needs_host_for(AVX2)


# The heaviest test files first (seconds of one worker on 2 cores). `make test`
# runs the suite on two pytest-xdist workers, one file per worker at a time, in this order
# (--dist loadfile --no-loadscope-reorder): the long files run side by side from the start and
# the many short ones fill the end, instead of one long file running alone at the end.
SLOW_FILES_FIRST = [
    "test_cli_torchscript_model_file.py",  # ~140 s: FX-quantized net, fusion + tune + bench
    "test_cli_pt2e_model_files.py",  # PT2E: 2 nets fusion + tune + bench, a fusion comparison (~410 s, 2 shared cores at load ~5)
    "test_pt2e_classic_cnns.py",  # seven PT2E families: export and import (slow; the rest: make test-families)
    "test_search.py",  # ~110 s: builds the shared tuned work dir, tunes two more variants
    "test_tune_resume.py",  # ~115 s
    "test_cli_onnx_model_files.py",  # ~110 s
    "test_cli_demo.py",  # ~100 s: the demo in a child process
    "test_vnni_intrinsics.py",  # ~90 s: child processes
    "test_cli.py",  # ~70 s
    "test_models.py",  # ~60 s
    "test_cli_bench.py",  # ~50 s (+ bench --json under the per-task choice)
    "test_deploy.py",  # ~55 s at load 10: an untuned export, an RPC tracker, a C++ build
    "test_task_choice.py",  # ~30 s quiet (81 s on the shared host, load 10): extraction, builds
    "test_budget.py",  # two CLI tunes of tiny_resnet under --minutes, one small tune
    "test_vnni_conv_schedule.py",  # ~40 s on a busy 2-core host: a child process builds 4 convs
    "test_cli_rpc.py",  # ~30 s
    # fault tests: a tune in a child process, a tune under a file size limit
    "test_work_dir_lock.py",  # ~80 s on 2 busy cores
    "test_record_writes.py",  # ~65 s on 2 busy cores
]


# Whole flows that take a minute or more each on 2 cores (a model file through fusion, tune and
# bench; a tune killed, interrupted, timed or resumed; the demo): marked "slow". `make test` runs
# everything else in under 12 minutes; `make test-slow` runs these; CI (.ci/run) runs both.
# (file, test function[, parameter id prefix]); seconds on 2 cores, 2 workers.
SLOW_TESTS = [
    # a tune of tiny_resnet, and the no-search build of a model per target against TVM's
    # default build (4.5 min for the three on 2 busy cores)
    ("test_rule_designs.py", "test_tune_measures_each_tasks_no_search_schedule_first"),
    ("test_rule_designs.py", "test_the_no_search_build_of_a_model_computes_what_tvms_default_build_does"),
    ("test_cli_torchscript_model_file.py", "test_fx_quantized_file_through_fusion_tune_and_bench"),  # 269 s
    ("test_cli_pt2e_model_files.py", "test_fusion_tune_and_bench"),  # 213 s + 86 s
    ("test_cli_pt2e_model_files.py", "test_fusion_report_matches_the_torchscript_import"),
    # seven classic CNN families as PT2E programs, fusion on the A100 + tune + bench each
    # (the seven exports + imports take over 500 s on 2 busy cores)
    ("test_pt2e_classic_cnns.py", "test_import_makes_every_conv_and_linear_integer"),
    ("test_pt2e_cat.py", "test_the_build_is_within_a_step_of_the_program"),  # ~180 s: 4 small builds
    ("test_search.py", "test_tuned_model_matches_pytorch"),  # the `tuned` fixture: 2 more tunes, 280 s
    ("test_search.py", "test_every_tuned_workload_is_found_at_compile_time"),
    ("test_search.py", "test_a_converter_mismatch_loses_the_tuned_records"),
    ("test_search.py", "test_records_and_summary"),
    ("test_cli_demo.py", "test_demo_on_an_avx2_host_runs_the_whole_job_and_keeps_tvm_logs_out_of_stderr"),  # 134 s
    ("test_tune_resume.py", "test_resume_measures_new_candidates_and_least_tuned_tasks_first"),  # 117 s
    ("test_tune_resume.py", "test_ctrl_c_keeps_a_loadable_database_that_the_same_command_resumes"),  # 101 s
    ("test_docs.py", "test_readme_python_block_runs_as_written"),  # 116 s; 197 s at load 10 with export + load
    ("test_vnni_intrinsics.py", "test_tuned_int8_model_tensorizes_with_vnni_and_matches_pytorch"),  # 96 s
    ("test_cli_onnx_model_files.py", "test_fusion_tune_and_bench"),  # 85 s + 54 s
    ("test_budget.py", "test_minutes_stops_cleanly_exits_0_and_the_same_command_resumes"),  # 77 s
    ("test_budget.py", "test_an_exhausted_task_ends_and_its_trials_go_to_the_other_task"),
    ("test_models.py", "test_untuned_tvm_matches_torch_within_measured_steps", "resnet18"),  # 50 s
    ("test_cli_rpc.py", "test_tune_through_rpc_tracker_records_real_run_times"),
    ("test_cli_rpc.py", "test_a_tune_whose_only_server_dies_stops_with_one_line_keeping_its_records"),
    ("test_cli_rpc.py", "test_two_ctrl_c_end_a_tune_stuck_on_a_dead_server_keeping_its_records"),
    ("test_work_dir_lock.py", "test_a_second_tune_is_refused_while_the_first_finishes_with_its_database_whole"),
    ("test_record_writes.py", "test_a_failed_record_write_stops_the_tune_with_one_line_and_keeps_the_database_whole"),
    ("test_cli_bench.py", "test_bench_json_is_one_object_and_never_slower_than_the_default"),  # ~100 s
    # two benches of a tuned work dir and an export: 133 s with the shared tune, load 3
    ("test_bench_no_search.py", "test_a_second_bench_of_a_work_dir_times_no_task_again"),
    # ResNet-18 at 32x32 extracted and built for VNNI: 108 s under the parallel suite
    ("test_in_model.py", "test_every_kernel_is_the_task_whose_function_it_runs_even_where_the_names_differ"),
    ("test_task_choice.py", "test_a_record_slower_than_the_default_is_dropped"),
    ("test_task_choice.py", "test_the_model_compiled_under_the_rule_is_the_default_build"),
    ("test_vnni_conv_schedule.py", "test_vnni_conv_has_independent_accumulators_and_exact_outputs"),
    # 124 s at load 10 (73 s quiet): the tuned export, bench's same build and relay_ext.compile's
    ("test_deploy.py", "test_tuned_export_is_benchs_tuned_build_run_by_tvms_runtime_alone"),
    # ORT-quantized EfficientNet-style QDQ net, A100 fusion 52 s + 64 s, host tune and
    # compile 146 s (2 busy cores)
    ("test_cli_third_party_qdq.py", "test_fusion_on_the_a100_measures_every_task"),
    ("test_cli_third_party_qdq.py", "test_a_small_tune_on_the_host_matches_onnx_runtime"),
    # 38-53 s each in CI on a slow VM (make test ran 13 min there): a model's builds and runs
    ("test_rule_designs.py", "test_a_model_prefold_cannot_fold_still_builds"),
    ("test_prefold.py", "test_a_prefolded_model_has_the_same_tasks_and_outputs"),
    ("test_blocked_layout.py", "test_the_depthwise_block_leaves_outputs_unchanged"),
    ("test_in_model.py", "test_a_kernel_of_another_model_matches_no_task"),
    ("test_candidate_timing.py", "test_tune_cold_keeps_every_flushed_run_and_will_not_resume_warm"),
]


def _is_slow(item) -> bool:
    name = getattr(item, "originalname", item.name)
    param = item.name[len(name) + 1:-1] if item.name != name else ""
    return any(item.path.name == entry[0] and name == entry[1]
               and (len(entry) < 3 or param.startswith(entry[2])) for entry in SLOW_TESTS)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order within a file kept
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def tiny():
    """tiny_resnet at 16x16, loaded once for every test that only reads it."""
    from relay_ext.frontend import models

    return models.load("tiny_resnet", image_size=16)


@pytest.fixture(scope="session")
def tiny32():
    """tiny_resnet at 32x32: the model of the shared tuned work dir."""
    from relay_ext.frontend import models

    return models.load("tiny_resnet", image_size=32)


@pytest.fixture(scope="session")
def a100_fusion(tmp_path_factory):
    """The fusion report of tiny_resnet 16x16 on nvidia-a100 under all three variants, computed
    once for the tests that check it (the CLI's and the tuning flow's)."""

    def compute(_root):
        from relay_ext.frontend import models
        from relay_ext.report.fusion import fusion_report

        tiny = models.load("tiny_resnet", image_size=16)
        return fusion_report(tiny.mod, tiny.params, A100, FUSION_VARIANTS)

    return computed_once(tmp_path_factory, "a100_fusion", compute)


@pytest.fixture(scope="session")
def tiny_tuned_once(tmp_path_factory):
    """tiny_resnet 32x32 tuned once through ``quantfuse tune`` (16 trials over its tasks, seed
    0, a small search; its int16 convs tuned too: ``helpers.every_task_designed``). Returns (work_dir, what the command printed); tests take a copy
    (:func:`tiny_tuned`), never this directory."""
    if cannot_run_here(AVX2):
        pytest.skip(cannot_run_here(AVX2))
    if C_COMPILER_PROBLEM is not None:
        pytest.skip(f"needs a C compiler: {C_COMPILER_PROBLEM}")
    return computed_once(tmp_path_factory, "tiny_tuned", _tune_tiny32)


@pytest.fixture
def tiny_tuned(tiny_tuned_once, tmp_path):
    """A private copy of the shared tuned work dir for the tests that need one (bench, the
    budget spread, the closing line): what one test writes there (bench's report, an ONNX
    export) is not what another finds. Returns (work_dir, what ``tune`` printed)."""
    work_dir, printed = tiny_tuned_once
    copy = tmp_path / "tiny_tuned"
    shutil.copytree(work_dir, copy)
    return copy, printed


def _tune_tiny32(root: Path):
    from relay_ext import cli
    from relay_ext.cli import commands as cli_commands
    from helpers import every_task_designed, small_search

    work_dir = root / "tiny_tuned"
    shutil.rmtree(work_dir, ignore_errors=True)  # a half-made one from a failed attempt
    with pytest.MonkeyPatch.context() as patch, _captured_stdout() as out, every_task_designed():
        patch.setattr(cli_commands, "search_strategy", small_search)
        code = cli.main(["tune", *TINY_32, "--target", AVX2, "--work-dir", str(work_dir),
                         "--trials", str(TUNED_TRIALS), "--seed", "0"])
    assert code == 0, out.getvalue()
    return work_dir, out.getvalue()


def computed_once(tmp_path_factory, name: str, compute):
    """``compute(directory)`` run once per test session, also when pytest-xdist splits the session
    over worker processes: the first worker to get here computes and pickles the result in the
    directory all workers share; the others wait on the lock and read it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # each worker's base temp dir is a child of the session's
    path = root / f"{name}.pickle"
    with FileLock(str(path) + ".lock"):
        if path.exists():
            return pickle.loads(path.read_bytes())
        value = compute(root)
        path.write_bytes(pickle.dumps(value))
        return value


def _captured_stdout():
    import contextlib
    import io

    return contextlib.redirect_stdout(io.StringIO())
