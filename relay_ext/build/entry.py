"""``relay_ext.compile``: a model built for a target with one of the schedules bench's rows show.

    compiled = relay_ext.compile(loaded, target="host", records="work")   # "TVM tuned"
    compiled = relay_ext.compile(loaded, schedule="no-search")            # "TVM no-search"
    compiled = relay_ext.compile(loaded, schedule="default")              # "TVM untuned"
    outputs = relay_ext.run_module(compiled, loaded.inputs)
    compiled.choices          # per task: its record, its rule design, TVM's default (ms)
    compiled.default_tasks    # the tasks built with TVM's default schedule

The schedules:

* ``"tuned"``: the tuned records (``records``: a database, or a work dir that ``quantfuse tune``
  wrote), each task given the fastest, timed here, of its best buildable record, its rule design
  and TVM's default schedule, and the whole model checked against the rule designs' build
  (:mod:`relay_ext.build.whole_model`). No records: the rule designs' build.
* ``"no-search"``: each task's rule design (:mod:`relay_ext.schedules.rule_designs`: the rules'
  design with its decisions computed from the shape and the target, no search), or TVM's default
  schedule where that runs faster.
* ``"default"``: TVM's default schedules (TOPI's), constants prefolded, Relay at opt level 3
  (:mod:`relay_ext.build.default`).

The per-task choice times code, on a thread whose TVM pool has ``threads`` workers (default every
CPU, as bench times): ``target`` must run on this machine
(:class:`relay_ext.lowering.targets.TargetNotRunnable` otherwise), and two builds of the same
records on a busy machine can differ in which tasks keep their record; :class:`Compiled` says
which did. ``choose_per_task=False`` times nothing: each workload's fastest buildable record, and
the rule design of each task without one (``bench --keep-slower-records``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import TYPE_CHECKING, List, Mapping, Optional, Tuple, Union

import tvm
from tvm import meta_schedule as ms
from tvm.relay.backend.executor_factory import ExecutorFactoryModule
from tvm.target import Target

from meta_rules.rule_sets import TargetLike, check_variant

from relay_ext.lowering.targets import check_runs_here, normalize_target
from relay_ext.measure.timing import with_tvm_threads
from relay_ext.schedules.rule_designs import RuleDesigns
from relay_ext.schedules.task_choice import TaskVsDefault
from relay_ext.workdir.files import open_tuned_database
from relay_ext.build.default import _default_build
from relay_ext.build.whole_model import WholeModel, _make_builds

if TYPE_CHECKING:
    from relay_ext.frontend.models import LoadedModel

logger = logging.getLogger(__name__)

SCHEDULES = ("tuned", "no-search", "default")
PathLike = Union[str, os.PathLike]
Params = Optional[Mapping[str, tvm.nd.NDArray]]


@dataclasses.dataclass
class Compiled:
    """A built model and how it was built: ``lib`` is the graph executor factory (what
    ``relay.build`` returns; :func:`relay_ext.run_module` runs it, ``lib.export_library`` writes
    it); ``schedule`` is the one the build has ("no-search" where "tuned" had no records)."""

    lib: ExecutorFactoryModule
    schedule: str
    target: Target
    variant: str = "ours"
    threads: Optional[int] = None  # the threads the per-task choice timed with; None: untimed
    # one comparison per task the per-task choice timed (None: no choice was made)
    choices: Optional[List[TaskVsDefault]] = None
    no_search: Optional["Compiled"] = None  # the rule designs' build, when asked for beside
    whole_model: Optional[WholeModel] = None  # the tuned build checked whole (schedule "tuned")
    designs: Optional[RuleDesigns] = None  # every task's rule design, or why it has none

    @property
    def default_tasks(self) -> List[str]:
        """The tasks built with TVM's default schedule because it ran faster here."""
        return [c.task for c in self.choices or [] if c.uses_default]

    @property
    def rule_design_tasks(self) -> List[str]:
        """The tasks built with their rule design: no tuned record, or one that ran slower here
        than the rule design."""
        return [c.task for c in self.choices or [] if c.uses_no_search]


