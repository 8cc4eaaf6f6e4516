"""VerifyLoweredGPUCode: judge a GPU candidate on the code it lowers to, for the task's own target.

The quantized epilogue reads as 32-bit code until ``LowerIntrin`` expands its intrinsic::

    for i_2 in T.vectorized(4):                    # scheduled: int32 x 4 = 16 B, looks fine
        T_cast[...] = T.Cast("uint8", T.max(T.min(
            T.q_multiply_shift_per_axis(acc[...] + 3, multiplier[...], ...), 255), 0))

    # VectorizeLoop + LowerIntrin, with the task's target attached:
    T_cast[b:b + 4] = T.Cast("uint8x4", T.max(T.min(T.Cast("int32x4", T.shift_right(
        T.shift_left(T.Cast("int64x4", acc[b:b + 4] + ...), ...)      # <- int64 x 4 = 32 B
        * T.Cast("int64x4", multiplier[c:c + 4]) + ..., ...)), ...), ...))

A check made before ``LowerIntrin``, or with a hard-coded target instead of the task's, sees
``int32x4`` and passes a candidate that needs 32-byte vectors, or 64-bit integers on a target that
has none. This postproc lowers as TVM 0.19's ``VerifyGPUCode`` postproc does, up to and including
``LowerIntrin``, with the task's target attached, and rejects a candidate when

* a thread-bound loop has a dynamic extent, or a block's thread-extent annotation is not met
  (checked before lowering, as TVM does);
* in a kernel, threads per block, a ``threadIdx`` extent, ``vthread`` or shared memory per block
  exceed the target's limits (counted as TVM counts them);
* a value with a vector dtype (load, store, cast, allocation, ramp, broadcast, arithmetic,
  comparison, select, call, let) is wider than ``max_vector_bytes``. In a buffer index only what TVM
  checks there counts (casts, loads, a strided ``Ramp``): a unit-stride ``Ramp`` is an address, and a
  gather index mostly becomes one once later passes unroll and simplify the loop;
* a 64-bit integer value appears on a target without 64-bit integers: ``webgpu``, and ``vulkan``
  unless ``-supports_int64=1`` (TVM's SPIR-V code generator also reads a missing attribute as false);
* lowering itself fails.

Each rejection carries :class:`Rejection` reasons. Counts per task live in a store shared by a
verifier and all its clones (TVM clones postprocs into each task's context), readable at any time
with :meth:`VerifyLoweredGPUCode.stats`, ``task_stats`` and ``summary``. Each task's summary is
logged (INFO) once: by :meth:`VerifyLoweredGPUCode.log_summaries`, or, for tasks not logged by then,
when the last verifier sharing the store is released or the interpreter exits.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import tvm
from tvm import tir
from tvm.meta_schedule.postproc import Postproc, PyPostproc
from tvm.meta_schedule.utils import derived_object
from tvm.target import Target
from tvm.tir.schedule import Schedule

logger = logging.getLogger(__name__)

# --- limits of a target ----------------------------------------------------------------------------

MAX_VTHREAD = 8  # what TVM's VerifyGPUCode postproc uses for every target
# WebGPU specification, "limits" defaults: maxComputeInvocationsPerWorkgroup,
# maxComputeWorkgroupStorageSize, maxComputeWorkgroupSize{X,Y,Z}.
WEBGPU_DEFAULTS = {"max_threads_per_block": 256, "max_shared_memory_per_block": 16384}
WEBGPU_WORKGROUP_SIZE = (256, 256, 64)


@dataclass(frozen=True)
class GPULimits:
    """What the checks compare against, read from one target."""

    kind: str
    max_threads_per_block: int
    max_shared_memory_per_block: int
    thread_warp_size: int
    max_thread_extent: Tuple[Optional[int], Optional[int], Optional[int]]  # x, y, z; None: no limit
    max_vthread: int
    max_vector_bytes: int
    supports_int64: bool


def _int_attr(target: Target, name: str) -> Optional[int]:
    value = target.attrs.get(name)
    return None if value is None else int(value)


def gpu_limits(target: Target, max_vector_bytes: int = 16) -> GPULimits:
    """The limits of ``target``; ValueError naming the first attribute the target lacks.

    Like TVM's VerifyGPUCode, ``max_threads_per_block``, ``max_shared_memory_per_block`` and
    ``thread_warp_size`` must be attributes of the target, except on ``webgpu``, whose TVM target
    carries no limits: there the WebGPU specification's defaults apply (256 invocations and 16 KiB of
    workgroup storage per workgroup; ``max_num_threads``, if given, sets the invocations).
    """
    kind = target.kind.name
    if kind == "webgpu":
        threads = _int_attr(target, "max_threads_per_block") or _int_attr(target, "max_num_threads")
        shared = _int_attr(target, "max_shared_memory_per_block")
        warp = _int_attr(target, "thread_warp_size")
        values = {
            "max_threads_per_block": threads or WEBGPU_DEFAULTS["max_threads_per_block"],
            "max_shared_memory_per_block": shared or WEBGPU_DEFAULTS["max_shared_memory_per_block"],
            "thread_warp_size": warp or 1,  # no subgroup size is guaranteed by WebGPU
        }
    else:
        values = {}
        for name in ("max_threads_per_block", "max_shared_memory_per_block", "thread_warp_size"):
            value = _int_attr(target, name)
            if value is None:
                raise ValueError(
                    f"VerifyLoweredGPUCode: target {str(target)!r} has no attribute {name!r}, "
                    f"which its checks need; add -{name}=<value> to the target"
                )
            values[name] = value
    dims = tuple(_int_attr(target, f"max_block_size_{axis}") for axis in "xyz")
    if kind == "webgpu":
        dims = tuple(d or s for d, s in zip(dims, WEBGPU_WORKGROUP_SIZE))
    if kind == "webgpu":
        int64 = False
    elif kind == "vulkan":  # TVM's SPIR-V code generator treats a missing attribute as false
        int64 = bool(target.attrs.get("supports_int64", False))
    else:
        int64 = True
    return GPULimits(kind=kind, max_vthread=MAX_VTHREAD, max_vector_bytes=max_vector_bytes,
                     max_thread_extent=dims, supports_int64=int64, **values)  # type: ignore[arg-type]


# --- reasons ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rejection:
    """One reason a candidate is rejected.

    ``check`` names the check, ``detail`` is the part that is the same for every candidate failing
    the same way (used for counting), ``where`` locates this occurrence. ``tvm_checks`` is False for
    the cases TVM's VerifyGPUCode does not check (it would accept the candidate for this reason).
    """

    check: str
    detail: str
    where: str = ""
    tvm_checks: bool = True

    @property
    def key(self) -> str:
        return f"{self.check} ({self.detail})"

    def __str__(self) -> str:
        return f"{self.key} in {self.where}" if self.where else self.key


# --- lowering ---------------------------------------------------------------------------------------


def lowering_passes() -> List[tvm.transform.Pass]:
    """The pass list of TVM 0.19's VerifyGPUCode postproc, in order; the last one is LowerIntrin."""
    t = tir.transform
    return [
        # phase 1
        t.LowerCrossThreadReduction(), t.LowerInitBlock(), t.PlanAndUpdateBufferAllocationLocation(),
        t.ConvertBlocksToOpaque(), t.LiftThreadBinding(), t.ManifestSharedMemoryLocalStage(),
        t.CompactBufferAllocation(), t.Simplify(), t.LowerAutoCopy(), t.UnifyThreadBinding(),
        t.LowerMatchBuffer(), t.InjectSoftwarePipeline(), t.LowerOpaqueBlock(), t.FlattenBuffer(),
        t.BF16ComputeLegalize(), t.NarrowDataType(32), t.Simplify(),
        # phase 2
        t.VectorizeLoop(True), t.InjectVirtualThread(), t.InjectDoubleBuffer(), t.StorageRewrite(),
        t.MergeSharedMemoryAllocations(), t.LowerIntrin(),
    ]


