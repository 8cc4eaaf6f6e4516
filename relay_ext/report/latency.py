"""CPU latency of a tuned quantized model: TVM tuned, TVM untuned and PyTorch's int8 module.

:func:`measure_latency` returns the numbers (a :class:`BenchResult`); ``quantfuse bench`` prints
them as a table, and :func:`write_report` writes ``report.md`` and a PNG bar chart.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import queue
import statistics
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple, TypeVar, Union

import numpy as np
import torch
import tvm
from tvm import meta_schedule as ms

from meta_rules.rule_sets import TargetLike, check_variant

from ..frontend.models import LoadedModel
from ..frontend.onnx_runtime import saturation_note
from ..lowering.config import BUILD_OPTIONS
from ..lowering.targets import check_runs_here, host_cpu_flags, normalize_target, vector_flags
from ..tuning.build import build_with_records, graph_module
from ..tuning.never_slower import TaskVsDefault, compile_never_slower
from .accuracy import build_untuned, step_error
from .tables import machine_description



@dataclasses.dataclass
class Timing:
    """Seconds per run, one value per round (each the mean of ``number`` runs)."""

    seconds: List[float]

    @property
    def median_ms(self) -> float:
        return 1e3 * statistics.median(self.seconds)

    @property
    def spread_ms(self) -> float:
        """max - min over rounds, in ms."""
        return 1e3 * (max(self.seconds) - min(self.seconds))


@dataclasses.dataclass
class BenchResult:
    """What ``quantfuse bench`` measured: one :class:`Timing` per configuration (table order),
    and how far TVM's outputs are from the reference runtime's, in output quantization steps."""

    model: str
    input_shape: tuple
    target: str
    variant: str
    threads: int
    repeats: int
    number: int
    timings: Dict[str, Timing]  # label -> timing; TUNED and UNTUNED first, then the references
    reference: str              # the runtime TVM's outputs are compared with ("PyTorch int8")
    max_steps: float            # TVM tuned vs the reference
    mean_steps: float
    fraction_equal: float
    untuned_max_steps: float
    machine: str
    date: str
    load_average: Optional[float] = None  # 1-minute load before the bench compiled anything
    # Max output steps from the reference of the other runtimes that run the model itself (ONNX
    # Runtime int8 for an ONNX model, whose reference is its QDQ graph as written).
    runtime_steps: Dict[str, float] = dataclasses.field(default_factory=dict)
    # Issue 18's never-slower rule: every task with a record, its record's time and TVM's
    # default schedule's, timed here; those whose record was slower were compiled with the
    # default. None: the rule was not applied.
    tasks_vs_default: Optional[List[TaskVsDefault]] = None

    def default_lines(self) -> List[str]:
        """What the never-slower rule did, for people (empty when it was not applied)."""
        if self.tasks_vs_default is None:
            return []
        slower = [c for c in self.tasks_vs_default if c.uses_default]
        line = (f"never slower than TVM's default: {len(slower)} of {len(self.tasks_vs_default)} "
                "tasks with a record compiled with TVM's default schedule instead (their best "
                "record ran slower here)")
        return [line, *[f"  {c}" for c in slower]]

    def runtime_lines(self) -> List[str]:
        """One sentence per entry of ``runtime_steps``, with why when it is more than rounding."""
        lines = []
        for label, steps in self.runtime_steps.items():
            note = saturation_note(steps, host_cpu_flags()) if label == ONNX_RUNTIME else None
            lines.append(f"{label} vs {self.reference}: max {steps:.2f} output quantization steps"
                         + (f" ({note})" if note else ""))
        return lines

    @property
    def busy_warning(self) -> Optional[str]:
        """A warning when other processes were competing for the CPU (load above the threads)."""
        if self.load_average is None or self.load_average <= self.threads:
            return None
        return (f"WARNING: the load average was {self.load_average:.2f} before timing, above the "
                f"{self.threads} thread(s) timed: other processes compete for the CPU and these "
                "figures are not trustworthy; rerun on a quiet machine")

    def ratio(self, label: str, reference: str) -> float:
        """median(label) / median(reference): > 1 means ``label`` is slower."""
        return self.timings[label].median_ms / self.timings[reference].median_ms

    @property
    def references(self) -> List[str]:
        """The labels of the runtimes TVM is compared with (PyTorch int8, ONNX Runtime int8)."""
        return [label for label in self.timings if label not in (TUNED, UNTUNED)]

    @property
    def header(self) -> List[str]:
        return ["", "median ms", "spread ms", f"/ {TUNED}",
                *[f"/ {label.replace(' int8', '')}" for label in self.references]]

    def label(self, label: str) -> str:
        """A configuration's name as the table prints it ("TVM tuned (ours)", "PyTorch int8")."""
        return f"{label} ({self.variant})" if label == TUNED else label

    def to_dict(self) -> Dict[str, object]:
        """The result as ``quantfuse bench --json`` prints it: ``model``, ``target``, ``threads``,
        ``host_flags`` (the vector/VNNI/AMX flags this host's OS enables), ``rows`` (one per
        configuration, named as in the table, with ``median_ms``, ``min_ms``, ``max_ms``),
        ``max_steps`` (TVM tuned vs ``reference``) and the rest of the result."""
        return {
            "model": self.model, "input_shape": list(self.input_shape), "target": self.target,
            "variant": self.variant, "threads": self.threads, "host_flags": vector_flags(),
            "repeats": self.repeats, "number": self.number,
            "rows": [{"configuration": self.label(label),
                      "median_ms": timing.median_ms,
                      "min_ms": 1e3 * min(timing.seconds), "max_ms": 1e3 * max(timing.seconds)}
                     for label, timing in self.timings.items()],
            "reference": self.reference, "max_steps": self.max_steps,
            "mean_steps": self.mean_steps, "fraction_equal": self.fraction_equal,
            "untuned_max_steps": self.untuned_max_steps,
            "runtime_steps": dict(self.runtime_steps),
            "machine": self.machine, "date": self.date, "load_average": self.load_average,
            "busy_warning": self.busy_warning,
            "tasks_vs_default": (None if self.tasks_vs_default is None
                                 else [c.to_dict() for c in self.tasks_vs_default]),
        }

    def rows(self) -> List[List[str]]:
        """Table rows: configuration, median ms, spread, vs TVM tuned, vs each reference."""
        return [[self.label(label),
                 f"{timing.median_ms:.3f}", f"{timing.spread_ms:.3f}",
                 f"{self.ratio(label, TUNED):.2f}x",
                 *[f"{self.ratio(label, ref):.2f}x" for ref in self.references]]
                for label, timing in self.timings.items()]


