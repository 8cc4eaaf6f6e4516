"""Where an int8 model's time goes, per layer, on each side of benchmarks/where_time_goes.py: TVM's
tasks (each timed alone, its record against TOPI's default schedule), PyTorch's leaf modules
(forward hooks) and OpenVINO's executed nodes (its PERF_COUNT counters), each row with its
convolution's signature, which benchmarks/layer_table.py matches across the sides.

A peer's signature counts the channels as TVM's build for the same target runs the conv
(:func:`splits_input`): on an x86 target without VNNI, TVM computes every non-grouped int8 conv
over its input read twice (:mod:`relay_ext.lowering.x86.saturation_free_int8`), twice the input
channels of the network's conv (and of the peers', which keep the network's). A conv TVM leaves
whole there (constant weights too small to saturate ``vpmaddubsw``, rare with 8-bit weights; or
weights with a nonzero zero point, which TVM splits into two convs of the network's channels
instead) keeps the network's count on TVM's side and shows in the table's row of peer convs with
no TVM task of their shape, not in another conv's row."""

from __future__ import annotations

import collections
import functools
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
import tvm
from tvm import meta_schedule as ms
from tvm import relay

from benchmarks.layer_table import Signature, tvm_channels
from meta_rules.base.tvm_errors import tvm_error_message
from relay_ext.frontend import models as frontend_models
from relay_ext.frontend.eager_quantization import (QUANTIZATION_BACKEND, quantization_engine,
                                                   quantize_eager, random_batches,
                                                   seeded_float_model)
from relay_ext.lowering.x86.saturation_free_int8 import multiplies_with_pmaddubsw
from relay_ext.schedules.task_choice import has_record, time_task

logger = logging.getLogger(__name__)


def splits_input(target: tvm.target.Target, groups: int) -> bool:
    """Whether TVM's build for ``target`` runs a network's int8 conv of ``groups`` groups over
    twice its input channels: a non-grouped conv on an llvm x86 target whose uint8 x int8
    products go through ``vpmaddubsw`` (no VNNI), where
    :mod:`relay_ext.lowering.x86.saturation_free_int8` splits its weights (see the module doc)."""
    return groups == 1 and multiplies_with_pmaddubsw(target, "conv2d")


def peer_signature(target: tvm.target.Target, cin: int, cout: int, groups: int, kernel: int,
                   stride: int, height: int, width: int) -> Signature:
    """A peer's conv (the network's channel counts) as TVM's build for ``target`` runs it:
    channels padded, the input doubled where TVM splits the conv (:func:`splits_input`)."""
    return (*tvm_channels(cin, cout, groups, splits_input(target, groups)), kernel, stride,
            height, width)


def conv_signature(task: ms.ExtractedTask) -> Optional[Signature]:
    """The signature of the task's convolution, or None when it has none; its channel counts
    as :func:`tvm_channels` pads them, so that a host where TOPI does not pad them (no int8
    layout) still matches the peers' padded ones. (Where TVM split the conv, its input is
    already the doubled one: :func:`peer_signature` doubles the peers'.)"""
    (_, func), = task.mod.functions.items()
    found: List[Signature] = []

    def visit(node):
        if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op) and \
                "conv2d" in node.op.name and not found:
            data = [int(d) for d in node.args[0].checked_type.shape]
            out = [int(d) for d in node.checked_type.shape]
            layout = str(node.attrs.data_layout)
            channels = data[1] * (data[4] if len(data) == 5 else 1) if layout.startswith("NCHW") \
                else data[3]
            height, width = (out[2], out[3]) if layout.startswith("NCHW") else (out[1], out[2])
            # padded as TOPI pads them where it does (idempotent where it already has)
            cin, cout = tvm_channels(channels, int(node.attrs.channels), int(node.attrs.groups))
            found.append((cin, cout, int(node.attrs.kernel_size[0]), int(node.attrs.strides[0]),
                          height, width))

    relay.analysis.post_order_visit(func.body, visit)
    return found[0] if found else None


def kernel_kind(lib) -> str:
    """What int8 instructions a built module's code uses (see the module doc)."""
    asm = lib.get_lib().get_source("asm")
    if "tdpbusd" in asm:
        return "AMX"
    chains = {line.split(",")[-1].strip() for line in asm.splitlines() if "vpdpbusd" in line}
    if chains:
        return f"VNNI x{len(chains)}"
    return "vpmaddubsw" if "vpmaddubsw" in asm else "no int8 dot"


def tvm_layers(tasks, database: ms.Database, target, variant: str, rounds: int) -> List[Dict]:
    """Per task: its calls, conv signature, the time of what the model runs (the record, or
    TOPI's default where the never-slower rule drops the record) and its kernel kind."""
    rows = []
    for task in tasks:
        tuned = has_record(database, task.dispatched[0])
        kinds: Dict[str, str] = {}

        def read(record_lib, default_lib, kinds=kinds):
            kinds["record"] = kernel_kind(record_lib)
            kinds["default"] = kernel_kind(default_lib)

        try:
            timed = time_task(task, database if tuned else ms.database.MemoryDatabase(),
                              target, variant, rounds, on_built=read)
        except Exception as error:  # pylint: disable=broad-except - one row lost, not the table
            logger.warning("could not time %s: %s", task.task_name,
                           tvm_error_message(error, limit=200))
            continue
        runs_record = tuned and not timed.uses_default
        rows.append({"task": task.task_name, "calls": int(task.weight),
                     "signature": conv_signature(task), "tuned": tuned,
                     "runs_record": runs_record,
                     "record_ms": timed.record_ms if tuned else None,
                     "default_ms": timed.default_ms,
                     "used_ms": timed.record_ms if runs_record else timed.default_ms,
                     "kind": kinds.get("record" if runs_record else "default")})
    return rows