def lower_for_verification(
    func: tir.PrimFunc,
    name: str,
    target: Target,
    passes: Optional[List[tvm.transform.Pass]] = None,
) -> tir.PrimFunc:
    """``func`` lowered by ``passes`` (default :func:`lowering_passes`) with ``target`` attached."""
    attrs = {"global_symbol": name, "target": target}
    if bool(tvm.transform.PassContext.current().config.get("tir.noalias", True)):
        attrs["tir.noalias"] = True
    mod = tvm.IRModule({name: func.with_attr(attrs)})
    return tvm.transform.Sequential(passes if passes is not None else lowering_passes())(mod)[name]


def _first_line(err: Exception) -> str:
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    # TVM's messages end with the actual error after a traceback
    text = lines[-1] if lines else type(err).__name__
    return text if len(text) <= 120 else text[:117] + "..."


# --- before lowering: thread-extent annotations (TVM's ThreadExtentChecker) ------------------------

_LOW = "meta_schedule.thread_extent_low_inclusive"
_HIGH = "meta_schedule.thread_extent_high_inclusive"


def thread_extent_rejections(func: tir.PrimFunc, thread_warp_size: int) -> List[Rejection]:
    """Blocks whose ``thread_extent_{low,high}_inclusive`` annotation the enclosing threads miss.

    The scheduled (not yet lowered) function, checked as TVM's VerifyGPUCode does before lowering; a
    ``warp_execution`` block counts ``threadIdx.x`` as the warp size. A dynamic thread extent
    rejects too.
    """
    found: List[Rejection] = []

    def visit(stmt, threads: Tuple[int, int, int]) -> None:
        if isinstance(stmt, tir.For):
            binding = stmt.thread_binding
            tag = binding.thread_tag if binding is not None else ""
            if tag.startswith("threadIdx.") or tag.startswith("vthread") or tag == "cthread":
                if not isinstance(stmt.extent, tir.IntImm):
                    found.append(Rejection("thread extent", f"dynamic extent of {tag}",
                                           f"loop {stmt.loop_var.name}"))
                    return
                if tag.startswith("threadIdx."):
                    dim = "xyz".index(tag[-1])
                    threads = tuple(int(stmt.extent) if i == dim else t
                                    for i, t in enumerate(threads))  # type: ignore[assignment]
            visit(stmt.body, threads)
        elif isinstance(stmt, tir.BlockRealize):
            visit(stmt.block, threads)
        elif isinstance(stmt, tir.Block):
            ann = stmt.annotations
            if "warp_execution" in ann:
                threads = (thread_warp_size, threads[1], threads[2])
            if _LOW in ann and _HIGH in ann:
                low, high = int(ann[_LOW]), int(ann[_HIGH])
                product = threads[0] * threads[1] * threads[2]
                if not low <= product <= high:
                    found.append(Rejection("thread extent", f"block needs {low}..{high} threads",
                                           f"block {stmt.name_hint} ({product} threads)"))
            if stmt.init is not None:
                visit(stmt.init, threads)
            visit(stmt.body, threads)
        elif isinstance(stmt, tir.SeqStmt):
            for s in stmt.seq:
                visit(s, threads)
        elif isinstance(stmt, tir.IfThenElse):
            visit(stmt.then_case, threads)
            if stmt.else_case is not None:
                visit(stmt.else_case, threads)
        elif isinstance(stmt, (tir.LetStmt, tir.AttrStmt, tir.AssertStmt, tir.Allocate,
                               tir.DeclBuffer, tir.AllocateConst, tir.While)):
            visit(stmt.body, threads)

    visit(func.body, (1, 1, 1))
    return found


