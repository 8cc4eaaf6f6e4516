"""What a GPU target allows, read once from the target: the limits every check compares against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from tvm.target import Target

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
