"""The builds ``quantfuse bench`` times, made for export and for ``relay_ext.compile``.

    lib = compile_model(database, mod, params, target)       # bench's "TVM tuned" row
    built = tuned_build(database, mod, params, target)       # the same, with the choice made
    lib = untuned_build(mod, params, target)                 # bench's "TVM untuned" row

The tuned build is bench's (:func:`relay_ext.build.whole_model.compile_builds`): each task gets the
fastest of its best buildable record, its no-search schedule (:mod:`relay_ext.schedules.rule_designs`;
a task without a record gets it too) and TVM's default schedule (the never-slower rule,
:mod:`relay_ext.schedules.task_choice`), timed here on a thread whose TVM pool has ``threads``
workers (default: every CPU, bench's default). The choice is a measurement, so
two builds of the same database on a busy machine can differ in which tasks keep their record;
:class:`TunedBuild` says which did.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import List, Mapping, Optional, Union

import tvm
from tvm import meta_schedule as ms

from meta_rules.rule_sets import TargetLike, check_variant

from relay_ext.lowering.targets import check_runs_here, normalize_target
from relay_ext.build.default import build_default
from relay_ext.build.whole_model import compile_builds
from relay_ext.measure.timing import with_tvm_threads
from relay_ext.schedules.task_choice import TaskVsDefault

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class TunedBuild:
    """A tuned build and how it was chosen: the compiled module (graph executor factory), the
    thread count the never-slower rule timed with (None: the rule was not applied) and its
    comparisons (one per task with a record)."""

    lib: tvm.runtime.Module
    threads: Optional[int]
    comparisons: List[TaskVsDefault]

    @property
    def defaults(self) -> List[str]:
        """The tasks compiled with TVM's default schedule because their record ran slower."""
        return [c.task for c in self.comparisons if c.uses_default]

    @property
    def no_search(self) -> List[str]:
        """The tasks compiled with their no-search schedule: no tuned record, or one that ran
        slower here than the no-search schedule."""
        return [c.task for c in self.comparisons if c.uses_no_search]


def default_threads(threads: Optional[int] = None) -> int:
    """``threads``, else bench's default: every CPU of this machine."""
    return int(threads or os.cpu_count() or 1)


def tuned_build(database: ms.Database, mod: tvm.IRModule,
                params: Optional[Mapping[str, tvm.nd.NDArray]], target: TargetLike,
                variant: str = "ours", threads: Optional[int] = None,
                never_slower: bool = True,
                cache_path: Union[str, os.PathLike, None] = None) -> TunedBuild:
    """Bench's tuned build of ``mod`` with ``database``'s records (see the module doc);
    ``never_slower=False``: every workload's fastest buildable record and, for each task
    without one, its no-search schedule, untimed, as ``bench --keep-slower-records`` builds it. ``cache_path``: the never-slower rule's timing cache, as
    bench keeps it in its work dir (``work_dir / NEVER_SLOWER_FILE``): tasks timed there are
    not timed again. Works on a copy of ``mod``."""
    target, variant = normalize_target(target), check_variant(variant)
    if not never_slower:
        built = compile_builds(database, mod, params, target, variant, never_slower=False,
                               no_search_build=False)
        return TunedBuild(built.tuned, None, [])
    check_runs_here(target)  # the rule times code: code this CPU cannot run would kill us
    threads = default_threads(threads)
    built = with_tvm_threads(threads, lambda: compile_builds(
        database, mod, params, target, variant, cache_path=cache_path, no_search_build=False))
    kept = built.tuned_kept
    for comparison in kept.defaults:
        logger.info("TVM's default schedule kept: %s", comparison)
    return TunedBuild(built.tuned, threads, list(kept.comparisons))


def compile_model(database: ms.Database, mod: tvm.IRModule,
                  params: Optional[Mapping[str, tvm.nd.NDArray]], target: TargetLike,
                  variant: str = "ours", never_slower: bool = True,
                  threads: Optional[int] = None) -> tvm.runtime.Module:
    """``relay_ext.compile``: the Relay module built with ``database``'s tuned records, as
    ``quantfuse bench`` builds its tuned row (graph executor factory). ``never_slower`` (the
    default): each task gets the fastest, timed here with ``threads`` threads (default every
    CPU), of its best record, its no-search schedule and TVM's default schedule; a task without
    a record, the faster of the last two. ``never_slower=False``: no timing -- every workload's
    fastest buildable record, and the no-search schedule of every task without one. The
    never-slower rule runs code, so ``target`` must run on this machine (else
    :class:`relay_ext.lowering.targets.TargetNotRunnable`). An empty database gives the no-search
    build."""
    return tuned_build(database, mod, params, target, variant, threads, never_slower).lib


def untuned_build(mod: tvm.IRModule, params: Optional[Mapping[str, tvm.nd.NDArray]],
                  target: TargetLike) -> tvm.runtime.Module:
    """Bench's "TVM untuned" build (:func:`relay_ext.report.accuracy.build_default`: constants
    prefolded, ``relay.build`` at opt level 3 with quantfuse's build options, TOPI's default
    schedules, no database)."""
    return build_default(mod, params, normalize_target(target))
