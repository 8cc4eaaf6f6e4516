"""Each task's rule design measured before the search (``tune``'s ``measure_rule_designs_first``).

    measured = measure_rule_designs(database, contexts, builder, runner, limit)

For each tune context whose workload ``database`` holds no record yet (a resumed tune measures
nothing again), the rule design (:func:`relay_ext.schedules.rule_designs.context_design`: the
schedule quantfuse's rules give without search, from the design spaces the context already
generated) is built by the tune's builder, run by its runner, and committed to ``database`` with
the run time measured, as any search candidate is. The search then starts from it: MetaSchedule's
EvolutionarySearch draws its initial population from the database's best records, so the tune's
best for the task is never slower than that measurement. Failed builds or runs commit nothing
(logged). Only the first ``limit`` tasks without a record, in the order given (the budget's
trials: each measurement is one of them), are considered, so that a budget smaller than the task
count reaches the same tasks as a tune without this step.
"""

from __future__ import annotations

import logging
from typing import List, Sequence

import tvm
from tvm import meta_schedule as ms
from tvm import tir

from relay_ext.schedules.rule_designs import TaskDesign, commit_design, context_design

logger = logging.getLogger(__name__)


def measure_rule_designs(database: ms.Database, contexts: Sequence[ms.TuneContext],
                         builder: ms.builder.Builder, runner: ms.runner.Runner, limit: int) -> int:
    """Measure and commit each context's rule design (see the module doc); returns the number of
    records committed."""
    designs: List[TaskDesign] = []
    considered = 0
    for context in contexts:
        if considered >= limit:
            break
        workload = context.mod
        if database.has_workload(workload) and \
                database.get_top_k(database.commit_workload(workload), 1):
            continue
        considered += 1  # a task the budget reaches, with a design or not
        design = context_design(context)
        if design.has_record:
            designs.append(design)
        else:
            logger.debug("%s: no rule design to measure (%s)", context.task_name, design.design)
    if not designs:
        return 0
    target = contexts[0].target
    modules = []
    for design in designs:
        sch = tir.Schedule(design.workload)
        design.trace.apply_to_schedule(sch, remove_postproc=False)
        modules.append(sch.mod)
    built = builder.build([ms.builder.BuilderInput(mod, target) for mod in modules])
    inputs, ran = [], []
    for design, mod, result in zip(designs, modules, built):
        if result.error_msg:
            logger.warning("%s: its rule design did not build: %s", design.task,
                           str(result.error_msg).strip().splitlines()[-1][:200])
            continue
        inputs.append(ms.runner.RunnerInput(
            result.artifact_path, target.kind.name,
            # the workload's own arguments: a weight-layout rewrite is a preproc block in ``mod``
            ms.arg_info.ArgInfo.from_entry_func(mod, remove_preproc=True)))
        ran.append((design, result.artifact_path))
    futures = runner.run(inputs)
    committed = 0
    remove = tvm.get_global_func("meta_schedule.remove_build_dir", allow_missing=True)
    for (design, artifact), future in zip(ran, futures):
        try:
            result = future.result()
        finally:
            if remove is not None:
                remove(artifact)
        if result.error_msg or not result.run_secs:
            logger.warning("%s: its rule design did not run: %s", design.task,
                           str(result.error_msg).strip().splitlines()[-1][:200]
                           if result.error_msg else "no time")
            continue
        run_secs = [float(s) for s in result.run_secs]
        commit_design(database, design, target, run_secs)
        committed += 1
        logger.info("%s: rule design (%s) measured first: %.4f ms", design.task,
                    design.design, 1e3 * sum(run_secs) / len(run_secs))
    return committed
