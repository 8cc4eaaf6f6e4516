"""The tuned and the no-search build of one model, from one extraction and one set of timings.

    built = compile_builds(database, mod, params, target, variant)        # tuned + no-search
    built.tuned, built.no_search          # graph executor factories (tuned None without database)
    built.tuned_kept.comparisons          # per task: tuned record, no-search, default (ms)
    built = compile_builds(None, mod, params, target, variant)            # no-search only

What each build gives a task:

* **tuned** (``database`` given): the faster of the task's best tuned record and its no-search
  schedule (:mod:`relay_ext.schedules.rule_designs`), unless TVM's default schedule of the task runs
  faster than both (the never-slower rule, :mod:`relay_ext.schedules.task_choice`: all three
  timed here, inside the whole model, :mod:`relay_ext.measure.in_model`). A task without a tuned record gets its no-search schedule
  under the same rule. So a tuned build is at least as fast, task by task and within the
  timing's noise, as the no-search build -- even after a tune too short to have found, for some
  task, what the no-search design already has -- and a tune that has not reached every task
  leaves none of them at TVM's default schedule where a better one is known.
* **no-search**: the no-search schedule, unless the default is faster; the timings are those the
  tuned build made (a task whose tuned record *is* its no-search schedule -- ``tune`` measured it
  as its first candidate -- is timed once).

Then the two builds are timed as whole models (:func:`whole_model`, interleaved rounds, kept in
the never-slower cache): where the tuned build runs slower than the no-search build, the
no-search build is compiled as the tuned one. The per-task times do not add up to the model's
(a task's neighbours, the caches, the thread pool between kernels): after a 3-minute tune of int8
ResNet-18 the per-task choices ran 1.03x the no-search build's time. With it, a tune never ends
below the no-search build as a whole, within the noise of 15 paired rounds.

Without the never-slower rule (``never_slower=False``: ``bench --keep-slower-records``, or a
target this machine cannot run), nothing is timed: the tuned build is each workload's fastest
buildable record plus the no-search schedule of each task without one, and the no-search build
is the no-search schedules.

Both start from :func:`relay_ext.lowering.prefold.prefold` (Relay's constant folding with numpy,
same workloads: the tuned records still match) and share one task extraction and one generation
of the no-search designs.
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

from meta_rules.base.tvm_errors import tvm_error_message
from meta_rules.generic.tensor_intrinsics import register_tensor_intrinsics

from relay_ext.lowering.config import pass_config
from relay_ext.lowering.prefold import prefold
from relay_ext.lowering.relay_build import compile_with
from relay_ext.schedules.records import compilable_records
from relay_ext.schedules.task_choice import NeverSlower, TaskVsDefault, commit_copy, never_slower_records
from relay_ext.schedules.rule_designs import NoSearch, no_search_records
from relay_ext.workdir.records import workload_hash

logger = logging.getLogger(__name__)


MODEL_ROUNDS = 15  # interleaved rounds of the whole-model comparison (each the mean of 5 runs)


@dataclasses.dataclass
class WholeModel:
    """The tuned build against the no-search build, each the whole model, timed here in
    interleaved rounds: medians, and the median of the per-round ratios (paired: a change of load
    between rounds cancels)."""

    tuned_ms: float
    no_search_ms: float
    ratio: float  # tuned / no-search

    @property
    def uses_no_search(self) -> bool:
        """The per-task choices ran slower as a whole than the no-search build: it is used."""
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
class Builds:
    """The builds of :func:`compile_builds` and how they were chosen."""

    tuned: Optional[tvm.runtime.Module]  # None without a database
    no_search: Optional[tvm.runtime.Module]  # None when not asked for
    found: NoSearch  # every task's no-search design, or why it has none
    tuned_kept: Optional[NeverSlower] = None  # the tuned build's comparisons (never-slower rule)
    no_search_kept: Optional[NeverSlower] = None  # the no-search build's
    # the model as built: prefolded (params bound, None), for other builds of it (TVM's default)
    mod: Optional[tvm.IRModule] = None
    params: Optional[Mapping[str, tvm.nd.NDArray]] = None
    # the whole-model check of the tuned build against the no-search build (never-slower rule
    # with a database); when it used the no-search build, ``tuned`` is that build and
    # ``tuned_kept`` its choices
    whole_model: Optional[WholeModel] = None


def prefolded(mod: tvm.IRModule, params: Optional[Mapping[str, tvm.nd.NDArray]], target: Target,
              config: Mapping[str, object]):
    """(module, params) with Relay's constant folding done by numpy under pass ``config`` (params
    bound: None); the inputs unchanged where it fails (the build is then slower, not wrong)."""
    try:
        return prefold(mod, params, target, config), None
    except (tvm.TVMError, ValueError) as error:
        logger.warning("constants not prefolded (%s); Relay folds them",
                       tvm_error_message(error, limit=200) if isinstance(error, tvm.TVMError)
                       else error)
        return mod, params


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


def no_search_choice(designs: ms.Database, tuned: NeverSlower) -> NeverSlower:
    """The no-search build's records from the tuned build's timings: each task's no-search record
    less those its default beat (a task whose no-search schedule was not timed -- its timing
    failed -- keeps it). ``designs``: the compilable no-search records."""
    verdicts: Dict[str, TaskVsDefault] = {}
    for comparison in tuned.comparisons:
        alone = comparison.no_search_vs_default
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
    return NeverSlower(kept, comparisons, dict(tuned.task_names))


def compile_builds(database: Optional[ms.Database], mod: tvm.IRModule,
                   params: Optional[Mapping[str, tvm.nd.NDArray]], target: Target, variant: str,
                   never_slower: bool = True,
                   cache_path: Union[str, os.PathLike, None] = None,
                   no_search_build: bool = True) -> Builds:
    """The tuned build of ``mod`` with ``database`` (None: no tuned build) and, with
    ``no_search_build``, its no-search build (see the module doc); ``target`` and ``variant``
    already checked. With ``never_slower`` the tasks are timed on the calling thread (call it
    where TVM's pool has the threads the model will run with; ``target`` must run here);
    ``cache_path`` keeps those timings (:mod:`relay_ext.workdir.timing_cache`)."""
    from relay_ext.lowering.tasks import lowered_tasks

    if database is None and not no_search_build:
        raise ValueError("compile_builds: nothing to build (no database and no no-search build)")
    register_tensor_intrinsics(target)
    mod, params = prefolded(mod, params, target, pass_config(variant))
    tasks = lowered_tasks(mod, params, target, variant)
    found = no_search_records(mod, params, target, variant, tasks)
    designs = compilable_records(found.database).database

    def build(records: ms.Database) -> tvm.runtime.Module:
        return compile_with(records, mod, params, target, variant)

    if not never_slower:
        tuned = (None if database is None
                 else build(_merged(compilable_records(database).database, designs)))
        return Builds(tuned, build(designs) if no_search_build else None, found,
                      mod=mod, params=params)
    if database is None:
        kept = never_slower_records(designs, mod, params, target, variant, tasks,
                                    cache_path=cache_path)
        return Builds(None, build(kept.database), found, None, kept, mod, params)
    tuned_kept = never_slower_records(compilable_records(database).database, mod, params, target,
                                      variant, tasks, cache_path=cache_path, no_search=designs)
    tuned = build(tuned_kept.database)
    no_search_kept = no_search_choice(designs, tuned_kept)
    no_search = build(no_search_kept.database)
    whole = whole_model(tuned, no_search, tuned_kept, no_search_kept, mod, params, target,
                        cache_path)
    logger.info("%s", whole)
    if whole.uses_no_search:
        tuned, tuned_kept = no_search, no_search_kept
    return Builds(tuned, no_search if no_search_build else None, found, tuned_kept,
                  no_search_kept, mod, params, whole)


def _model_key(tuned: NeverSlower, no_search: NeverSlower, target: Target) -> str:
    """The cache key of a whole-model comparison: both builds' records, target and threads."""
    import hashlib  # pylint: disable=import-outside-toplevel

    from relay_ext.workdir.timing_cache import tvm_threads  # pylint: disable=import-outside-toplevel

    def traces(kept: NeverSlower) -> List[str]:
        return sorted(f"{workload_hash(r.workload.mod)}:{r.trace}"
                      for r in kept.database.get_all_tuning_records())

    text = "\n".join(["whole model", *traces(tuned), "no-search", *traces(no_search),
                      str(target), str(tvm_threads())])
    return "model-" + hashlib.sha256(text.encode()).hexdigest()


def whole_model(tuned: tvm.runtime.Module, no_search: tvm.runtime.Module, tuned_kept: NeverSlower,
                no_search_kept: NeverSlower, mod: tvm.IRModule,
                params: Optional[Mapping[str, tvm.nd.NDArray]], target: Target,
                cache_path: Union[str, os.PathLike, None] = None,
                rounds: int = MODEL_ROUNDS) -> WholeModel:
    """The tuned build against the no-search build as whole models (:class:`WholeModel`), on the
    calling thread; kept in the never-slower cache, keyed by both builds' records.

    Why, after choosing task by task: the per-task times do not add up to the model's. After a
    3-minute tune of int8 ResNet-18 (AMD EPYC 2-core VM, 2026-12-02) the per-task choices, timed
    inside the model, still ran 1.03x the no-search build's time in 45 paired rounds."""
    from relay_ext.schedules.task_choice import model_inputs  # pylint: disable=import-outside-toplevel
    from relay_ext.workdir.timing_cache import TimingCache  # pylint: disable=import-outside-toplevel
    from relay_ext.measure.timing import interleaved_rounds, tvm_timer  # pylint: disable=import-outside-toplevel

    cache = TimingCache.open(cache_path) if cache_path is not None else None
    key = _model_key(tuned_kept, no_search_kept, target)
    cached = cache.get(key) if cache is not None else None
    if cached is not None:
        return WholeModel(float(cached["tuned_ms"]), float(cached["no_search_ms"]),
                          float(cached["ratio"]))
    inputs = model_inputs(mod, params)
    timers = {label: tvm_timer(lib, inputs, 5)[1]
              for label, lib in (("tuned", tuned), ("no-search", no_search))}
    samples = interleaved_rounds(timers, rounds, settle_s=None)
    whole = WholeModel(1e3 * statistics.median(samples["tuned"]),
                       1e3 * statistics.median(samples["no-search"]),
                       statistics.median(a / b for a, b in zip(samples["tuned"],
                                                               samples["no-search"])))
    if cache is not None:
        cache.put(key, whole.to_dict())
        cache.save()
    return whole


def compile_no_search(mod: tvm.IRModule, params: Optional[Mapping[str, tvm.nd.NDArray]],
                      target: Target, variant: str, never_slower: bool = True,
                      cache_path: Union[str, os.PathLike, None] = None):
    """The no-search build of ``mod`` (``target``, ``variant`` already checked): with
    ``never_slower`` (timing allowed: ``target`` runs here) each record is timed against TVM's
    default schedule of its task, the faster kept (:func:`compile_builds`; ``cache_path``
    keeps its timings). Returns (the graph executor factory, the :class:`NoSearch`, the
    never-slower result or None)."""
    built = compile_builds(None, mod, params, target, variant, never_slower, cache_path)
    return built.no_search, built.found, built.no_search_kept