# --- after lowering: kernels and expressions --------------------------------------------------------

_DTYPE_CACHE: Dict[str, Tuple[int, int, bool]] = {}


def _dtype_info(dtype: str) -> Tuple[int, int, bool]:
    """(bytes per lane, lanes, is a 64-bit integer) of a dtype string, cached."""
    info = _DTYPE_CACHE.get(dtype)
    if info is None:
        try:
            dt = tvm.DataType(dtype)
            lanes = int(dt.lanes)
            info = ((int(dt.bits) + 7) // 8, lanes,
                    dt.type_code in (tvm.DataTypeCode.INT, tvm.DataTypeCode.UINT) and dt.bits == 64)
        except (tvm.TVMError, ValueError):  # handle, void, scalable vectors
            info = (0, 1, False)
        _DTYPE_CACHE[dtype] = info
    return info


# The lowered function is read once through ``tvm.ir.save_json`` (one call into TVM) and walked
# as plain Python data: the same walk over TVM objects costs one FFI call per attribute, 3-5x more.
_BINARY = {"tir." + n: n.lower() for n in ("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod",
                                           "Min", "Max", "EQ", "NE", "LT", "LE", "GT", "GE", "And",
                                           "Or")}
_LEAVES = {"tir.Var": "var", "tir.SizeVar": "var", "IntImm": "constant", "FloatImm": "constant",
           "tir.StringImm": "constant"}
