"""The search: a Relay module's tasks tuned into MetaSchedule's database in a work dir.

    database = tune(mod, params, target, work_dir, max_trials=200)   # or TuneOptions(...)
    summary = read_tuning_summary(work_dir)

By role: :mod:`.search` (``tune``: the steps of one tune), :mod:`.options` (``TuneOptions``),
:mod:`.budget` (trials and wall-clock time shared by the tasks), :mod:`.contexts` (a tune context
per task, design spaces checked first), :mod:`.skip_measured_search` (never measure a recorded
candidate again; tasks whose design space is used up end), :mod:`.strategy` (the sized
evolutionary search), :mod:`.rule_designs_first` (each task's rule design measured before the
search, opt-in), :mod:`.progress` (a report per measured batch), :mod:`.guards` (Ctrl-C, numpy's
seed, the runner's thread count). The work dir's files are :mod:`relay_ext.workdir`'s; measuring
on RPC devices is :mod:`relay_ext.measure.rpc_tracker`'s.
"""

from relay_ext.lowering.tasks import extract_tasks
from relay_ext.tuning.contexts import TaskReport, tune_contexts
from relay_ext.tuning.guards import TuningInterrupted, numpy_seeded
from relay_ext.tuning.options import TuneOptions
from relay_ext.tuning.search import (measured_line, read_tuning_summary,
                                     recorded_counts_and_best, tune)
from relay_ext.workdir.files import SUMMARY_FILE

__all__ = [
    "SUMMARY_FILE",
    "TaskReport",
    "TuneOptions",
    "TuningInterrupted",
    "extract_tasks",
    "measured_line",
    "numpy_seeded",
    "read_tuning_summary",
    "recorded_counts_and_best",
    "tune",
    "tune_contexts",
]
