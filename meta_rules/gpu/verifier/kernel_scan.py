"""After lowering: one walk over the lowered code, collecting every reason to reject it: kernel
resources (threads, shared memory, vthreads, counted as TVM's GPUCodeVerifier counts them), the
width of every vector value, and 64-bit integers on targets without them."""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Tuple

import tvm
from tvm import tir

from meta_rules.gpu.verifier.limits import GPULimits
from meta_rules.gpu.verifier.reasons import Rejection

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