# Fields that hold sub-expressions or statements, for a node type the walk does not know.
_CHILD_FIELDS = ("a", "b", "value", "args", "indices", "base", "stride", "condition", "true_value",
                 "false_value", "vectors", "body", "seq", "then_case", "else_case", "extents",
                 "min", "extent", "source", "predicate")
_TVM_CHECKED_VECTORS = ("cast", "load", "store", "allocation", "strided ramp index")
_SHARED_SCOPES = ("shared", "shared.dyn")
_THREADS = ("threadIdx.x", "threadIdx.y", "threadIdx.z", "vthread")


class _KernelScan:
    """One walk over a lowered function (its save_json graph) collecting violations of ``limits``."""

    def __init__(self, limits: GPULimits, graph_json: str) -> None:
        self.limits = limits
        graph = json.loads(graph_json)
        self.nodes: List[dict] = graph["nodes"]
        self.root = int(graph["root"])
        self.resources: List[Rejection] = []
        self.vectors: Dict[str, Rejection] = {}
        self.int64: Dict[str, Rejection] = {}
        self.where = "function"
        self.kernel = 0
        self._nest = 0
        self._in_index = False
        self.threads: Dict[str, int] = {}
        self.shared_bytes = 0

    # -- the graph --------------------------------------------------------------------------
    def _attrs(self, i: int) -> dict:
        return self.nodes[i].get("attrs", {})

    def _ref(self, attrs: dict, name: str) -> Optional[int]:
        ref = attrs.get(name)
        if ref is None:
            return None
        j = int(ref)
        return j if self.nodes[j]["type_key"] else None  # node 0 ("" type) is null

    def _items(self, attrs: dict, name: str) -> List[int]:
        j = self._ref(attrs, name)
        return self.nodes[j].get("data", []) if j is not None else []

    def _str(self, attrs: dict, name: str) -> str:
        j = self._ref(attrs, name)
        return self.nodes[j].get("repr_str", "") if j is not None else ""

    def _int(self, i: Optional[int]) -> Optional[int]:
        """The value of an IntImm node, None for anything else."""
        if i is None or self.nodes[i]["type_key"] != "IntImm":
            return None
        return int(self._attrs(i)["value"])

    def _var_name(self, i: Optional[int]) -> str:
        return self._str(self._attrs(i), "name") if i is not None else ""

    # -- resources, counted the way TVM's GPUCodeVerifier counts them ------------------------
    def _resource(self, check: str, detail: str, found: str) -> None:
        self.resources.append(Rejection(check, detail, f"kernel {self.kernel}: {found}"))

    def _enter_thread(self, name: str, extent: int) -> None:
        if name not in _THREADS:
            return
        if name in self.threads:
            if name != "vthread" and self.threads[name] != extent:
                self._resource("thread extent", f"{name} bound with two extents",
                               f"{self.threads[name]} and {extent}")
            return
        self.threads[name] = extent
        if name == "vthread":
            if extent > self.limits.max_vthread:
                self._resource("vthread", f"> {self.limits.max_vthread}", f"{extent}")
            return
        limit = self.limits.max_thread_extent["xyz".index(name[-1])]
        if limit is not None and extent > limit:
            self._resource("thread extent", f"{name} > {limit}", f"{extent}")

    def _exit_kernel(self) -> None:
        count = 1
        for extent in self.threads.values():
            count *= extent
        if count > self.limits.max_threads_per_block:
            self._resource("threads per block", f"> {self.limits.max_threads_per_block}", f"{count}")
        if self.shared_bytes > self.limits.max_shared_memory_per_block:
            self._resource("shared memory", f"> {self.limits.max_shared_memory_per_block} B per block",
                           f"{self.shared_bytes} B")

    # -- dtypes -----------------------------------------------------------------------------
    def _dtype(self, dtype: str, kind: str, tvm_checks: bool) -> None:
        """One reason per offending dtype, named after the first node of that dtype met."""
        size, lanes, is_int64 = _dtype_info(dtype)
        if lanes > 1 and size * lanes > self.limits.max_vector_bytes and (
                tvm_checks or not self._in_index):
            found = self.vectors.get(dtype)
            if found is None:
                detail = f"{kind} {dtype} = {size * lanes} B > {self.limits.max_vector_bytes} B"
                self.vectors[dtype] = Rejection("vector width", detail, self.where, tvm_checks)
            elif tvm_checks and not found.tvm_checks:
                self.vectors[dtype] = Rejection(found.check, found.detail, found.where, True)
        if is_int64 and not self.limits.supports_int64 and dtype not in self.int64:
            self.int64[dtype] = Rejection("64-bit integer", f"{kind} {dtype} on {self.limits.kind}",
                                          self.where, False)

    # -- expressions (post-order: the first offender is where a wide type first appears) ----
    def expr(self, i: Optional[int], kind: Optional[str] = None) -> None:
        if i is None:
            return
        node = self.nodes[i]
        key = node["type_key"]
        attrs = node.get("attrs", {})
        if key in _BINARY:
            self.expr(self._ref(attrs, "a"))
            self.expr(self._ref(attrs, "b"))
            kind = kind or _BINARY[key]
        elif key in _LEAVES:
            kind = kind or _LEAVES[key]
        elif key == "tir.Cast" or key == "tir.Broadcast":
            self.expr(self._ref(attrs, "value"))
            kind = kind or key[4:].lower()
        elif key == "tir.BufferLoad":
            for index in self._items(attrs, "indices"):
                self.index(index)
            self.expr(self._ref(attrs, "predicate"))
            kind = kind or "load"
        elif key == "tir.Call":
            for arg in self._items(attrs, "args"):
                self.expr(arg)
            kind = kind or "call " + self.nodes[int(attrs["op"])].get("repr_str", "?")
        elif key == "tir.Select":
            for name in ("condition", "true_value", "false_value"):
                self.expr(self._ref(attrs, name))
            kind = kind or "select"
        elif key == "tir.Ramp":
            self.expr(self._ref(attrs, "base"))
            self.expr(self._ref(attrs, "stride"))
            kind = kind or "ramp"
        elif key == "tir.Not":
            self.expr(self._ref(attrs, "a"))
            kind = kind or "not"
        elif key == "tir.Let":
            self.expr(self._ref(attrs, "var"), "let")
            self.expr(self._ref(attrs, "value"))
            self.expr(self._ref(attrs, "body"))
            kind = kind or "let"
        elif key == "tir.Shuffle":
            for j in self._items(attrs, "vectors") + self._items(attrs, "indices"):
                self.expr(j)
            kind = kind or "shuffle"
        else:  # a node type this walk does not know: its children, without context
            self._unknown(i)
            kind = kind or key.split(".")[-1].lower()
        if "dtype" in attrs:
            self._dtype(attrs["dtype"], kind, kind in _TVM_CHECKED_VECTORS)

    def _unknown(self, i: int) -> None:
        attrs = self._attrs(i)
        for name in _CHILD_FIELDS:
            j = self._ref(attrs, name)
            if j is None:
                continue
            if self.nodes[j]["type_key"] == "Array":
                for k in self.nodes[j].get("data", []):
                    self.visit(k)
            else:
                self.visit(j)

    def _unit_ramp(self, i: int) -> bool:
        """``Ramp(b, 1, n)``, or one plus/minus a Broadcast (what a later Simplify folds)."""
        node = self.nodes[i]
        key, attrs = node["type_key"], node.get("attrs", {})
        if key == "tir.Ramp":
            return self._int(self._ref(attrs, "stride")) == 1
        if key in ("tir.Add", "tir.Sub"):
            a, b = self._ref(attrs, "a"), self._ref(attrs, "b")
            if a is None or b is None:
                return False
            if self.nodes[b]["type_key"] == "tir.Broadcast":
                return self._unit_ramp(a)
            if key == "tir.Add" and self.nodes[a]["type_key"] == "tir.Broadcast":
                return self._unit_ramp(b)
        return False

    def index(self, i: int) -> None:
        """A buffer index: a unit-stride ramp is an address; any other vector index is a value."""
        attrs = self._attrs(i)
        dtype = attrs.get("dtype", "int32")
        if _dtype_info(dtype)[1] == 1:
            self.expr(i)
        elif self._unit_ramp(i):
            self._address(i)
        elif self.nodes[i]["type_key"] == "tir.Ramp":  # strided: TVM checks these
            self.expr(self._ref(attrs, "base"))
            self.expr(self._ref(attrs, "stride"))
            self._dtype(dtype, "strided ramp index", True)
        else:
            # A gather index. Once loops are unrolled and simplified (after this lowering), most
            # become unit-stride ramps, so only what TVM checks inside it (casts, loads) counts.
            outer, self._in_index = self._in_index, True
            self.expr(i)
            self._in_index = outer

    def _address(self, i: int) -> None:
        """The scalar parts of a unit-stride ramp index (base, and the broadcast offsets)."""
        node = self.nodes[i]
        attrs = node.get("attrs", {})
        if node["type_key"] == "tir.Ramp":
            self.expr(self._ref(attrs, "base"))
        elif node["type_key"] == "tir.Broadcast":
            self.expr(self._ref(attrs, "value"))
        else:
            self._address(int(attrs["a"]))
            self._address(int(attrs["b"]))

    # -- statements ---------------------------------------------------------------------------
    def visit(self, i: Optional[int]) -> None:
        """A statement, or an expression found where a statement could be."""
        if i is None:
            return
        node = self.nodes[i]
        key = node["type_key"]
        attrs = node.get("attrs", {})
        if key == "tir.SeqStmt":
            for s in self._items(attrs, "seq"):
                self.visit(s)
        elif key == "tir.BufferStore":
            outer = self.where
            self.where = f"store to {self._var_name(self._ref(attrs, 'buffer'))}"
            for index in self._items(attrs, "indices"):
                self.index(index)
            value = self._ref(attrs, "value")
            self.expr(value)
            self.expr(self._ref(attrs, "predicate"))
            if value is not None:
                self._dtype(self._attrs(value).get("dtype", "int32"), "store", True)
            self.where = outer
        elif key == "tir.For":
            outer = self.where
            loop_var = self._ref(attrs, "loop_var")
            name = self._var_name(loop_var)
            self.where = f"loop {name}"
            extent = self._int(self._ref(attrs, "extent"))
            if name == "vthread.s" and extent is not None and extent > self.limits.max_vthread:
                self._resource("vthread", f"> {self.limits.max_vthread}", f"{extent}")
            self.expr(loop_var)
            self.expr(self._ref(attrs, "min"))
            self.expr(self._ref(attrs, "extent"))
            self.where = outer
            self.visit(self._ref(attrs, "body"))
        elif key == "tir.AttrStmt":
            self.attr(attrs)
        elif key == "tir.Allocate":
            self.allocate(attrs)
        elif key == "tir.IfThenElse":
            self.expr(self._ref(attrs, "condition"))
            self.visit(self._ref(attrs, "then_case"))
            self.visit(self._ref(attrs, "else_case"))
        elif key == "tir.LetStmt":
            outer = self.where
            var = self._ref(attrs, "var")
            self.where = f"let {self._var_name(var)}"
            self.expr(var, "let")
            self.expr(self._ref(attrs, "value"))
            self.where = outer
            self.visit(self._ref(attrs, "body"))
        elif key == "tir.Evaluate":
            self.expr(self._ref(attrs, "value"))
        elif key in ("tir.AssertStmt", "tir.While"):
            self.expr(self._ref(attrs, "condition"))
            self.visit(self._ref(attrs, "body"))
        elif key == "tir.DeclBuffer":
            self.visit(self._ref(attrs, "body"))
        elif "dtype" in attrs and key != "tir.AllocateConst":
            self.expr(i)
        else:  # AllocateConst and anything else
            self._unknown(i)

    def attr(self, attrs: dict) -> None:
        if self._str(attrs, "attr_key") not in ("thread_extent", "virtual_thread"):
            value = self._ref(attrs, "value")
            if value is not None and "dtype" in self._attrs(value):
                self.expr(value)
            self.visit(self._ref(attrs, "body"))
            return
        if self._nest == 0:  # a new kernel
            self.kernel += 1
            self.threads, self.shared_bytes = {}, 0
        iter_var = self._ref(attrs, "node")
        name = self._var_name(self._ref(self._attrs(iter_var), "var")) if iter_var is not None else ""
        extent = self._int(self._ref(attrs, "value"))
        if extent is None:
            self._resource("thread extent", "dynamic extent", name)
        else:
            self._enter_thread(name, extent)
        self._nest += 1
        self.visit(self._ref(attrs, "body"))
        self._nest -= 1
        if self._nest == 0:
            self._exit_kernel()

    def allocate(self, attrs: dict) -> None:
        outer = self.where
        buffer_var = self._ref(attrs, "buffer_var")
        self.where = f"allocation {self._var_name(buffer_var)}"
        extents = self._items(attrs, "extents")
        for extent in extents:
            self.expr(extent)
        dtype = attrs["dtype"]
        self._dtype(dtype, "allocation", True)
        self.where = outer
        self.visit(self._ref(attrs, "body"))
        pointer = self._ref(self._attrs(buffer_var), "type_annotation") if buffer_var else None
        scope = self._str(self._attrs(pointer), "storage_scope") if pointer is not None else ""
        if scope in _SHARED_SCOPES:
            elements = 1
            for extent in extents:
                elements *= self._int(extent) or 0
            size, lanes, _ = _dtype_info(dtype)
            self.shared_bytes += elements * size * lanes


