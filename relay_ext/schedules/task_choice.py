"""Never slower than TVM's default, task by task: a task whose best record runs slower than TOPI's
default schedule of the same task is compiled with the default.

    kept = never_slower_records(database, mod, params, target, variant)
    kept.database      # the records, less those slower than their task's default
    kept.comparisons   # one TaskVsDefault per task that had a record: both times, the choice
    lib = ms.relay_integration.compile_relay(kept.database, mod, target, params, ...)

How a task is measured: its Relay function (the fused primitive function that MetaSchedule's
task extraction lowered to the task's TIR) becomes a module of its own, built twice under the
same pass configuration as the model -- once with ``database`` (MetaSchedule applies the task's
record, as in the model's build) and once without it (``relay.build``: TOPI's default schedule,
as in TVM's untuned build) -- and both are timed in the same process and thread, in interleaved
rounds of ``time_evaluator`` on the same random inputs: the median of each. A record is dropped
when its median is more than :data:`MARGIN` above the default's (a margin, so that timing noise
on a busy machine does not flip a tie). Records measured during tuning are not compared with
anything: MetaSchedule's runner timed them in other processes, under other load.

Cost: two builds of one fused function per task with a record (0.2-0.5 s each on the 2-core
host, 2026-12-01) and a few milliseconds of timing.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import tvm
from tvm import meta_schedule as ms
from tvm import relay
from tvm.target import Target

from meta_rules.base.tvm_errors import tvm_error_message

from relay_ext.lowering.config import BUILD_OPTIONS, pass_config
from relay_ext.workdir.timing_cache import TimingCache
from relay_ext.workdir.records import workload_hash
from relay_ext.measure.timing import interleaved_rounds, tvm_timer

logger = logging.getLogger(__name__)

# A record is dropped when its median time is above (1 + MARGIN) x the default's median.
MARGIN = 0.05
ROUNDS = 5
MIN_ROUND_MS = 10  # each time_evaluator round runs at least this long (repeats the kernel)


@dataclasses.dataclass
class TaskVsDefault:
    """One task's best record against TOPI's default schedule, both timed here; with the task's
    no-search schedule beside them when it was timed too (:func:`time_task`'s ``no_search``).

    ``record_ms`` times the database's best record (``record_source`` "tuned"), or, for a task
    the database has no record of, its no-search schedule (``record_source`` "no-search")."""

    task: str
    record_ms: float
    default_ms: float
    weight: int = 1  # how many times the model calls the task's function
    no_search_ms: Optional[float] = None  # the no-search schedule, timed beside a tuned record
    record_source: str = "tuned"

    @property
    def best_ms(self) -> float:
        """The faster of the record and the no-search schedule."""
        return min(self.record_ms, self.no_search_ms if self.no_search_ms is not None
                   else self.record_ms)

    @property
    def uses_default(self) -> bool:
        """The record (and the no-search schedule) is slower than the default (by more than
        :data:`MARGIN`): dropped."""
        return self.best_ms > (1.0 + MARGIN) * self.default_ms

    @property
    def uses_no_search(self) -> bool:
        """The task is compiled with its no-search schedule: it has no tuned record, or its
        no-search schedule ran faster than the tuned record, and the default is not faster."""
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
    def no_search_vs_default(self) -> Optional["TaskVsDefault"]:
        """The no-search schedule alone against the default (the no-search build's choice), None
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
        """A comparison as :meth:`to_dict` wrote it (the never-slower cache)."""
        no_search = data.get("no_search_ms")
        return cls(str(data["task"]), float(data["record_ms"]), float(data["default_ms"]),
                   weight, None if no_search is None else float(no_search),
                   str(data.get("record_source", "tuned")))


@dataclasses.dataclass
class NeverSlower:
    """The database to compile with, and every comparison made to choose it."""

    database: ms.Database
    comparisons: List[TaskVsDefault]
    # workload (structural hash, as skip_measured_search.workload_hash) -> its task's name
    task_names: Dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def defaults(self) -> List[TaskVsDefault]:
        """The tasks compiled with TVM's default schedule because their record was slower."""
        return [c for c in self.comparisons if c.uses_default]

    @property
    def no_search_used(self) -> List[TaskVsDefault]:
        """The tasks compiled with their no-search schedule."""
        return [c for c in self.comparisons if c.uses_no_search]


def task_function_module(task: ms.ExtractedTask) -> tvm.IRModule:
    """The task's fused Relay function as a module of its own (``main``, no Primitive mark, so
    that Relay fuses and lowers it as it does inside the model). Its parameters are renamed
    ``arg0``, ``arg1`` ...: the fused function's own ``p0``, ``p1`` ... are the names Relay's
    build gives the constants it binds, and would collide with them."""
    (_, func), = task.mod.functions.items()
    args = [relay.var(f"arg{i}", type_annotation=param.checked_type)
            for i, param in enumerate(func.params)]
    body = relay.bind(func.body, dict(zip(func.params, args)))
    return tvm.transform.Sequential([relay.transform.InferType()])(
        tvm.IRModule.from_expr(relay.Function(args, body, func.ret_type, func.type_params)))


def weight_params(func: relay.Function) -> List[str]:
    """The parameters of ``func`` that are the weights of its convolutions and dense layers (the
    second argument of an op whose name has ``conv`` or ``dense`` or ``matmul``): constants in
    the model, bound as constants here too, so that MetaSchedule's weight layout rewrite is
    folded at build time as it is in the model's build, not timed as a kernel of its own."""
    params = {param: param.name_hint for param in func.params}
    names: List[str] = []

    def visit(node):
        if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op) and len(node.args) > 1:
            if any(key in node.op.name for key in ("conv", "dense", "matmul")):
                weight = node.args[1]
                if isinstance(weight, relay.Var) and weight in params and \
                        params[weight] not in names:
                    names.append(params[weight])

    relay.analysis.post_order_visit(func.body, visit)
    return names


def random_inputs(func: relay.Function, seed: int = 0) -> Dict[str, np.ndarray]:
    """Random values for ``func``'s parameters (integers in [-128, 127] within their type's range,
    floats in [-1, 1))."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for param in func.params:
        ty = param.checked_type
        shape, dtype = [int(d) for d in ty.shape], str(ty.dtype)
        if dtype.startswith(("int", "uint")):
            info = np.iinfo(dtype)
            low, high = max(int(info.min), -128), min(int(info.max), 127)
            inputs[param.name_hint] = rng.integers(low, high + 1, size=shape).astype(dtype)
        else:
            inputs[param.name_hint] = rng.uniform(-1, 1, size=shape).astype(dtype)
    return inputs


def model_inputs(mod: tvm.IRModule,
                 params: Optional[Mapping[str, tvm.nd.NDArray]]) -> Dict[str, np.ndarray]:
    """Random values (:func:`random_inputs`) for the parameters of ``mod``'s ``main`` that
    ``params`` does not bind: the inputs to time the whole model on."""
    main = tvm.transform.Sequential([relay.transform.InferType()])(mod)["main"]
    bound = set(params or {})
    return {name: value for name, value in random_inputs(main).items() if name not in bound}


def time_task(task: ms.ExtractedTask, database: ms.Database, target: Target, variant: str,
              rounds: int = ROUNDS,
              on_built: Optional[Callable[[tvm.runtime.Module, tvm.runtime.Module], None]] = None,
              no_search: Optional[ms.Database] = None,
              record_source: str = "tuned") -> TaskVsDefault:
    """The task's function built with ``database`` and with TOPI's default schedule (and with
    ``no_search``, the task's no-search record, when given), timed in ``rounds`` interleaved
    rounds here (see the module doc). ``on_built(record_lib, default_lib)``, when given, sees
    both builds first (to read their code, say). ``record_source``: what ``database``'s record
    is ("tuned", or "no-search" for a task without a tuned record)."""
    mod = task_function_module(task)
    values = random_inputs(mod["main"])
    weights = weight_params(mod["main"])
    constants = {name: tvm.nd.array(values[name]) for name in weights}
    inputs = {name: value for name, value in values.items() if name not in weights}
    with tvm.transform.PassContext(opt_level=3, config=BUILD_OPTIONS):
        default_lib = relay.build(mod, target, params=constants)
    libs = {"record": ms.relay_integration.compile_relay(database, mod, target, constants,
                                                         pass_config=pass_config(variant))}
    if no_search is not None:
        libs["no-search"] = ms.relay_integration.compile_relay(
            no_search, mod, target, constants, pass_config=pass_config(variant))
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
    """What one task's comparison times (see :func:`never_slower_records`)."""

    task: ms.ExtractedTask
    record: ms.database.TuningRecord  # the tuned record, or the no-search one standing in
    designed: Optional[ms.database.TuningRecord]  # the no-search record timed beside a tuned one
    source: str  # "tuned" or "no-search": what ``record`` is
    same: bool  # the tuned record is the no-search schedule (tune measured it)
    key: Optional[str]


def measure_in_model(plans: Sequence["_Plan"], database: ms.Database,
                     no_search: Optional[ms.Database], mod: tvm.IRModule,
                     params: Optional[Mapping[str, tvm.nd.NDArray]], target: Target,
                     variant: str) -> Dict[str, TaskVsDefault]:
    """Task name -> its comparison, each schedule timed inside the whole model
    (:mod:`relay_ext.measure.in_model`): the model built with ``database``'s records, with
    the no-search records and with TVM's default schedules, profiled in turns. A task whose
    kernel the profiles do not name is left out (the caller times it alone)."""
    from relay_ext.measure.in_model import profile_in_model  # pylint: disable=import-outside-toplevel

    def build(records: ms.Database) -> tvm.runtime.Module:
        from relay_ext.lowering.relay_build import compile_with  # pylint: disable=import-outside-toplevel

        return compile_with(records, mod, params, target, variant)

    libs = {"default": build(ms.database.MemoryDatabase())}
    if any(plan.source == "tuned" for plan in plans):
        libs["tuned"] = build(database)
    if no_search is not None and any(plan.source == "no-search" or plan.designed is not None
                                     for plan in plans):
        libs["no-search"] = build(no_search)
    times = profile_in_model(libs, model_inputs(mod, params))
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


def never_slower_records(database: ms.Database, mod: tvm.IRModule,
                         params: Optional[Mapping[str, tvm.nd.NDArray]], target: Target,
                         variant: str, tasks: Optional[Sequence[ms.ExtractedTask]] = None,
                         rounds: int = ROUNDS,
                         cache_path: Union[str, os.PathLike, None] = None,
                         no_search: Optional[ms.Database] = None,
                         in_model: bool = True) -> NeverSlower:
    """``database`` (one record per workload, as
    :func:`relay_ext.schedules.records.compilable_records` chooses) less the records
    that run slower than TOPI's default schedule of their task (``target`` and ``variant``
    already checked). ``tasks``: the model's extracted tasks, when the caller has them.
    ``cache_path``: a JSON file (:data:`relay_ext.workdir.files.NEVER_SLOWER_FILE` in a work
    dir) keeping each comparison by record, target and threads
    (:mod:`relay_ext.workdir.timing_cache`): a task found there is not timed again.

    ``no_search``: the tasks' no-search records (:func:`relay_ext.schedules.rule_designs.no_search_records`,
    compilable): a task without a record in ``database`` gets its no-search record (timed
    against the default like any record), and a task with one has its no-search record timed
    beside it, the faster kept -- so that a tuned build is never slower, task by task, than the
    no-search build (a few trials of a short tune can find less than the no-search design).

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
        designed = best_record(no_search, workload) if no_search is not None else None
        if record is None and designed is None:
            continue
        same = False
        if record is None:  # the no-search record stands in for the missing tuned one
            source, record, designed = "no-search", designed, None
        else:
            source = "tuned"
            same = designed is not None and str(designed.trace) == str(record.trace)
            if same:
                designed = None  # tune measured the no-search design: it is the record
        key = (TimingCache.key(workload, record, target, designed)
               if cache is not None else None)
        plans.append(_Plan(task, record, designed, source, same, key))
    measured: Dict[str, TaskVsDefault] = {}
    pending = [plan for plan in plans if cache is None or cache.get(plan.key) is None]
    if pending and in_model:
        try:
            measured = measure_in_model(pending, database, no_search, mod, params, target,
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
                                       no_search=_only(designed) if designed is not None else None,
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
        return NeverSlower(database, comparisons, task_names)
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
    return NeverSlower(kept, comparisons, task_names)


def compile_never_slower(database: ms.Database, mod: tvm.IRModule,
                         params: Optional[Mapping[str, tvm.nd.NDArray]], target: Target,
                         variant: str, rounds: int = ROUNDS,
                         tasks: Optional[Sequence[ms.ExtractedTask]] = None,
                         cache_path: Union[str, os.PathLike, None] = None):
    """:func:`relay_ext.lowering.relay_build.build_with_records` under the never-slower rule: each
    workload's fastest buildable record, less those slower than their task's default schedule
    (timed on the calling thread: call it where TVM's thread pool has the threads the model
    will run with); ``tasks``: the model's extracted tasks, when the caller has them;
    ``cache_path``: where the timings are kept (see :func:`never_slower_records`). Returns
    (the graph executor factory, the :class:`NeverSlower`)."""
    from meta_rules.generic.tensor_intrinsics import register_tensor_intrinsics  # pylint: disable=C0415

    from relay_ext.lowering.relay_build import compile_with  # pylint: disable=import-outside-toplevel
    from relay_ext.schedules.records import compilable_records  # pylint: disable=C0415

    register_tensor_intrinsics(target)
    chosen = compilable_records(database)
    kept = never_slower_records(chosen.database, mod, params, target, variant, tasks, rounds,
                                cache_path)
    return compile_with(kept.database, mod, params, target, variant), kept
