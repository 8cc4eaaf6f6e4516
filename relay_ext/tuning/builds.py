"""The tuned and the no-search build of one model, from one extraction and one set of timings.

    built = compile_builds(database, mod, params, target, variant)        # tuned + no-search
    built.tuned, built.no_search          # graph executor factories (tuned None without database)
    built.tuned_kept.comparisons          # per task: tuned record, no-search, default (ms)
    built = compile_builds(None, mod, params, target, variant)            # no-search only

What each build gives a task:

* **tuned** (``database`` given): the faster of the task's best tuned record and its no-search
  schedule (:mod:`relay_ext.tuning.no_search`), unless TVM's default schedule of the task runs
  faster than both (the never-slower rule, :mod:`relay_ext.tuning.never_slower`: all three
  timed here, in interleaved rounds). A task without a tuned record gets its no-search schedule
  under the same rule. So a tuned build is at least as fast, task by task and within the
  timing's noise, as the no-search build -- even after a tune too short to have found, for some
  task, what the no-search design already has -- and a tune that has not reached every task
  leaves none of them at TVM's default schedule where a better one is known.
* **no-search**: the no-search schedule, unless the default is faster; the timings are those the
  tuned build made (a task whose tuned record *is* its no-search schedule -- ``tune`` measured it
  as its first candidate -- is timed once).

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
from typing import Dict, Mapping, Optional, Union

import tvm
from tvm import meta_schedule as ms
from tvm.target import Target

from meta_rules.base.tvm_errors import tvm_error_message
from meta_rules.generic.tensor_intrinsics import register_tensor_intrinsics

from ..lowering.config import BUILD_OPTIONS, pass_config
from ..lowering.prefold import prefold
from .build import copy_module
from .compilable_records import compilable_records
from .never_slower import NeverSlower, TaskVsDefault, commit_copy, never_slower_records
from .no_search import NoSearch, no_search_records
from .skip_measured_search import workload_hash

logger = logging.getLogger(__name__)


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


def build_default(mod: tvm.IRModule, params: Optional[Mapping[str, tvm.nd.NDArray]],
                  target: Target) -> tvm.runtime.Module:
    """TVM's untuned build (TOPI's default schedules, opt level 3, quantfuse's build options),
    its constants folded by numpy first under the same options (ResNet-50: Relay's folding
    compiled ~1000 constant expressions with LLVM)."""
    from ..report.accuracy import build_untuned  # pylint: disable=import-outside-toplevel

    mod, params = prefolded(mod, params, target, BUILD_OPTIONS)
    with tvm.transform.PassContext(opt_level=3, config=BUILD_OPTIONS):
        return build_untuned(mod, params, target)


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
    ``cache_path`` keeps those timings (:mod:`relay_ext.tuning.never_slower_cache`)."""
    from .tasks import lowered_tasks  # pylint: disable=import-outside-toplevel

    if database is None and not no_search_build:
        raise ValueError("compile_builds: nothing to build (no database and no no-search build)")
    register_tensor_intrinsics(target)
    mod, params = prefolded(mod, params, target, pass_config(variant))
    tasks = lowered_tasks(mod, params, target, variant)
    found = no_search_records(mod, params, target, variant, tasks)
    designs = compilable_records(found.database).database

    def build(records: ms.Database) -> tvm.runtime.Module:
        return ms.relay_integration.compile_relay(records, copy_module(mod), target, params,
                                                  pass_config=pass_config(variant))

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
    if not no_search_build:
        return Builds(tuned, None, found, tuned_kept, mod=mod, params=params)
    no_search_kept = no_search_choice(designs, tuned_kept)
    return Builds(tuned, build(no_search_kept.database), found, tuned_kept, no_search_kept, mod,
                  params)