def lowered_rejections(func: tir.PrimFunc, limits: GPULimits) -> List[Rejection]:
    """Every reason to reject a lowered function: kernel resources, vector widths, 64-bit integers.

    One reason per kernel resource violated and per offending dtype; resources first, then vector
    widths and 64-bit integers in the order the walk meets them (post-order: where a wide type
    first appears).
    """
    scan = _KernelScan(limits, tvm.ir.save_json(func.body))
    scan.visit(scan.root)
    return scan.resources + list(scan.vectors.values()) + list(scan.int64.values())


# --- per-task counts ------------------------------------------------------------------------------


@dataclass
class TaskStats:
    """What the verifier decided for one task.

    ``counts``: rejected candidates by their first reason's key (they sum to ``rejected``);
    ``reason_counts``: candidates having each reason key (one candidate may have several);
    ``examples``: the first full reason seen for each key.
    """

    task: str
    candidates: int = 0
    rejected: int = 0
    counts: Counter = field(default_factory=Counter)
    reason_counts: Counter = field(default_factory=Counter)
    examples: Dict[str, str] = field(default_factory=dict)

    @property
    def accepted(self) -> int:
        return self.candidates - self.rejected

    def by_check(self) -> Counter:
        """Rejected candidates by the check of their first reason."""
        out: Counter = Counter()
        for key, n in self.counts.items():
            out[key.split(" (", 1)[0]] += n
        return out

    def summary(self) -> str:
        parts = ", ".join(f"{n} {key}" for key, n in self.counts.most_common())
        text = f"{self.task}: rejected {self.rejected} of {self.candidates}"
        return f"{text}: {parts}" if parts else text

    def copy(self) -> "TaskStats":
        return TaskStats(self.task, self.candidates, self.rejected, Counter(self.counts),
                         Counter(self.reason_counts), dict(self.examples))