def compile(model: Union["LoadedModel", tvm.IRModule], params: Params = None,  # pylint: disable=redefined-builtin
            target: TargetLike = "host", *, schedule: str = "tuned",
            records: Union[ms.Database, PathLike, None] = None, variant: str = "ours",
            threads: Optional[int] = None, choose_per_task: bool = True,
            timing_cache: Optional[PathLike] = None, with_no_search: bool = False,
            opt_level: int = 3) -> Compiled:
    """``model`` (a :class:`relay_ext.frontend.models.LoadedModel`, or a Relay module and its
    ``params``) built for ``target`` ("host": this CPU's best target) with ``schedule`` (see the
    module doc). Works on a copy: the caller's module is left as it was.

    ``records`` (schedule "tuned"): an ``ms.Database``, or the path of a work dir (opened with
    :func:`relay_ext.workdir.files.open_tuned_database`); None or empty: the rule designs' build.
    ``threads``: the thread count the per-task choice times with (default every CPU);
    ``choose_per_task=False``: nothing timed (the module doc). ``timing_cache``: a JSON file
    keeping the per-task choice's and the whole-model check's timings
    (:data:`relay_ext.workdir.files.TASK_TIMINGS_FILE` in a work dir, as bench keeps it): what
    was timed there with the same records, target and threads is not timed again.
    ``with_no_search``: also the rule designs' build, from the same extraction and timings
    (``Compiled.no_search``; bench's "TVM no-search" row beside its tuned one). ``opt_level``:
    Relay's optimisation level of the "default" build (below 3: no prefolding, Relay's pipeline
    on the module as given; ``relay.build``'s own default is 2).

    ValueError for an unknown schedule or variant, records with another schedule than "tuned", a
    target TVM cannot parse; :class:`~relay_ext.lowering.targets.TargetNotRunnable` for a target
    this machine cannot run when the per-task choice times it."""
    mod, params = _module_and_params(model, params)
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; one of {', '.join(SCHEDULES)}")
    if records is not None and schedule != "tuned":
        raise ValueError(f"records are built with schedule='tuned', not {schedule!r}")
    if opt_level != 3 and schedule != "default":
        raise ValueError(f"opt_level {opt_level} is for schedule='default'; the {schedule!r} "
                         "build runs at 3")
    target, variant = normalize_target(target), check_variant(variant)
    if schedule == "default":
        return Compiled(_default_build(mod, params, target, opt_level), "default", target, variant)
    database = _open_records(records)
    if choose_per_task:
        check_runs_here(target)  # the choice times code: code this CPU cannot run would kill us
        threads = int(threads or os.cpu_count() or 1)
    else:
        threads = None

    def make():
        return _make_builds(database, mod, params, target, variant, choose_per_task,
                            timing_cache, designs_build=database is None or with_no_search)

    built = with_tvm_threads(threads, make) if threads is not None else make()
    designs_build = None
    if built.rule_designs is not None:
        choice = built.design_choice
        designs_build = Compiled(built.rule_designs, "no-search", target, variant, threads,
                                 None if choice is None else list(choice.comparisons),
                                 designs=built.designs)
    if database is None:
        return designs_build
    choice = built.tuned_choice
    for comparison in choice.defaults if choice is not None else []:
        logger.info("TVM's default schedule kept: %s", comparison)
    return Compiled(built.tuned, "tuned", target, variant, threads,
                    None if choice is None else list(choice.comparisons),
                    designs_build if with_no_search else None, built.whole_model, built.designs)


def _module_and_params(model, params: Params) -> Tuple[tvm.IRModule, Params]:
    """(module, params) of a Relay module and its params, or of a loaded model (its own)."""
    if isinstance(model, tvm.IRModule):
        return model, params
    if not hasattr(model, "mod"):
        raise TypeError(f"compile takes a loaded model or a Relay module, not "
                        f"{type(model).__name__}")
    if params is not None:
        raise ValueError("a loaded model brings its own params; pass params with a Relay module")
    return model.mod, model.params


def _open_records(records: Union[ms.Database, PathLike, None]) -> Optional[ms.Database]:
    """``records`` as a database (a path: the work dir's); None where there is none or it is
    empty."""
    if records is None:
        return None
    database = records if isinstance(records, ms.Database) else open_tuned_database(records)
    return database if len(database) else None