def pytorch_model(name: str, image_size: int, seed: int = frontend_models.DEFAULT_SEED):
    """The eager quantized network relay_ext.load_model traces (same seed, same calibration)."""
    spec = frontend_models._model_spec(name)  # pylint: disable=protected-access
    shape = spec.input_shape(1, image_size)
    model = quantize_eager(seeded_float_model(spec.build, seed),
                           random_batches(shape, frontend_models.CALIBRATION_BATCHES, seed + 1))
    return model, shape


def pytorch_layers(name: str, image_size: int, threads: int, rounds: int,
                   target: tvm.target.Target) -> Tuple[List[Dict], float]:
    """Per leaf module: median ms per run (and its conv signature as TVM's build for ``target``
    runs the conv, :func:`peer_signature`); and the model's median ms."""
    model, shape = pytorch_model(name, image_size)
    data = torch.randn(shape)
    times: Dict[str, List[float]] = collections.defaultdict(list)
    info: Dict[str, Dict] = {}
    started: Dict[str, float] = {}
    leaves = [(n, m) for n, m in model.named_modules() if not list(m.children())]

    def pre(module_name, mod, args):
        started[module_name] = time.perf_counter()

    def post(module_name, mod, args, output):
        times[module_name].append(1e3 * (time.perf_counter() - started[module_name]))
        if module_name not in info:
            signature = None
            if hasattr(mod, "kernel_size") and hasattr(mod, "out_channels"):
                out = output.shape
                signature = peer_signature(target, int(mod.in_channels), int(mod.out_channels),
                                           int(getattr(mod, "groups", 1)), int(mod.kernel_size[0]),
                                           int(mod.stride[0]), int(out[2]), int(out[3]))
            info[module_name] = {"kind": type(mod).__name__, "signature": signature}

    def hooked():
        return [handle for n, m in leaves
                for handle in (m.register_forward_pre_hook(functools.partial(pre, n)),
                               m.register_forward_hook(functools.partial(post, n)))]

    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    whole: List[float] = []
    hooks = hooked()
    try:
        with quantization_engine(QUANTIZATION_BACKEND), torch.no_grad():
            for _ in range(3):  # warm-up, and each module's signature
                model(data)
            for hook in hooks:  # the whole model without hooks first, then each module with
                hook.remove()
            for _ in range(rounds):
                start = time.perf_counter()
                model(data)
                whole.append(1e3 * (time.perf_counter() - start))
            times.clear()
            hooks = hooked()
            for _ in range(rounds):
                model(data)
    finally:
        torch.set_num_threads(old_threads)
        for hook in hooks:
            hook.remove()
    layers = [{"module": n, **info[n], "ms": statistics.median(times[n])} for n in info]
    return layers, statistics.median(whole)


def openvino_rows(profile, target: tvm.target.Target) -> List[Dict]:
    """An :class:`relay_ext.peers.openvino_layers.OpenVINOProfile`'s nodes as peer rows: conv
    nodes with their signature (channels as TVM's build for ``target`` runs them,
    :func:`peer_signature`), every node with its kernel."""
    rows = []
    for layer in profile.layers:
        signature = None
        if layer.conv is not None:
            c = layer.conv
            signature = peer_signature(target, c.in_channels, c.out_channels, c.groups, c.kernel,
                                       c.stride, c.out_height, c.out_width)
        rows.append({"signature": signature, "ms": layer.ms, "name": layer.name,
                     "kind": layer.exec_type + (" + add" if layer.residual_add else ""),
                     "part": f"{layer.layer_type} ({layer.exec_type})"})
    return rows


def openvino_column(model: str, image_size: int, threads: int, rounds: int,
                    target: tvm.target.Target) -> Tuple[Dict, Dict]:
    """OpenVINO's column (bench's QDQ export of ``model``, profiled; its convs matched to TVM's
    build for ``target``) and what oneDNN says it ran."""
    from relay_ext.frontend.onnx_export import export_quantized  # pylint: disable=C0415
    from relay_ext.peers.openvino_layers import (kernel_family, onednn_conv_kernels,  # pylint: disable=C0415
                                                    openvino_layers)

    shape = frontend_models._model_spec(model).input_shape(1, image_size)  # pylint: disable=W0212
    example = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    with tempfile.TemporaryDirectory() as scratch:
        path = export_quantized(model, Path(scratch) / f"{model}_qdq.onnx", image_size=image_size)
        profile = openvino_layers(path, example, threads, rounds=10 * rounds, timing_rounds=rounds)
        onednn = onednn_conv_kernels(path, threads)
    rows = openvino_rows(profile, target)
    families = collections.Counter(kernel_family(layer.exec_type) for layer in profile.convs())
    facts = {"version": profile.version, "onednn": onednn, "families": dict(families),
             "exec_types": dict(collections.Counter(layer.exec_type for layer in profile.convs()))}
    return {"name": "OpenVINO", "rows": rows, "total": profile.model_ms}, facts
