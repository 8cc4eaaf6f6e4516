"""The tuned and the rule designs' build of one model, from one extraction and one set of timings:
steps of ``relay_ext.compile`` (schedules "tuned" and "no-search").

What each build gives a task:

* **tuned** (records given): the faster of the task's best tuned record and its rule design
  (:mod:`relay_ext.schedules.rule_designs`), unless TVM's default schedule of the task runs
  faster than both (the per-task choice, :mod:`relay_ext.schedules.task_choice`: all three timed
  here, inside the whole model, :mod:`relay_ext.measure.in_model`). A task without a tuned record
  gets its rule design under the same choice. So a tuned build is at least as fast, task by task
  and within the timing's noise, as the rule designs' build -- even after a tune too short to
  have found, for some task, what the rule design already has -- and a tune that has not
  reached every task leaves none of them at TVM's default schedule where a better one is known.
* **rule designs** (bench's "TVM no-search" row): each task's rule design, unless the default is
  faster; the timings are those the tuned build made (a task whose tuned record *is* its rule
  design -- ``tune`` measured it as its first candidate -- is timed once).

Then the two builds are timed as whole models (:func:`_time_whole_models`, interleaved rounds,
kept in the timing cache): where the tuned build runs slower than the rule designs' build, the
latter is compiled as the tuned one. The per-task times do not add up to the model's (a task's
neighbours, the caches, the thread pool between kernels); with this check a tune never ends below
the rule designs' build as a whole, within the noise of :data:`MODEL_ROUNDS` paired rounds.

Without the per-task choice (``choose_per_task=False``: ``bench --keep-slower-records``), nothing
is timed: the tuned build is each workload's fastest buildable record plus the rule design of each
task without one, and the rule designs' build is the rule designs.

Both start from :func:`relay_ext.lowering.prefold.prefold` (Relay's constant folding with numpy,
same workloads: the tuned records still match) and share one task extraction and one generation
of the rule designs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import statistics
from typing import Dict, List, Mapping, Optional, Union

import tvm
from tvm import meta_schedule as ms
from tvm.target import Target

from meta_rules.generic.tensor_intrinsics import register_tensor_intrinsics

from relay_ext.lowering.config import pass_config
from relay_ext.lowering.prefold import prefold_or_keep
from relay_ext.lowering.relay_build import compile_with
from relay_ext.schedules.records import compilable_records
from relay_ext.schedules.rule_designs import RuleDesigns, rule_design_records
from relay_ext.schedules.task_choice import TaskChoice, TaskVsDefault, choose_per_task, commit_copy
from relay_ext.workdir.records import workload_hash

logger = logging.getLogger(__name__)


MODEL_ROUNDS = 15  # interleaved rounds of the whole-model comparison (each the mean of 5 runs)


@dataclasses.dataclass
class WholeModel:
    """The tuned build against the rule designs' build, each the whole model, timed here in
    interleaved rounds: medians, and the median of the per-round ratios (paired: a change of load
    between rounds cancels). Fields and strings as bench prints them and ``--json`` writes them
    (``whole_model``), where the rule designs' build is the no-search build."""

    tuned_ms: float
    no_search_ms: float
    ratio: float  # tuned / rule designs

    @property
    def uses_no_search(self) -> bool:
        """The per-task choices ran slower as a whole than the rule designs' build: it is used."""
        return self.ratio > 1.0

    def __str__(self) -> str:
        verdict = ("the no-search build is compiled as the tuned one" if self.uses_no_search
                   else "the tuned build kept")
        return (f"whole model: tuned build {self.tuned_ms:.3f} ms, no-search build "
                f"{self.no_search_ms:.3f} ms (tuned / no-search {self.ratio:.3f}, paired "
                f"median of {MODEL_ROUNDS} rounds): {verdict}")

    def to_dict(self) -> Dict[str, object]:
        return {"tuned_ms": self.tuned_ms, "no_search_ms": self.no_search_ms,
                "ratio": self.ratio, "uses_no_search": self.uses_no_search}


@dataclasses.dataclass
class _Builds:
    """The builds of :func:`_make_builds` and how they were chosen."""

    tuned: Optional[tvm.runtime.Module]  # None without records
    rule_designs: Optional[tvm.runtime.Module]  # None when not asked for
    designs: RuleDesigns  # every task's rule design, or why it has none
    tuned_choice: Optional[TaskChoice] = None  # the tuned build's comparisons (per-task choice)
    design_choice: Optional[TaskChoice] = None  # the rule designs' build's
    # the whole-model check of the tuned build against the rule designs' build (per-task choice
    # with records); when it used the rule designs' build, ``tuned`` is that build and
    # ``tuned_choice`` its choices
    whole_model: Optional[WholeModel] = None


def _merged(records: ms.Database, fill: ms.Database) -> ms.Database:
    """``records`` plus ``fill``'s records of the workloads ``records`` has none of."""
    merged = ms.database.MemoryDatabase()
    present = set()
    for source in (records, fill):
        for record in source.get_all_tuning_records():
            key = workload_hash(record.workload.mod)
            if source is fill and key in present:
                continue
            if source is records:
                present.add(key)
            commit_copy(merged, record)
    return merged