TUNED, UNTUNED, PYTORCH, ONNX_RUNTIME = ("TVM tuned", "TVM untuned", "PyTorch int8",
                                       "ONNX Runtime int8")
PathLike = Union[str, os.PathLike]


T = TypeVar("T")


class TVMThread:
    """A thread whose TVM CPU thread pool really has ``threads`` workers, to run TVM work on.

    TVM 0.19 sizes a thread's pool once, when that thread first runs parallel code, from
    ``TVM_NUM_THREADS`` (else half the logical CPUs: one thread on a 2-CPU machine), and reads
    the variable again before every parallel launch; ``runtime.config_threadpool(0, n)`` cannot
    widen a pool beyond its size (measured: int8 ResNet-50 ran as fast with it as on one
    thread). So TVM work goes to this thread, whose pool is created with the variable set, and
    the variable stays set while the thread lives. Everything else stays on the caller's thread:
    PyTorch's int8 ResNet-18 at 2 threads took 5.8 ms from a second Python thread against 3.7 ms
    from the main one.

        with TVMThread(2) as tvm_thread:
            output, timer = tvm_thread.tvm_timer(lib, inputs, 10)
            seconds = timer()
    """

    def __init__(self, threads: int):
        self.threads = int(threads)
        self._jobs: "queue.Queue" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._previous: Optional[str] = None

    def __enter__(self) -> "TVMThread":
        self._previous = os.environ.get("TVM_NUM_THREADS")
        os.environ["TVM_NUM_THREADS"] = str(self.threads)
        self._thread = threading.Thread(target=self._serve, name=f"tvm-{self.threads}-threads",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._jobs.put(None)
        self._thread.join()
        if self._previous is None:
            os.environ.pop("TVM_NUM_THREADS", None)
        else:
            os.environ["TVM_NUM_THREADS"] = self._previous

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            work, answer = job
            try:
                answer.put((True, work()))
            except BaseException as error:  # pylint: disable=broad-except - re-raised in run()
                answer.put((False, error))

    def run(self, work: Callable[[], T]) -> T:
        """``work()`` on the TVM thread; its result, or its exception raised here."""
        answer: "queue.Queue" = queue.Queue(maxsize=1)
        self._jobs.put((work, answer))
        ok, value = answer.get()
        if not ok:
            raise value
        return value

    def timer(self, one_round: Callable[[], float]) -> Callable[[], float]:
        """A timer that times ``one_round`` on the TVM thread (the hop is outside the timing)."""
        return lambda: self.run(one_round)

    def tvm_timer(self, lib, inputs: Dict[str, np.ndarray],
                  number: int) -> Tuple[np.ndarray, Callable[[], float]]:
        """:func:`tvm_timer` made and timed on the TVM thread: ``lib``'s first output and a
        timer of one round (the mean seconds of ``number`` runs)."""
        output, one_round = self.run(lambda: tvm_timer(lib, inputs, number))
        return output, self.timer(one_round)


def with_tvm_threads(threads: int, work: Callable[[], T]) -> T:
    """``work()`` run where TVM's CPU thread pool really has ``threads`` workers (a
    :class:`TVMThread`); its result."""
    with TVMThread(threads) as tvm_thread:
        return tvm_thread.run(work)


def load_average() -> Optional[float]:
    """The 1-minute load average (runnable processes), None where the OS does not tell."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def tvm_timer(lib, inputs: Dict[str, np.ndarray], number: int) -> Tuple[np.ndarray, Callable[[], float]]:
    """Load ``lib`` on the CPU, run it once (warm-up) and return its first output with a
    function that times one round: the mean seconds of ``number`` runs."""
    device = tvm.cpu()
    module = graph_module(lib, inputs, device)
    module.run()
    output = module.get_output(0).numpy()
    # time_evaluator makes one untimed call before the timed ones, on every call (ROUND_WARM_UP).
    evaluator = module.module.time_evaluator("run", device, number=number, repeat=1)
    return output, lambda: float(evaluator().results[0])


def torch_timer(module, example_input: np.ndarray, number: int) -> Callable[[], float]:
    """Run ``module`` once on ``example_input`` (warm-up) and return a function that times one
    round: the mean seconds of ``number`` calls, without autograd."""
    data = torch.from_numpy(np.ascontiguousarray(example_input))

    def one_round() -> float:
        with torch.no_grad():
            module(data)  # untimed (see ROUND_WARM_UP)
            start = time.perf_counter()
            for _ in range(number):
                module(data)
            return (time.perf_counter() - start) / number

    with torch.no_grad():
        module(data)
    return one_round


# ROUND_WARM_UP: every timer's round starts with one untimed run. After the pause below, the first
# run of a runtime is slow (its worker threads, and on a VM the vCPUs, must wake up): measured on
# tiny_resnet 32x32, 2 threads, PyTorch took 0.10 ms back to back, 0.20 ms per run after a 50 ms
# pause and 1.17 ms after 300 ms, and 2.4 ms in bench beside TVM, whose time_evaluator already
# makes an untimed call first. A run untimed for each, the same for all.
#
# A pause before each configuration of a round: TVM's and PyTorch's worker threads spin for a
# while after a run before they sleep, and the runtime timed next would share the cores with them.
# Measured on int8 ResNet-18, 2 threads: PyTorch alone 3.7 ms, right after TVM 8.1 ms. How long
# they spin depends on the machine: TVM's pool workers call sched_yield 300,000 times
# (TVM_THREAD_POOL_SPIN_COUNT) before they sleep, which took under 50 ms on the Intel VM and longer
# than that on the AMD EPYC VM, where PyTorch's tiny_resnet 32x32 then took 4-6 ms a run in the
# rounds right after TVM's against 0.16 ms alone (2026-12-01). So the pause lasts at least
# SETTLE_S and then until this process's threads stop using the CPU (at most SETTLE_MAX_S).
SETTLE_S = 0.05
SETTLE_MAX_S = 2.0
_SETTLE_WINDOW_S = 0.02
_SETTLE_BUSY_FRACTION = 0.1  # of one CPU: above it, some thread of ours still spins


def settle(min_s: float = SETTLE_S, max_s: float = SETTLE_MAX_S,
           window_s: float = _SETTLE_WINDOW_S) -> float:
    """Sleep ``min_s``, then in ``window_s`` steps until this process's threads used less than a
    tenth of one CPU over the last step, for at most ``max_s`` in all; the seconds slept.

    The CPU time is the process's own (``time.process_time``: every thread of it, TVM's, PyTorch's
    and ONNX Runtime's pools included), so other processes' load does not prolong the wait."""
    start = time.perf_counter()
    time.sleep(min_s)
    while time.perf_counter() - start < max_s:
        cpu, wall = time.process_time(), time.perf_counter()
        time.sleep(window_s)
        if time.process_time() - cpu < _SETTLE_BUSY_FRACTION * (time.perf_counter() - wall):
            break
    return time.perf_counter() - start


def interleaved_rounds(timers: Dict[str, Callable[[], float]], repeats: int,
                       settle_s: float = SETTLE_S) -> Dict[str, List[float]]:
    """``repeats`` rounds, each calling every timer once in order after a pause of at least
    ``settle_s`` that also waits for this process's spinning worker threads to go idle
    (:func:`settle`): a change of load during the measurement hits every configuration alike, and
    no runtime's spinning threads are left running into the next one's time. Seconds per round,
    per timer."""
    samples: Dict[str, List[float]] = {label: [] for label in timers}
    for _ in range(repeats):
        for label, one_round in timers.items():
            settle(settle_s)
            samples[label].append(one_round())
    return samples


def reference_timers(loaded: LoadedModel, number: int, threads: int,
                     onnx_model: Optional[PathLike] = None
                     ) -> Tuple[Dict[str, Callable[[], float]], Dict[str, np.ndarray]]:
    """Timers of the runtimes TVM is compared with, one round each (the mean of ``number`` runs):
    PyTorch's int8 module when the model came from TorchScript (or the exported program of a PT2E
    model), ONNX Runtime's int8 CPU session
    (on ``threads`` intra-op threads) when it came from ONNX or when ``onnx_model`` (an ONNX export
    of the same network, such as :func:`relay_ext.frontend.onnx_export.export_quantized`) is
    given. ONNX Runtime's threads do not spin after a run here: spinning threads would take the
    cores from the configuration timed next.

    Also the outputs of the timed runtimes that run the model itself but are not its reference:
    ONNX Runtime int8 for an ONNX model, whose reference is the graph as written (an export's
    output is another quantization, and PyTorch's is the reference itself)."""
    from ..frontend.onnx_runtime import OnnxRuntimeReference, onnxruntime_timer

    timers: Dict[str, Callable[[], float]] = {}
    outputs: Dict[str, np.ndarray] = {}
    if loaded.torchscript is not None:
        timers[PYTORCH] = torch_timer(loaded.torchscript, loaded.example_input, number)
    # A PT2E program (frontend.pt2e_import): PyTorch running the exported program is the reference.
    program_module = getattr(loaded.reference, "torch_module", None)
    if loaded.torchscript is None and program_module is not None:
        timers[loaded.reference_name] = torch_timer(program_module, loaded.example_input, number)
    own = isinstance(loaded.reference, OnnxRuntimeReference)
    onnx = loaded.reference if own else onnx_model
    if onnx is not None:
        output, timers[ONNX_RUNTIME] = onnxruntime_timer(onnx, loaded.inputs, number, threads,
                                                         allow_spinning=False)
        if own:
            outputs[ONNX_RUNTIME] = output
    return timers, outputs


def measure_latency(loaded: LoadedModel, database: ms.Database, target: TargetLike = "llvm",
                    variant: str = "ours", repeats: int = 10, number: int = 10,
                    threads: Optional[int] = None,
                    onnx_model: Optional[PathLike] = None,
                    never_slower: bool = True) -> BenchResult:
    """Compile ``loaded`` with ``database``'s records and with TVM's defaults, check both builds'
    outputs against the model's reference runtime (PyTorch, or ONNX Runtime for an ONNX model)
    in output quantization steps, and time them beside :func:`reference_timers` on the same input
    with the same thread count: median of ``repeats`` interleaved rounds, each round timing every
    configuration once as the mean of ``number`` runs.

    ``never_slower``: a task whose best record runs slower than TVM's default schedule of the
    task (both timed here with ``threads`` threads) is compiled with the default
    (:mod:`relay_ext.tuning.never_slower`); the result's ``tasks_vs_default`` lists them all."""
    if loaded.output_scale is None:
        raise ValueError(f"model {loaded.name!r} is not quantized (no output scale)")
    target, variant = normalize_target(target), check_variant(variant)
    check_runs_here(target)  # timing code this CPU cannot execute would kill the process
    threads = int(threads or os.cpu_count() or 1)
    load = load_average()  # before our own compile adds to it
    comparisons = None
    if never_slower:
        lib, kept = with_tvm_threads(threads, lambda: compile_never_slower(
            database, loaded.mod, loaded.params, target, variant))
        libs, comparisons = {TUNED: lib}, kept.comparisons
    else:
        libs = {TUNED: build_with_records(database, loaded.mod, loaded.params, target, variant)}
    with tvm.transform.PassContext(opt_level=3, config=BUILD_OPTIONS):
        libs[UNTUNED] = build_untuned(loaded.mod, loaded.params, target)

    old_torch_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with TVMThread(threads) as tvm_thread:
            outputs, timers = {}, {}
            for label, lib in libs.items():
                outputs[label], timers[label] = tvm_thread.tvm_timer(lib, loaded.inputs, number)
            reference_clocks, runtime_outputs = reference_timers(loaded, number, threads, onnx_model)
            timers.update(reference_clocks)
            samples = interleaved_rounds(timers, repeats)
        expected = loaded.run_reference()
    finally:
        torch.set_num_threads(old_torch_threads)
    error = step_error(outputs[TUNED], expected, loaded.output_scale)
    return BenchResult(
        model=loaded.name, input_shape=tuple(loaded.input_shape), target=str(target),
        variant=variant, threads=threads, repeats=repeats, number=number,
        timings={label: Timing(seconds) for label, seconds in samples.items()},
        reference=loaded.reference_name, max_steps=error.max_steps,
        mean_steps=error.mean_steps, fraction_equal=error.fraction_equal,
        untuned_max_steps=step_error(outputs[UNTUNED], expected, loaded.output_scale).max_steps,
        runtime_steps={label: step_error(output, expected, loaded.output_scale).max_steps
                       for label, output in runtime_outputs.items()},
        tasks_vs_default=comparisons,
        machine=machine_description(), load_average=load,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
