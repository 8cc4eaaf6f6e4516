"""The per-task choice: each task of a model is compiled with the fastest, timed here, of its best
tuned record, its rule design (:mod:`.rule_designs`; bench and ``--json`` call it the no-search
schedule) and TOPI's default schedule of the task.

    chosen = choose_per_task(database, mod, params, target, variant, designs=designs)
    chosen.database      # the records to build with: each task's choice (none: TVM's default)
    chosen.comparisons   # one TaskVsDefault per task compared: the times, the choice

How a task is measured, by default: the model is built three times (with the tuned records, with
the rule designs, with TVM's default schedules) and profiled in turns
(:mod:`relay_ext.measure.in_model`), each task's kernel timed inside the whole model. A task the
profiles miss is timed alone: its Relay function (the fused primitive function that
MetaSchedule's task extraction lowered to the task's TIR) becomes a module of its own
(:mod:`.task_inputs`), built with each schedule under the same pass configuration as the model,
and timed in the same process and thread, in interleaved rounds of ``time_evaluator`` on the same
random inputs: the median of each. A record loses to the default when its median is more than
:data:`MARGIN` above the default's (a margin, so that timing noise on a busy machine does not flip
a tie). Records measured during tuning are not compared with anything: MetaSchedule's runner
timed them in other processes, under other load.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

import tvm
from tvm import meta_schedule as ms
from tvm import relay
from tvm.target import Target

from meta_rules.base.tvm_errors import tvm_error_message

from relay_ext.lowering.config import BUILD_OPTIONS, pass_config
from relay_ext.measure.timing import interleaved_rounds, tvm_timer
from relay_ext.schedules.task_inputs import model_inputs, random_inputs, task_function_module, weight_params
from relay_ext.workdir.records import workload_hash
from relay_ext.workdir.timing_cache import TimingCache

logger = logging.getLogger(__name__)

# A record loses to the default when its median time is above (1 + MARGIN) x the default's median.
MARGIN = 0.05
ROUNDS = 5
MIN_ROUND_MS = 10  # each time_evaluator round runs at least this long (repeats the kernel)


@dataclasses.dataclass
class TaskVsDefault:
    """One task's best record against TOPI's default schedule, both timed here; with the task's
    rule design beside them when it was timed too (:func:`time_task`'s ``design``).

    ``record_ms`` times the database's best record (``record_source`` "tuned"), or, for a task
    the database has no record of, its rule design (``record_source`` "no-search"). The fields
    and the strings are those of bench's ``--json`` (``tasks_vs_default``), where a rule design
    is the no-search schedule."""

    task: str
    record_ms: float
    default_ms: float
    weight: int = 1  # how many times the model calls the task's function
    no_search_ms: Optional[float] = None  # the rule design, timed beside a tuned record
    record_source: str = "tuned"

    @property
    def best_ms(self) -> float:
        """The faster of the record and the rule design."""
        return min(self.record_ms, self.no_search_ms if self.no_search_ms is not None
                   else self.record_ms)

    @property
    def uses_default(self) -> bool:
        """The record (and the rule design) is slower than the default (by more than
        :data:`MARGIN`): the task gets TVM's default schedule."""
        return self.best_ms > (1.0 + MARGIN) * self.default_ms

    @property
    def uses_no_search(self) -> bool:
        """The task is compiled with its rule design: it has no tuned record, or its rule
        design ran faster than the tuned record, and the default is not faster."""
        if self.uses_default:
            return False
        return self.record_source == "no-search" or (
            self.no_search_ms is not None and self.no_search_ms < self.record_ms)

    @property
    def choice(self) -> str:
        """What the task is compiled with: "default", "no-search" or "tuned"."""
        if self.uses_default:
            return "default"
        return "no-search" if self.uses_no_search else "tuned"

    @property
    def design_vs_default(self) -> Optional["TaskVsDefault"]:
        """The rule design alone against the default (the rule designs' build's choice), None
        where it was not timed."""
        if self.record_source == "no-search":
            return self
        if self.no_search_ms is None:
            return None
        return TaskVsDefault(self.task, self.no_search_ms, self.default_ms, self.weight,
                             record_source="no-search")

    def __str__(self) -> str:
        verdict = {"default": "TVM's default schedule used", "tuned": "record kept",
                   "no-search": "no-search schedule used"}[self.choice]
        first = "no-search schedule" if self.record_source == "no-search" else "best record"
        extra = ("" if self.no_search_ms is None
                 else f", no-search schedule {self.no_search_ms:.4f} ms")
        return (f"{self.task}: {first} {self.record_ms:.4f} ms{extra}, TVM's default "
                f"{self.default_ms:.4f} ms ({verdict})")

    def to_dict(self) -> Dict[str, object]:
        return {"task": self.task, "record_ms": self.record_ms, "default_ms": self.default_ms,
                "weight": self.weight, "uses_default": self.uses_default,
                "no_search_ms": self.no_search_ms, "record_source": self.record_source,
                "choice": self.choice}

    @classmethod
    def from_dict(cls, data: Mapping[str, object], weight: int) -> "TaskVsDefault":
        """A comparison as :meth:`to_dict` wrote it (the timing cache)."""
        design = data.get("no_search_ms")
        return cls(str(data["task"]), float(data["record_ms"]), float(data["default_ms"]),
                   weight, None if design is None else float(design),
                   str(data.get("record_source", "tuned")))


@dataclasses.dataclass
class TaskChoice:
    """The records to compile with (each task's choice; a task without one gets TVM's default
    schedule), and every comparison made to choose them."""

    database: ms.Database
    comparisons: List[TaskVsDefault]
    # workload (structural hash, relay_ext.workdir.records.workload_hash) -> its task's name
    task_names: Dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def defaults(self) -> List[TaskVsDefault]:
        """The tasks compiled with TVM's default schedule because it ran faster."""
        return [c for c in self.comparisons if c.uses_default]

    @property
    def rule_designs_used(self) -> List[TaskVsDefault]:
        """The tasks compiled with their rule design."""
        return [c for c in self.comparisons if c.uses_no_search]


def time_task(task: ms.ExtractedTask, database: ms.Database, target: Target, variant: str,
              rounds: int = ROUNDS,
              on_built: Optional[Callable[[tvm.runtime.Module, tvm.runtime.Module], None]] = None,
              design: Optional[ms.Database] = None,
              record_source: str = "tuned") -> TaskVsDefault:
    """The task's function built with ``database`` and with TOPI's default schedule (and with
    ``design``, the task's rule design record, when given), timed in ``rounds`` interleaved
    rounds here (see the module doc). ``on_built(record_lib, default_lib)``, when given, sees
    both builds first (to read their code, say). ``record_source``: what ``database``'s record
    is ("tuned", or "no-search" for a task's rule design standing in for a tuned record)."""
    mod = task_function_module(task)
    values = random_inputs(mod["main"])
    weights = weight_params(mod["main"])
    constants = {name: tvm.nd.array(values[name]) for name in weights}
    inputs = {name: value for name, value in values.items() if name not in weights}
    with tvm.transform.PassContext(opt_level=3, config=BUILD_OPTIONS):
        default_lib = relay.build(mod, target, params=constants)
    libs = {"record": ms.relay_integration.compile_relay(database, mod, target, constants,
                                                         pass_config=pass_config(variant))}
    if design is not None:
        libs["no-search"] = ms.relay_integration.compile_relay(
            design, mod, target, constants, pass_config=pass_config(variant))
    if on_built is not None:
        on_built(libs["record"], default_lib)
    timers = {name: tvm_timer(lib, inputs, 1, min_repeat_ms=MIN_ROUND_MS)[1]
              for name, lib in (*libs.items(), ("default", default_lib))}
    samples = interleaved_rounds(timers, rounds, settle_s=None)
    median_ms = {name: 1e3 * statistics.median(values) for name, values in samples.items()}
    return TaskVsDefault(task.task_name, median_ms["record"], median_ms["default"],
                         int(task.weight), median_ms.get("no-search"), record_source)


def has_record(database: ms.Database, workload: tvm.IRModule) -> bool:
    """``database`` holds a record of ``workload`` (without committing a workload it lacks)."""
    return best_record(database, workload) is not None


def best_record(database: ms.Database,
                workload: tvm.IRModule) -> Optional[ms.database.TuningRecord]:
    """``database``'s best record of ``workload`` (None, and no workload committed, if none)."""
    if not database.has_workload(workload):
        return None
    top = database.get_top_k(database.commit_workload(workload), 1)
    return top[0] if top else None


def commit_copy(database: ms.Database, record: ms.database.TuningRecord) -> None:
    """``record`` (of another database) committed to ``database``, with its workload."""
    database.commit_tuning_record(ms.database.TuningRecord(
        record.trace, database.commit_workload(record.workload.mod), record.run_secs,
        record.target, record.args_info))


def _only(record: ms.database.TuningRecord) -> ms.Database:
    """A database holding ``record`` alone."""
    database = ms.database.MemoryDatabase()
    commit_copy(database, record)
    return database


@dataclasses.dataclass
class _Plan:
    """What one task's comparison times (see :func:`choose_per_task`)."""

    task: ms.ExtractedTask
    record: ms.database.TuningRecord  # the tuned record, or the rule design standing in
    designed: Optional[ms.database.TuningRecord]  # the rule design timed beside a tuned record
    source: str  # "tuned" or "no-search" (a rule design): what ``record`` is
    same: bool  # the tuned record is the rule design (tune measured it)
    key: Optional[str]


def measure_in_model(plans: Sequence["_Plan"], database: ms.Database,
                     designs: Optional[ms.Database], mod: tvm.IRModule,
                     params: Optional[Mapping[str, tvm.nd.NDArray]], target: Target,
                     variant: str) -> Dict[str, TaskVsDefault]:
    """Task name -> its comparison, each schedule timed inside the whole model
    (:mod:`relay_ext.measure.in_model`): the model built with ``database``'s records, with
    the rule designs and with TVM's default schedules, profiled in turns. A task whose
    kernel the profiles do not name is left out (the caller times it alone)."""
    from relay_ext.measure.in_model import profile_in_model  # pylint: disable=import-outside-toplevel

    def build(records: ms.Database) -> tvm.runtime.Module:
        from relay_ext.lowering.relay_build import compile_with  # pylint: disable=import-outside-toplevel

        return compile_with(records, mod, params, target, variant)

    libs = {"default": build(ms.database.MemoryDatabase())}
    if any(plan.source == "tuned" for plan in plans):
        libs["tuned"] = build(database)
    if designs is not None and any(plan.source == "no-search" or plan.designed is not None
                                   for plan in plans):
        libs["no-search"] = build(designs)
    times = profile_in_model(libs, model_inputs(mod, params), [plan.task for plan in plans])
    found: Dict[str, TaskVsDefault] = {}
    for plan in plans:
        name = str(plan.task.task_name)
        mine = times[plan.source].get(name)
        default = times["default"].get(name)
        beside = times["no-search"].get(name) if plan.designed is not None else None
        if mine is None or default is None or (plan.designed is not None and beside is None):
            logger.info("%s: not among the model's profiled kernels; timed alone", name)
            continue
        found[name] = TaskVsDefault(name, mine, default, int(plan.task.weight), beside,
                                    plan.source)
    return found


def choose_per_task(database: ms.Database, mod: tvm.IRModule,
                    params: Optional[Mapping[str, tvm.nd.NDArray]], target: Target,
                    variant: str, tasks: Optional[Sequence[ms.ExtractedTask]] = None,
                    rounds: int = ROUNDS,
                    cache_path: Union[str, os.PathLike, None] = None,
                    designs: Optional[ms.Database] = None,
                    in_model: bool = True) -> TaskChoice:
    """``database`` (one record per workload, as
    :func:`relay_ext.schedules.records.compilable_records` chooses) less the records
    that run slower than TOPI's default schedule of their task (``target`` and ``variant``
    already checked; the timing runs on the calling thread, so call it where TVM's thread pool
    has the threads the model will run with). ``tasks``: the model's extracted tasks, when the
    caller has them. ``cache_path``: a JSON file (:data:`relay_ext.workdir.files.TASK_TIMINGS_FILE`
    in a work dir) keeping each comparison by record, target and threads
    (:mod:`relay_ext.workdir.timing_cache`): a task found there is not timed again.

    ``designs``: the tasks' rule designs
    (:func:`relay_ext.schedules.rule_designs.rule_design_records`, compilable): a task without a
    record in ``database`` gets its rule design (timed against the default like any record), and
    a task with one has its rule design timed beside it, the faster kept -- so that a tuned build
    is never slower, task by task, than the rule designs' build (a few trials of a short tune can
    find less than the rule design).

    ``in_model`` (the default): the schedules are timed inside the whole model
    (:func:`measure_in_model`: three builds of the model, profiled in turns), where a task's
    weights come cold, not each task alone, warm (:func:`time_task`, ``rounds`` rounds: with
    ``in_model=False``, and for a task the profiles miss or where the model builds fail)."""
    from relay_ext.lowering.tasks import lowered_tasks

    if tasks is None:
        tasks = lowered_tasks(mod, params, target, variant)
    cache = TimingCache.open(cache_path) if cache_path is not None else None
    comparisons: List[TaskVsDefault] = []
    dropped, replaced = set(), {}
    task_names = {workload_hash(task.dispatched[0]): str(task.task_name) for task in tasks}
    plans: List[_Plan] = []
    for task in tasks:
        workload = task.dispatched[0]
        record = best_record(database, workload)
        designed = best_record(designs, workload) if designs is not None else None
        if record is None and designed is None:
            continue
        same = False
        if record is None:  # the rule design stands in for the missing tuned record
            source, record, designed = "no-search", designed, None
        else:
            source = "tuned"
            same = designed is not None and str(designed.trace) == str(record.trace)
            if same:
                designed = None  # tune measured the rule design: it is the record
        key = (TimingCache.key(workload, record, target, designed)
               if cache is not None else None)
        plans.append(_Plan(task, record, designed, source, same, key))
    measured: Dict[str, TaskVsDefault] = {}
    pending = [plan for plan in plans if cache is None or cache.get(plan.key) is None]
    if pending and in_model:
        try:
            measured = measure_in_model(pending, database, designs, mod, params, target,
                                        variant)
        except Exception as error:  # pylint: disable=broad-except - each task alone instead
            logger.warning("could not time the tasks inside the model (%s); timing each alone",
                           tvm_error_message(error, limit=200)
                           if isinstance(error, tvm.TVMError) else error)
    for plan in plans:
        task, record, designed, source = plan.task, plan.record, plan.designed, plan.source
        workload = task.dispatched[0]
        cached = cache.get(plan.key) if cache is not None else None
        if cached is not None:
            comparison = TaskVsDefault.from_dict(cached, int(task.weight))
        elif str(task.task_name) in measured:
            comparison = measured[str(task.task_name)]
        else:
            try:
                comparison = time_task(task, database if source == "tuned" else _only(record),
                                       target, variant, rounds,
                                       design=_only(designed) if designed is not None else None,
                                       record_source=source)
            except Exception as error:  # pylint: disable=broad-except - the record is kept
                logger.warning("could not time %s against TVM's default schedule (%s); keeping "
                               "its record", task.task_name,
                               tvm_error_message(error, limit=200))
                if source == "no-search":
                    replaced[workload_hash(workload)] = record
                continue
        if cached is None and cache is not None:
            cache.put(plan.key, comparison.to_dict())
        if source == "tuned" and plan.same:
            comparison.no_search_ms = comparison.record_ms  # one schedule, timed once
        comparisons.append(comparison)
        logger.info("%s", comparison)
        if comparison.uses_default:
            dropped.add(workload_hash(workload))
        elif comparison.uses_no_search:
            replaced[workload_hash(workload)] = record if source == "no-search" else designed
    if cache is not None:
        cache.save()
    if not dropped and not replaced:
        return TaskChoice(database, comparisons, task_names)
    kept = ms.database.MemoryDatabase()
    for record in database.get_all_tuning_records():
        if workload_hash(record.workload.mod) in dropped | set(replaced):
            continue
        commit_copy(kept, record)
    for record in replaced.values():
        commit_copy(kept, record)
    for comparison in comparisons:
        if comparison.uses_default:
            logger.info("compiling with TVM's default schedule: %s", comparison)
    return TaskChoice(kept, comparisons, task_names)