def _design_choice(designs: ms.Database, tuned: TaskChoice) -> TaskChoice:
    """The rule designs' build's records from the tuned build's timings: each task's rule design
    less those its default beat (a task whose rule design was not timed -- its timing failed --
    keeps it). ``designs``: the compilable rule design records."""
    verdicts: Dict[str, TaskVsDefault] = {}
    for comparison in tuned.comparisons:
        alone = comparison.design_vs_default
        if alone is not None:
            verdicts[comparison.task] = alone
    kept = ms.database.MemoryDatabase()
    comparisons = []
    for record in designs.get_all_tuning_records():
        verdict = verdicts.get(tuned.task_names.get(workload_hash(record.workload.mod), ""))
        if verdict is not None:
            comparisons.append(verdict)
            if verdict.uses_default:
                continue
        commit_copy(kept, record)
    return TaskChoice(kept, comparisons, dict(tuned.task_names))


def _make_builds(database: Optional[ms.Database], mod: tvm.IRModule,
                 params: Optional[Mapping[str, tvm.nd.NDArray]], target: Target, variant: str,
                 choose: bool = True, cache_path: Union[str, os.PathLike, None] = None,
                 designs_build: bool = True) -> _Builds:
    """The tuned build of ``mod`` with ``database`` (None: no tuned build) and, with
    ``designs_build``, the rule designs' build (see the module doc); ``target`` and ``variant``
    already checked. With ``choose`` the tasks are timed on the calling thread (call it where
    TVM's pool has the threads the model will run with; ``target`` must run here);
    ``cache_path`` keeps those timings (:mod:`relay_ext.workdir.timing_cache`)."""
    from relay_ext.lowering.tasks import lowered_tasks  # pylint: disable=import-outside-toplevel

    if database is None and not designs_build:
        raise ValueError("nothing to build: no records and no rule designs' build")
    register_tensor_intrinsics(target)
    mod, params = prefold_or_keep(mod, params, target, pass_config(variant))
    tasks = lowered_tasks(mod, params, target, variant)
    found = rule_design_records(mod, params, target, variant, tasks)
    designs = compilable_records(found.database).database

    def build(records: ms.Database) -> tvm.runtime.Module:
        return compile_with(records, mod, params, target, variant)

    if not choose:
        tuned = (None if database is None
                 else build(_merged(compilable_records(database).database, designs)))
        return _Builds(tuned, build(designs) if designs_build else None, found)
    if database is None:
        chosen = choose_per_task(designs, mod, params, target, variant, tasks,
                                 cache_path=cache_path)
        return _Builds(None, build(chosen.database), found, None, chosen)
    tuned_choice = choose_per_task(compilable_records(database).database, mod, params, target,
                                   variant, tasks, cache_path=cache_path, designs=designs)
    tuned = build(tuned_choice.database)
    design_choice = _design_choice(designs, tuned_choice)
    rule_designs = build(design_choice.database)
    whole = _time_whole_models(tuned, rule_designs, tuned_choice, design_choice, mod, params,
                               target, cache_path)
    logger.info("%s", whole)
    if whole.uses_no_search:
        tuned, tuned_choice = rule_designs, design_choice
    return _Builds(tuned, rule_designs if designs_build else None, found, tuned_choice,
                   design_choice, whole)


def _model_key(tuned: TaskChoice, designs: TaskChoice, target: Target) -> str:
    """The cache key of a whole-model comparison: both builds' records, target and threads."""
    import hashlib  # pylint: disable=import-outside-toplevel

    from relay_ext.workdir.timing_cache import tvm_threads  # pylint: disable=import-outside-toplevel

    def traces(chosen: TaskChoice) -> List[str]:
        return sorted(f"{workload_hash(r.workload.mod)}:{r.trace}"
                      for r in chosen.database.get_all_tuning_records())

    text = "\n".join(["whole model", *traces(tuned), "no-search", *traces(designs),
                      str(target), str(tvm_threads())])
    return "model-" + hashlib.sha256(text.encode()).hexdigest()


def _time_whole_models(tuned: tvm.runtime.Module, rule_designs: tvm.runtime.Module,
                       tuned_choice: TaskChoice, design_choice: TaskChoice, mod: tvm.IRModule,
                       params: Optional[Mapping[str, tvm.nd.NDArray]], target: Target,
                       cache_path: Union[str, os.PathLike, None] = None,
                       rounds: int = MODEL_ROUNDS) -> WholeModel:
    """The tuned build against the rule designs' build as whole models (:class:`WholeModel`), on
    the calling thread; kept in the timing cache, keyed by both builds' records. Why, after
    choosing task by task: the per-task times do not add up to the model's (a short tune's
    per-task choices can run slower as a whole than the rule designs' build)."""
    from relay_ext.schedules.task_inputs import model_inputs  # pylint: disable=import-outside-toplevel
    from relay_ext.workdir.timing_cache import TimingCache  # pylint: disable=import-outside-toplevel
    from relay_ext.measure.timing import interleaved_rounds, tvm_timer  # pylint: disable=import-outside-toplevel

    cache = TimingCache.open(cache_path) if cache_path is not None else None
    key = _model_key(tuned_choice, design_choice, target)
    cached = cache.get(key) if cache is not None else None
    if cached is not None:
        return WholeModel(float(cached["tuned_ms"]), float(cached["no_search_ms"]),
                          float(cached["ratio"]))
    inputs = model_inputs(mod, params)
    timers = {label: tvm_timer(lib, inputs, 5)[1]
              for label, lib in (("tuned", tuned), ("no-search", rule_designs))}
    samples = interleaved_rounds(timers, rounds, settle_s=None)
    whole = WholeModel(1e3 * statistics.median(samples["tuned"]),
                       1e3 * statistics.median(samples["no-search"]),
                       statistics.median(a / b for a, b in zip(samples["tuned"],
                                                               samples["no-search"])))
    if cache is not None:
        cache.put(key, whole.to_dict())
        cache.save()
    return whole
