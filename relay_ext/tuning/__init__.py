"""Steps 3 and 4 of the data path: Relay module -> tasks -> tuning database -> compiled module.

    tasks = extract_tasks(mod, params, target, variant)          # tasks.py
    database = tune(mod, params, target, work_dir, max_trials)  # flow.py: resumable, budget spread
    lib = compile_model(database, mod, params, target, variant) # build.py (compilable_records.py)
    outputs = run_module(lib, {input_name: array})

Around MetaSchedule: :mod:`.skip_measured_search` (never measure a recorded candidate; the trial
budget), :mod:`.progress` (progress per batch), :mod:`.guards` (Ctrl-C, seeds, runner threads),
:mod:`.rpc_tracker` (measuring on a TVM RPC tracker's devices, surviving servers that die),
:mod:`.record_writes` (write errors while records are appended), :mod:`.work_dir` (the work dir's
files, its lock, what it was tuned for, and its database, repaired and opened).
"""

from relay_ext.lowering.relay_build import copy_module
from relay_ext.schedules.records import compile_model
from relay_ext.measure.run import graph_module, run_module
from relay_ext.tuning.search import read_tuning_summary, recorded_counts_and_best, tune
from relay_ext.tuning.guards import TuningInterrupted, numpy_seeded
from relay_ext.tuning.tasks import TaskReport, tune_contexts
from relay_ext.lowering.tasks import extract_tasks
from relay_ext.workdir.files import SUMMARY_FILE

__all__ = [
    "SUMMARY_FILE",
    "TaskReport",
    "TuningInterrupted",
    "compile_model",
    "copy_module",
    "extract_tasks",
    "graph_module",
    "numpy_seeded",
    "read_tuning_summary",
    "recorded_counts_and_best",
    "run_module",
    "tune",
    "tune_contexts",
]
