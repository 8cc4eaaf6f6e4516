"""Where an int8 model's time goes, per layer, on each side of benchmarks/where_time_goes.py: TVM's
tasks (each timed alone, its record against TOPI's default schedule), PyTorch's leaf modules
(forward hooks) and OpenVINO's executed nodes (its PERF_COUNT counters), each row with its
convolution's signature, which benchmarks/layer_table.py matches across the sides.

A peer's signature counts the channels as TVM's build runs the conv
(:func:`relay_ext.latency.layer_pairing.peer_signature`, which ``quantfuse profile`` pairs with
too; its module doc says why they differ from the network's). A peer conv with no TVM task of
its shape shows in a row of its own, not in another conv's row."""

from __future__ import annotations

import collections
import functools
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import torch
from tvm import meta_schedule as ms

from meta_rules.base.tvm_errors import tvm_error_message
from relay_ext.frontend import models as frontend_models
from relay_ext.frontend.eager_quantization import (QUANTIZATION_BACKEND, quantization_engine,
                                                   quantize_eager, random_batches,
                                                   seeded_float_model)
# the signatures and the kernel kind are the library's (quantfuse profile uses them too);
# re-exported for the scripts
from relay_ext.latency.layer_pairing import (conv_signature, kernel_kind,  # noqa: F401
                                             openvino_rows, peer_signature)
from relay_ext.schedules.task_choice import has_record, time_task

logger = logging.getLogger(__name__)


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


def pytorch_layers(name: str, image_size: int, threads: int, rounds: int) -> Tuple[List[Dict], float]:
    """Per leaf module: median ms per run (and its conv signature as TVM's build runs the conv,
    :func:`peer_signature`); and the model's median ms."""
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
                signature = peer_signature(int(mod.in_channels), int(mod.out_channels),
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


def openvino_column(model: str, image_size: int, threads: int, rounds: int) -> Tuple[Dict, Dict]:
    """OpenVINO's column (bench's QDQ export of ``model``, profiled; its convs matched to TVM's
    build) and what oneDNN says it ran."""
    from relay_ext.frontend.onnx_export import export_quantized  # pylint: disable=C0415
    from relay_ext.peers.openvino_layers import (kernel_family, onednn_conv_kernels,  # pylint: disable=C0415
                                                    openvino_layers)

    shape = frontend_models._model_spec(model).input_shape(1, image_size)  # pylint: disable=W0212
    example = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    with tempfile.TemporaryDirectory() as scratch:
        path = export_quantized(model, Path(scratch) / f"{model}_qdq.onnx", image_size=image_size)
        profile = openvino_layers(path, example, threads, rounds=10 * rounds, timing_rounds=rounds)
        onednn = onednn_conv_kernels(path, threads)
    rows = openvino_rows(profile)
    families = collections.Counter(kernel_family(layer.exec_type) for layer in profile.convs())
    facts = {"version": profile.version, "onednn": onednn, "families": dict(families),
             "exec_types": dict(collections.Counter(layer.exec_type for layer in profile.convs()))}
    return {"name": "OpenVINO", "rows": rows, "total": profile.model_ms}, facts
