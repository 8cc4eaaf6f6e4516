"""CPU latency of a tuned quantized model: TVM tuned, TVM untuned and PyTorch's int8 module.

:func:`measure_latency` returns the numbers (a :class:`BenchResult`); ``quantfuse bench`` prints
them as a table, and :func:`write_report` writes ``report.md`` and a PNG bar chart.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import statistics
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, TypeVar

import numpy as np
import torch
import tvm
from tvm import meta_schedule as ms

from .accuracy import build_untuned, run_torchscript, step_error
from .config import BUILD_OPTIONS
from .executing import graph_module
from .models import LoadedModel
from .targets import check_runs_here
from .tuning import compile_model, normalize_target

REPORT_FILE = "report.md"
CHART_FILE = "latency.png"


@dataclasses.dataclass
class Timing:
    """Seconds per run, one value per repeat (each the mean of ``number`` runs)."""

    name: str
    seconds: List[float]

    @property
    def median_ms(self) -> float:
        return 1e3 * statistics.median(self.seconds)

    @property
    def spread_ms(self) -> float:
        """max - min over repeats, in ms."""
        return 1e3 * (max(self.seconds) - min(self.seconds))


@dataclasses.dataclass
class BenchResult:
    model: str
    input_shape: tuple
    target: str
    variant: str
    threads: int
    repeats: int
    number: int
    tuned: Timing
    untuned: Timing
    torch: Timing
    max_steps: float  # tuned TVM vs PyTorch, output quantization steps
    mean_steps: float
    fraction_equal: float
    untuned_max_steps: float
    machine: str
    date: str
    load_average: Optional[float] = None  # 1-minute load before the bench compiled anything

    @property
    def busy_warning(self) -> Optional[str]:
        """A warning when other processes were competing for the CPU (load above the threads)."""
        if self.load_average is None or self.load_average <= self.threads:
            return None
        return (f"WARNING: the load average was {self.load_average:.2f} before timing, above the "
                f"{self.threads} thread(s) timed: other processes compete for the CPU and these "
                "figures are not trustworthy; rerun on a quiet machine")

    def ratio(self, name: str, reference: str) -> float:
        """median(name) / median(reference): > 1 means ``name`` is slower."""
        return getattr(self, name).median_ms / getattr(self, reference).median_ms

    def rows(self) -> List[List[str]]:
        """Table rows: what, median ms, spread, vs TVM tuned, vs PyTorch."""
        rows = []
        for key, label in (("tuned", f"TVM tuned ({self.variant})"), ("untuned", "TVM untuned"),
                           ("torch", "PyTorch int8")):
            timing = getattr(self, key)
            rows.append([label, f"{timing.median_ms:.3f}", f"{timing.spread_ms:.3f}",
                         f"{self.ratio(key, 'tuned'):.2f}x", f"{self.ratio(key, 'torch'):.2f}x"])
        return rows

    HEADER = ["", "median ms", "spread ms", "/ TVM tuned", "/ PyTorch"]


def machine_description() -> str:
    """The CPU model, core count, memory, OS and Python of this machine, for reports."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        if names:
            cpu = names[0]
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{cpu}, {os.cpu_count()} logical CPUs, {mem_gib:.0f} GiB, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}")


T = TypeVar("T")


def with_tvm_threads(threads: int, work: Callable[[], T]) -> T:
    """``work()`` run where TVM's CPU thread pool really has ``threads`` workers; its result.

    TVM 0.19 sizes a thread's pool once, when that thread first runs parallel code, from
    ``TVM_NUM_THREADS`` (else half the logical CPUs: one thread on a 2-CPU machine), and reads
    the variable again before every parallel launch; ``runtime.config_threadpool(0, n)`` cannot
    widen a pool beyond its size (measured: int8 ResNet-50 ran as fast with it as on one
    thread). So ``work`` runs in a new thread, whose pool is created with the variable set, and
    the variable stays set until it returns.
    """
    outcome: Dict[str, object] = {}

    def body() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # pylint: disable=broad-except - re-raised below
            outcome["error"] = error

    previous = os.environ.get("TVM_NUM_THREADS")
    os.environ["TVM_NUM_THREADS"] = str(int(threads))
    try:
        worker = threading.Thread(target=body, name=f"tvm-{threads}-threads", daemon=True)
        worker.start()
        worker.join()
    finally:
        if previous is None:
            os.environ.pop("TVM_NUM_THREADS", None)
        else:
            os.environ["TVM_NUM_THREADS"] = previous
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


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
    evaluator = module.module.time_evaluator("run", device, number=number, repeat=1)
    return output, lambda: float(evaluator().results[0])


def torch_timer(module, example_input: np.ndarray, number: int) -> Callable[[], float]:
    """Run ``module`` once on ``example_input`` (warm-up) and return a function that times one
    round: the mean seconds of ``number`` calls, without autograd."""
    data = torch.from_numpy(np.ascontiguousarray(example_input))

    def one_round() -> float:
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(number):
                module(data)
            return (time.perf_counter() - start) / number

    with torch.no_grad():
        module(data)
    return one_round


