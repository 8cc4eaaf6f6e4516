"""The rule designs: each task's schedule from quantfuse's rules, chosen without measuring (bench's
"TVM no-search" row builds with them).

    found = rule_design_records(mod, params, target, variant)   # RuleDesigns: database + designs
    compiled = relay_ext.compile(mod, params, target, schedule="no-search")   # the model built

For each extracted task, MetaSchedule's design spaces are generated with ``variant``'s rules (as
``tune`` generates them: :func:`meta_rules.rule_set`), one design is picked, and every sampling
decision in its trace is replaced by a choice computed from the loop extents and the target:

* **Design**: the first that tensorizes, AMX's :class:`meta_rules.cpu.amx_conv.AMXConv` blocks
  before a ``meta_schedule.auto_tensorize`` mark (VNNI's ``dot_16x4_vnni``: a strided conv has
  both, and AMX ran ResNet-50's strided convs 1.3-4.5x faster, docs/cpu.md), and, among those, one
  whose output is written back inside the tile (MultiLevelTiling's consumer fusion or write cache,
  a ``reverse_compute_at``), at the deepest level it offers (the last such design). A design
  without write-back accumulates in the whole int32 output in memory (a load and a store around
  every ``vpdpbusd``) and requantizes it in a second pass.
  The AMX designs and the model input's copy (``quantfuse_padded_layout``) sample nothing:
  their schedule is theirs as the rule wrote it. The layout copies before AMX convs
  (``quantfuse_layout_transform``) keep TVM's default here (measured, see :data:`_LAYOUT_RULES`).
* **SamplePerfectTile** (MultiLevelTiling's ``SSRSRS``: four factors per spatial loop, two per
  reduction loop): a register tile in the innermost spatial factors, TOPI's shape of it -- where
  each intrinsic call owns an accumulator register (VNNI), the innermost loop with an extent
  above 1 (a conv's output columns) gets the largest divisor up to the register count less 4
  (28 with AVX-512's 32 registers, 12 with AVX2's 16) and below
  :data:`relay_ext.schedules.register_tiles.STACK_BYTES` of accumulators (15 zmm vectors: TVM
  makes a smaller buffer a stack alloca, which LLVM's SROA turns into registers; a bigger one is
  TVM workspace, allocated by a runtime call in the parallel loop: 28 accumulators for every
  conv ran ResNet-50 1.79x the time, docs/BENCHMARKS.md), shared by the columns, rows and
  output-channel blocks
  (:func:`relay_ext.schedules.register_tiles.register_tile`: ResNet's convs get 7 columns x 2
  channel blocks, 14 accumulators, which load 9 times per 14 ``vpdpbusd`` where 14 columns x 1
  block load 15 times, and give a 7-column conv 14 independent chains instead of 7), the other
  loops 1; where the loop is vectorized instead (no intrinsic), one vector of int32 lanes on the
  innermost loop and up to half the registers on the next (``register_tiles.register_caps``).
  The middle factors are 1 and the rest
  outermost, where ``RewriteParallelVectorizeUnroll`` makes them parallel, except, in a
  tensorized conv whose output pixels outnumber its output channels times its taps (its input
  outweighs its weights: ResNet's 56x56 and 28x28 1x1 convs, its 3x3 ones at 56x56, the stem),
  the output-channel chunks, one level in: the parallel loops are then the rows, each thread
  reads the band of the input its share of the op before wrote, as the AMX convs' rows-first
  split does (``no-search`` builds for ``cascadelake``: ResNet-50 0.949x, MobileNetV2 0.963x,
  ResNet-18 0.987x the time, docs/BENCHMARKS.md). Every reduction loop
  runs whole inside the register tile's loop (TOPI's order: taps, input-channel blocks and their
  channels around the tile), up to the instruction's ``max_innermost_factor``, except, in a
  tensorized 3x3 (or larger) conv, the input-channel blocks, which run outside the taps (TOPI's
  order ``ic_outer, kh, kw, ic_inner``); the write-back level then holds one register tile: its
  accumulators stay in registers through the reduction (14 zmm for ResNet's 56/28/14 columns),
  independent, so consecutive ``vpdpbusd`` do not wait on each other. docs/cpu.md gives the
  reason for each choice, docs/BENCHMARKS.md what each alternative measured.
* **SampleCategorical** (the unroll step): 64 where it is a candidate, else the likeliest.
* **SampleComputeLocation**: a padding block (a padded copy of a conv's input,
  :func:`meta_rules.analysis.padding_blocks.is_padding_block`) inlined (``-2``): the conv reads
  its input through the bound check, which MobileNetV2's depthwise convs ran faster than with
  a padded copy of the input, whole or a band of rows at a time (docs/BENCHMARKS.md); every
  other block at the root (``-1``), always valid (so is a padding block where inlining is not:
  TVM takes the root then).

The trace with those decisions is replayed on the task's workload and ``variant``'s postprocs are
applied (as MetaSchedule does to a search candidate), and the result is compiled once (a record
nobody measures must build); a design that fails any of these is passed over,
and a task none of whose designs survives, or that holds no tiled block, tensorized block or
input copy, has no record: Relay builds it with TVM's default schedule. So does a task whose only
fast schedule is TOPI's (:mod:`relay_ext.schedules.topi_only`), with no design generated.

Records carry :data:`UNMEASURED_RUN_SECS` (valid, slower than any real measurement) until
something times them; ``relay_ext.compile`` then makes the per-task choice
(:mod:`relay_ext.schedules.task_choice`): each record timed here against TVM's default schedule of
its task, the faster kept.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import tvm
from tvm import meta_schedule as ms
from tvm import tir
from tvm.target import Target

import meta_rules
from meta_rules.analysis.padding_blocks import padding_block_names
from meta_rules.base.custom_rules import SCHEDULE_RULE_KEY
from meta_rules.base.tvm_errors import tvm_error_message
from meta_rules.cpu import padded_layout_rule
from meta_rules.generic.resilient_space_generator import DesignSpaceGenerationError, ResilientPostOrderApply
from meta_rules.generic.tensor_intrinsics import register_tensor_intrinsics
from relay_ext.lowering.config import BUILD_OPTIONS
from relay_ext.schedules.register_tiles import register_caps, tile_decisions
from relay_ext.schedules.topi_only import TOPI_SCHEDULE, topi_only



logger = logging.getLogger(__name__)

# The run time a rule design record carries until it is measured: valid (below progress's
# FAILED_RUN_SECS), above any real measurement, so a measured record of the task ranks first.
UNMEASURED_RUN_SECS = 1e6
UNROLL_STEP = 64
# SampleComputeLocation's decisions: TVM's marks for "inline into the consumer" and "the root"
INLINE, ROOT = -2, -1
# Designs the rules decide: a tiled block, a tensorized block (marks in the trace), the model
# input's copy handed to the padded layout rule (its annotation in the workload; a rule's own
# steps leave no mark). The copies that quantfuse_layout_transform takes get no record here: its
# design in every such task changed the no-search build by +1.8% (ResNet-18), +1.1% (MobileNetV2)
# and -1.5% (ResNet-50) against TOPI's default (docs/BENCHMARKS.md); the search still tries it.
_TRACE_MARKS = ("meta_schedule.tiling_structure", "meta_schedule.auto_tensorize")
_LAYOUT_RULES = (padded_layout_rule.RULE_NAME,)


@dataclasses.dataclass
class TaskDesign:
    """One task's rule design, or why it has none (then TVM's default schedule builds it)."""

    task: str
    workload: tvm.IRModule
    trace: Optional[tir.schedule.Trace]
    design: str  # "vnni tensorized", "amx", "tiled", "layout rule", or why there is no record

    @property
    def has_record(self) -> bool:
        return self.trace is not None


@dataclasses.dataclass
class RuleDesigns:
    """The rule designs' records (one per task that has a design), every task's design and the
    extracted tasks they are the designs of."""

    database: ms.Database
    designs: List[TaskDesign]
    tasks: List[ms.ExtractedTask]


def deterministic_trace(trace: tir.schedule.Trace, target: Target,
                        workload: tvm.IRModule) -> tir.schedule.Trace:
    """``trace`` with its sampling decisions replaced by the module doc's choices. A perfect
    tile's loop extent is the product of the factors sampled for it; the SamplePerfectTile
    instructions of one block (only Splits between them) are decided together. ``workload``
    (the task's): where its padding blocks are."""
    tensorized = any(inst.kind.name == "Annotate" and str(inst.attrs[0]) ==
                     "meta_schedule.auto_tensorize" for inst in trace.insts
                     if len(inst.attrs) > 0)
    caps = register_caps(target, tensorized)
    old = dict(trace.decisions)
    decisions: Dict = {}
    group: List[Tuple[tir.schedule.Instruction, int, int, int]] = []
    padding = {name for func in workload.functions.values() if isinstance(func, tir.PrimFunc)
               for name in padding_block_names(func)}
    block_names: Dict[tir.schedule.BlockRV, str] = {}

    def flush() -> None:
        extents = [(extent, n, max_inner) for _, extent, n, max_inner in group]
        for (inst, *_), value in zip(group, tile_decisions(
                extents, caps, tensorized, accumulators=caps[0] if tensorized else None)):
            decisions[inst] = value
        group.clear()

    for inst in trace.insts:
        name = inst.kind.name
        if name == "SamplePerfectTile":
            extent = 1
            for factor in old[inst]:
                extent *= int(factor)
            group.append((inst, extent, int(inst.attrs[0]), int(inst.attrs[1])))
            continue
        if name != "Split" and group:
            flush()
        if name == "SampleCategorical":
            candidates = [int(c) for c in inst.attrs[0]]
            probs = [float(p) for p in inst.attrs[1]]
            decisions[inst] = (candidates.index(UNROLL_STEP) if UNROLL_STEP in candidates
                               else probs.index(max(probs)))
        elif name == "GetBlock":
            block_names[inst.outputs[0]] = str(inst.attrs[0])
        elif name == "SampleComputeLocation":
            decisions[inst] = INLINE if block_names.get(inst.inputs[0]) in padding else ROOT
    if group:
        flush()
    return tir.schedule.Trace(list(trace.insts), {**old, **decisions})


def _describe(trace: tir.schedule.Trace) -> Optional[str]:
    """What the design is ("amx", "vnni tensorized", "tensorized", "tiled"), or None when no
    mark of :data:`_TRACE_MARKS` is in its trace."""
    text = str(trace)
    if "amx" in text.lower():
        return "amx"
    if "meta_schedule.auto_tensorize" in text:
        return "vnni tensorized" if "vnni" in text else "tensorized"
    if "meta_schedule.tiling_structure" in text:
        return "tiled"
    return None


def _layout_rule(workload: tvm.IRModule) -> Optional[str]:
    """"layout rule" when a block of ``workload`` is handed to a rule of :data:`_LAYOUT_RULES`
    (its ``schedule_rule`` annotation), else None."""
    found = []

    def visit(node) -> None:
        if (isinstance(node, tir.Block)
                and str(node.annotations.get(SCHEDULE_RULE_KEY, "")) in _LAYOUT_RULES):
            found.append(node)

    tir.stmt_functor.post_order_visit(workload["main"].body, visit)
    return "layout rule" if found else None


def _design_order(spaces: Sequence[tir.Schedule]) -> List[tir.Schedule]:
    """AMX designs first, then the other tensorized designs, then the rest; within each kind,
    the designs whose output is written back inside the tile (MultiLevelTiling's consumer
    fusion or write cache: a ``reverse_compute_at``) first, the last such design (the deepest
    level) first (see the module doc)."""
    def written_back(space: tir.Schedule) -> bool:
        return any(inst.kind.name == "ReverseComputeAt" for inst in space.trace.insts)

    rank = {"amx": 0, "vnni tensorized": 1, "tensorized": 1}  # every other design: 2
    ranks = [rank.get(_describe(s.trace), 2) for s in spaces]
    ordered = []
    for wanted in range(3):
        kind = [s for s, r in zip(spaces, ranks) if r == wanted]
        ordered += [s for s in reversed(kind) if written_back(s)]
        ordered += [s for s in reversed(kind) if not written_back(s)]
    return ordered


def apply_with_postprocs(trace: tir.schedule.Trace, workload: tvm.IRModule,
                         postprocs: Sequence[ms.Postproc]) -> tir.schedule.Trace:
    """``trace`` replayed on ``workload`` and ``postprocs`` applied after it, as MetaSchedule
    prepares a search candidate; the resulting trace (postprocs included) is what a record holds.
    Raises ValueError naming the postproc that rejected it."""
    sch = tir.Schedule(workload, debug_mask=0, enable_check=False)
    trace.apply_to_schedule(sch, remove_postproc=True)
    sch.enter_postproc()
    for proc in postprocs:
        if not proc.apply(sch):
            raise ValueError(f"postproc {type(proc).__name__} rejected it")
    return sch.trace


def builds(trace: tir.schedule.Trace, workload: tvm.IRModule, target: Target) -> None:
    """Compile ``workload`` scheduled by ``trace`` for ``target`` (raises what TVM raises): a
    record nobody measured must not reach the model's build unbuilt. A tensorized int8 dense
    with 96 outputs, for one, passed every postproc and then failed LLVM lowering ("Cannot
    broadcast lanes=96 to 384": a vectorized loop inside the vectorized intrinsic loop). Built
    under :data:`relay_ext.lowering.config.BUILD_OPTIONS`, as the model's build is."""
    sch = tir.Schedule(workload, debug_mask=0, enable_check=False)
    trace.apply_to_schedule(sch, remove_postproc=False)
    with tvm.transform.PassContext(opt_level=3, config=BUILD_OPTIONS):
        tvm.build(sch.mod, target=target)


def task_design(task: ms.ExtractedTask, target: Target, variant: str, seed: int = 0) -> TaskDesign:
    """The rule design of one task (see the module doc), or why it has none."""
    workload = task.dispatched[0]
    space = ResilientPostOrderApply(*meta_rules.rule_set(target, variant), retry_seeds=2)
    context = ms.TuneContext(mod=workload, target=target, space_generator=space,
                             task_name=task.task_name, rand_state=seed)
    return context_design(context)


def context_design(context: ms.TuneContext) -> TaskDesign:
    """:func:`task_design` for a TuneContext whose space generator carries the rules (as
    ``tune``'s contexts do: their design spaces, generated once, are reused)."""
    workload, target = context.mod, context.target
    kept = topi_only(workload)
    if kept is not None:
        return TaskDesign(str(context.task_name), workload, None, f"{TOPI_SCHEDULE}: {kept}")
    space = context.space_generator
    try:
        spaces = list(context.generate_design_space())
    except DesignSpaceGenerationError as error:
        return TaskDesign(context.task_name, workload, None, f"no design space ({error})")
    failures = []
    for design in _design_order(spaces):
        kind = _describe(design.trace) or _layout_rule(workload)
        if kind is None:
            continue
        try:
            fixed = deterministic_trace(design.trace, target, workload)
            final = apply_with_postprocs(fixed, workload, space.postprocs)
            builds(final, workload, target)
        except Exception as error:  # pylint: disable=broad-except - TVM raises many kinds
            failures.append(tvm_error_message(error) if isinstance(error, tvm.TVMError)
                            else str(error))
            continue
        return TaskDesign(str(context.task_name), workload, final, kind)
    why = (f"every design failed ({failures[0][:160]})" if failures
           else "no rule decides it: TVM's default")
    return TaskDesign(str(context.task_name), workload, None, why)


def rule_design_records(mod: tvm.IRModule, params: Optional[Mapping[str, tvm.nd.NDArray]],
                        target: Target, variant: str,
                        tasks: Optional[Sequence[ms.ExtractedTask]] = None) -> RuleDesigns:
    """The rule designs of ``mod``'s tasks as records (``target`` and ``variant`` already checked), in
    a MemoryDatabase, each with :data:`UNMEASURED_RUN_SECS`; ``tasks``: the model's extracted
    tasks, when the caller has them."""
    from relay_ext.lowering.tasks import lowered_tasks

    register_tensor_intrinsics(target)
    if tasks is None:
        tasks = lowered_tasks(mod, params, target, variant)
    database = ms.database.MemoryDatabase()
    designs = []
    for task in tasks:
        design = task_design(task, target, variant)
        designs.append(design)
        logger.info("no-search %s: %s", task.task_name, design.design)
        if design.has_record:
            commit_design(database, design, target, [UNMEASURED_RUN_SECS])
    return RuleDesigns(database, designs, list(tasks))


def commit_design(database: ms.Database, design: TaskDesign, target: Target,
                  run_secs: Sequence[float]) -> None:
    """``design``'s record, with ``run_secs``, committed to ``database``."""
    workload = database.commit_workload(design.workload)
    database.commit_tuning_record(ms.database.TuningRecord(
        design.trace, workload, [float(s) for s in run_secs], target,
        ms.arg_info.ArgInfo.from_prim_func(_main(design.workload))))


def _main(mod: tvm.IRModule) -> tir.PrimFunc:
    (func,) = [f for _, f in mod.functions.items() if isinstance(f, tir.PrimFunc)]
    return func