class _RejectionBook:
    """Counts per task, shared by a verifier and its clones; logs each unlogged task at release."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tasks: Dict[str, TaskStats] = {}
        self.logged: set = set()
        weakref.finalize(self, _log_pending, self.lock, self.tasks, self.logged)

    def record(self, task: str, reasons: List[Rejection]) -> None:
        with self.lock:
            stats = self.tasks.setdefault(task, TaskStats(task))
            stats.candidates += 1
            if reasons:
                stats.rejected += 1
                stats.counts[reasons[0].key] += 1
                for reason in reasons:
                    stats.reason_counts[reason.key] += 1
                    stats.examples.setdefault(reason.key, str(reason))


def _log_pending(lock: threading.Lock, tasks: Dict[str, TaskStats], logged: set) -> Dict[str, str]:
    with lock:
        pending = [s.copy() for name, s in tasks.items() if name not in logged and s.candidates]
        logged.update(s.task for s in pending)
    for stats in pending:
        logger.info("VerifyLoweredGPUCode %s", stats.summary())
    return {s.task: s.summary() for s in pending}


# --- the postproc ------------------------------------------------------------------------------


@derived_object
class VerifyLoweredGPUCode(PyPostproc):
    """Reject GPU candidates whose lowered code breaks the target's limits, and say why."""

    def __init__(self, max_vector_bytes: int = 16) -> None:
        if max_vector_bytes <= 0:
            raise ValueError(f"max_vector_bytes must be positive, got {max_vector_bytes}")
        self.max_vector_bytes = int(max_vector_bytes)
        self.target: Optional[Target] = None
        self.limits: Optional[GPULimits] = None
        self.task = "task"
        self._book = _RejectionBook()

    def _initialize_with_tune_context(self, context) -> None:
        if context.target is None:
            raise ValueError("VerifyLoweredGPUCode needs a tune context with a target")
        self.limits = gpu_limits(context.target, self.max_vector_bytes)
        self.target = context.target
        self.task = context.task_name or "task"

    # -- checking -----------------------------------------------------------------------------
    def verify(self, mod: tvm.IRModule) -> List[Rejection]:
        """Every reason to reject the scheduled module ``mod``; empty when it passes. Counts nothing."""
        if self.limits is None or self.target is None:
            raise RuntimeError("VerifyLoweredGPUCode is used before initialisation with a tune context")
        reasons: List[Rejection] = []
        for gvar, func in mod.functions.items():
            if not isinstance(func, tir.PrimFunc):
                continue
            found = thread_extent_rejections(func, self.limits.thread_warp_size)
            if found:
                reasons += found
                continue
            try:
                lowered = lower_for_verification(func, gvar.name_hint, self.target)
            except Exception as err:  # pylint: disable=broad-except
                # TVM raises TVMError, InternalError, ValueError, ... depending on the failed check
                reasons.append(Rejection("lowering failed", _first_line(err), gvar.name_hint))
                continue
            reasons += lowered_rejections(lowered, self.limits)
        return reasons

    def apply(self, sch: Schedule) -> bool:
        try:
            reasons = self.verify(sch.mod)
        except Exception as err:  # pylint: disable=broad-except
            # An exception must not reach the search's C++ worker thread: reject, and say so.
            logger.exception("VerifyLoweredGPUCode failed on a candidate of %s", self.task)
            reasons = [Rejection("verifier error", type(err).__name__, _first_line(err))]
        self._book.record(self.task, reasons)
        if reasons and logger.isEnabledFor(logging.DEBUG):
            logger.debug("VerifyLoweredGPUCode rejects a candidate of %s: %s", self.task,
                         "; ".join(str(r) for r in reasons))
        return not reasons

    def clone(self) -> Postproc:
        other = VerifyLoweredGPUCode(self.max_vector_bytes)
        inst = other._inst  # pylint: disable=protected-access
        inst.target, inst.limits, inst.task = self.target, self.limits, self.task
        inst._book = self._book  # clones count into the same store
        return other

    def __str__(self) -> str:
        return f"VerifyLoweredGPUCode(max_vector_bytes={self.max_vector_bytes})"

    # -- counts --------------------------------------------------------------------------------
    def stats(self, task: Optional[str] = None) -> TaskStats:
        """A copy of the counts of ``task`` (default: the task this verifier was initialised for)."""
        name = task or self.task
        with self._book.lock:
            found = self._book.tasks.get(name)
            return found.copy() if found is not None else TaskStats(name)

    def task_stats(self) -> Dict[str, TaskStats]:
        """Copies of the counts of every task seen by this verifier or its clones."""
        with self._book.lock:
            return {name: s.copy() for name, s in self._book.tasks.items()}

    def summary(self, task: Optional[str] = None) -> str:
        """``"<task>: rejected 37 of 64: 30 vector width (...), 7 shared memory (...)"``; logs nothing."""
        return self.stats(task).summary()

    def log_summaries(self) -> Dict[str, str]:
        """Log the summary of every task not logged yet (once per task); return what was logged."""
        book = self._book
        return _log_pending(book.lock, book.tasks, book.logged)


__all__: List[str] = ["GPULimits", "Rejection", "TaskStats", "VerifyLoweredGPUCode", "gpu_limits",
                      "lower_for_verification", "lowered_rejections", "lowering_passes",
                      "thread_extent_rejections"]