def measure_latency(loaded: LoadedModel, database: ms.Database, target="llvm",
                    variant: str = "ours", repeats: int = 10, number: int = 10,
                    threads: Optional[int] = None) -> BenchResult:
    """Compile ``loaded`` with ``database``'s records and with TVM's defaults, check the tuned
    build's output against the TorchScript module, and time all three on the same input with
    the same thread count (median of ``repeats`` interleaved rounds, each round timing all three
    once as the mean of ``number`` runs)."""
    if loaded.output_scale is None:
        raise ValueError(f"model {loaded.name!r} is not quantized (no output scale)")
    target = normalize_target(target)
    check_runs_here(target)  # timing code this CPU cannot execute would kill the process
    threads = int(threads or os.cpu_count() or 1)
    load = load_average()  # before our own compile adds to it
    tuned_lib = compile_model(database, loaded.mod, loaded.params, target, variant)
    with tvm.transform.PassContext(opt_level=3, config=BUILD_OPTIONS):
        untuned_lib = build_untuned(loaded.mod, loaded.params, target)

    def timed_rounds():
        tuned_out, tuned_round = tvm_timer(tuned_lib, loaded.inputs, number)
        untuned_out, untuned_round = tvm_timer(untuned_lib, loaded.inputs, number)
        torch_round = torch_timer(loaded.torchscript, loaded.example_input, number)
        tuned_s, untuned_s, torch_s = [], [], []
        for _ in range(repeats):  # interleaved rounds: a load change hits all three alike
            tuned_s.append(tuned_round())
            untuned_s.append(untuned_round())
            torch_s.append(torch_round())
        return tuned_out, untuned_out, tuned_s, untuned_s, torch_s

    old_torch_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        tuned_out, untuned_out, tuned_s, untuned_s, torch_s = with_tvm_threads(threads, timed_rounds)
        expected = run_torchscript(loaded.torchscript, loaded.example_input)
    finally:
        torch.set_num_threads(old_torch_threads)
    error = step_error(tuned_out, expected, loaded.output_scale)
    untuned_error = step_error(untuned_out, expected, loaded.output_scale)
    return BenchResult(
        model=loaded.name, input_shape=tuple(loaded.input_shape), target=str(target),
        variant=variant, threads=threads, repeats=repeats, number=number,
        tuned=Timing("TVM tuned", tuned_s), untuned=Timing("TVM untuned", untuned_s),
        torch=Timing("PyTorch int8", torch_s), max_steps=error.max_steps,
        mean_steps=error.mean_steps, fraction_equal=error.fraction_equal,
        untuned_max_steps=untuned_error.max_steps, machine=machine_description(),
        load_average=load,
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))


def write_chart(result: BenchResult, path: Path) -> Path:
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # pylint: disable=import-outside-toplevel

    labels = [row[0] for row in result.rows()]
    timings = [result.tuned, result.untuned, result.torch]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    bars = ax.bar(labels, [t.median_ms for t in timings], color=["#2a7", "#999", "#d63"],
                  yerr=[[t.median_ms - 1e3 * min(t.seconds) for t in timings],
                        [1e3 * max(t.seconds) - t.median_ms for t in timings]], capsize=4)
    ax.bar_label(bars, fmt="%.3f ms", padding=2)
    ax.set_ylabel("latency, ms (median; bars: min-max)")
    ax.set_title(f"{result.model} {'x'.join(map(str, result.input_shape))}, "
                 f"{result.threads} threads")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report_markdown(result: BenchResult) -> str:
    rows = result.rows()
    lines = [
        f"# quantfuse bench: {result.model}", "",
        f"- Input shape {'x'.join(map(str, result.input_shape))}, batch 1; target `{result.target}`; "
        f"rule set `{result.variant}`.",
        f"- {result.threads} threads for TVM and PyTorch; median of {result.repeats} repeats, "
        f"each the mean of {result.number} runs (TVM: `time_evaluator`).",
        f"- Machine: {result.machine}. Date: {result.date}. Load average before the bench: "
        f"{'unknown' if result.load_average is None else f'{result.load_average:.2f}'}.",
        "- The model's weights are random (fixed seed) and it was calibrated on random data: the "
        "numbers measure speed and agreement with PyTorch, not accuracy on a dataset.",
        f"- TVM tuned vs PyTorch's quantized TorchScript module: max {result.max_steps:.2f} "
        f"output quantization steps apart (mean {result.mean_steps:.3f}, "
        f"{100 * result.fraction_equal:.1f}% of outputs equal); TVM untuned: max "
        f"{result.untuned_max_steps:.2f} steps.",
        "",
        "| " + " | ".join(result.HEADER) + " |", "|" + "---|" * len(result.HEADER),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    if result.busy_warning:
        lines += ["", f"**{result.busy_warning}**"]
    lines += ["", "Ratios are median / median: above 1 is slower than the column's reference.", "",
              f"![latency]({CHART_FILE})", ""]
    return "\n".join(lines)


def write_report(result: BenchResult, work_dir) -> Dict[str, Path]:
    """``report.md`` and the PNG chart in ``work_dir``; returns their paths."""
    work_dir = Path(work_dir)
    chart = write_chart(result, work_dir / CHART_FILE)
    report = work_dir / REPORT_FILE
    report.write_text(report_markdown(result))
    return {"report": report, "chart": chart}
