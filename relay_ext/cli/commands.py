"""``quantfuse``: the command line of quantfuse.

    quantfuse models                                   # the built-in quantized models
    quantfuse fusion --model resnet50 --target nvidia/nvidia-a100 [--json] [--out report.md]
    quantfuse tune --model resnet18 --target llvm --trials 200 --work-dir work   # resumable
    quantfuse tune ... --rpc 127.0.0.1:9190:cpu   # measure on a TVM RPC tracker's servers
    quantfuse bench --model resnet18 --target llvm --work-dir work   # TVM vs PyTorch, report.md
    quantfuse demo [--work-dir D]        # fusion, short tune, accuracy, bench on tiny_resnet

``--model`` takes a built-in name or a TorchScript file (then ``--input-shape 1,3,224,224``).
Bad input (unknown model, bad target, unwritable work dir, trials <= 0, a work dir whose database
is not MetaSchedule's, an unreachable RPC tracker) is one line on stderr and exit code 2; ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import List, Optional, Sequence

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a Ctrl-C
RUN_FILE = "quantfuse_tune.json"  # what a work dir was tuned for: model, target, variant
logger = logging.getLogger("quantfuse")


class BadInput(Exception):
    """Wrong input from the user: one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print the usage and exit; we print one line
        raise BadInput(f"{message} (see '{self.prog} --help')")


# --- arguments ----------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--verbose", action="store_true", help="debug logging; tracebacks on errors")
    model = _Parser(add_help=False)
    model.add_argument("--model", required=True,
                       help="a built-in model (see 'quantfuse models') or a TorchScript file")
    model.add_argument("--input-shape", help="the input shape of a TorchScript file, e.g. 1,3,224,224")
    model.add_argument("--image-size", type=_positive_int, default=224,
                       help="input image size of a built-in image model (default 224)")
    model.add_argument("--layout", default="NCHW", choices=["NCHW", "NHWC"],
                       help="conv2d data layout of the Relay module (default NCHW)")
    model.add_argument("--target", required=True,
                       help="a TVM target: llvm, 'llvm -num-cores 4', nvidia/nvidia-a100, "
                            "'cuda -arch=sm_80' ...")

    parser = _Parser(prog="quantfuse", description=__doc__.split("\n", 1)[1], parents=[common],
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    sub.add_parser("models", parents=[common], help="list the built-in quantized models",
                   description="List the built-in quantized models and what they are.")
    fusion = sub.add_parser(
        "fusion", parents=[common, model], help="static fusion report (no tuning)",
        description="For each tuning task: its anchor op, the global-memory intermediates its "
                    "design spaces leave under each variant (worst space) and the bytes of global "
                    "traffic they cost (write + read); totals per variant. Nothing is tuned.")
    fusion.add_argument("--variants", default="legacy,upstream,ours",
                        help="comma-separated variants to compare (default legacy,upstream,ours)")
    fusion.add_argument("--json", action="store_true", help="print the report as JSON")
    fusion.add_argument("--out", help="also write the report as a Markdown table to this file")
    tune = sub.add_parser(
        "tune", parents=[common, model], help="tune with MetaSchedule into a work dir (resumable)",
        description="Tune the model's tasks with MetaSchedule; the JSON database goes to "
                    "--work-dir, progress (trials, tasks measured, estimated latency) to stderr. "
                    "--trials is the total budget of the work dir: running the same command "
                    "again continues from the records it holds and never measures a recorded "
                    "candidate again. Ctrl-C finishes the candidates in flight, keeps every "
                    "record and exits 130 (twice: stop at once). A half-written last line (a "
                    "killed run) is set aside in <file>.broken-<time> with a warning.")
    tune.add_argument("--trials", type=_positive_int, required=True,
                      help="total number of measured candidates for the work dir")
    tune.add_argument("--work-dir", required=True, help="directory of the tuning database")
    tune.add_argument("--variant", default="ours", help="rule set: ours (default), upstream, legacy")
    tune.add_argument("--seed", type=int, default=None, help="random seed of the search")
    tune.add_argument("--rpc", metavar="HOST:PORT:KEY", default=None,
                      help="measure on the servers registered under KEY with the TVM RPC tracker "
                           "at HOST:PORT (default: measure on this machine)")
    bench = sub.add_parser(
        "bench", parents=[common, model], help="latency: TVM tuned vs untuned vs PyTorch int8",
        description="Compile the model with the work dir's tuned database, check its output "
                    "against PyTorch's quantized TorchScript module (in output quantization "
                    "steps), time TVM (time_evaluator), PyTorch and TVM's untuned default build "
                    "on the same input with the same thread count; print a table with ratios and "
                    "write report.md and latency.png into the work dir.")
    bench.add_argument("--work-dir", required=True, help="a work dir that 'quantfuse tune' filled")
    bench.add_argument("--variant", default="ours", help="rule set it was tuned with (default ours)")
    bench.add_argument("--repeats", type=_positive_int, default=10,
                       help="timed repeats; the median is reported (default 10)")
    bench.add_argument("--number", type=_positive_int, default=10,
                       help="runs per repeat (default 10)")
    bench.add_argument("--threads", type=_positive_int, default=None,
                       help="threads for TVM and PyTorch (default: all CPUs)")
    demo = sub.add_parser(
        "demo", parents=[common], help="the whole job on tiny_resnet, in a few minutes",
        description="On the built-in tiny_resnet: fusion report (nvidia/nvidia-a100, all "
                    "variants), a short tune on llvm, compile, accuracy check against PyTorch "
                    "and the latency bench.")
    demo.add_argument("--work-dir", default=None,
                      help="where the tuning database and report go (default: a new temp dir)")
    demo.add_argument("--trials", type=_positive_int, default=None,
                      help="tuning budget (default: 2 per task)")
    demo.add_argument("--image-size", type=_positive_int, default=32,
                      help="input image size (default 32)")
    return parser


# --- shared steps -------------------------------------------------------------------------------


def _target(text: str, variant: str = "ours"):
    """--target, parsed and checked (an -mcpu LLVM does not know, a target without MetaSchedule
    defaults: BadInput); an llvm target gets its -num-cores."""
    import meta_rules
    from relay_ext.targets import normalize_target

    try:
        target = normalize_target(text)
        meta_rules.schedule_rules(target, variant)  # a target MetaSchedule has no defaults for
    except ValueError as error:
        examples = "" if "for this machine" in str(error) else \
            "; examples: llvm -mcpu=core-avx2, nvidia/nvidia-a100"
        raise BadInput(f"{error}{examples}") from None
    return target


def _check_runs_here(target) -> None:
    """Measuring here: refuse a target whose code this machine cannot execute (BadInput)."""
    from relay_ext.targets import TargetNotRunnable, check_runs_here

    try:
        check_runs_here(target)
    except TargetNotRunnable as error:
        raise BadInput(str(error)) from None


def _parse_shape(text: Optional[str]):
    if not text:
        raise BadInput("a TorchScript model needs its input shape: add --input-shape 1,3,224,224")
    try:
        shape = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise BadInput(f"--input-shape {text!r} is not a list of positive integers, e.g. 1,3,224,224")
    return shape


def _looks_like_path(text: str) -> bool:
    return os.sep in text or text.endswith((".pt", ".pth", ".ts", ".torchscript")) or os.path.exists(text)


def _check_model(args) -> None:
    """The cheap checks of --model, before anything slow runs."""
    from relay_ext import models

    if _looks_like_path(args.model):
        _parse_shape(args.input_shape)
        if not os.path.isfile(args.model):
            raise BadInput(f"TorchScript file not found: {args.model}; pass a built-in model "
                           f"({', '.join(models.available_models())}) or an existing file")
    elif args.model not in models.MODELS:
        raise BadInput(f"unknown model {args.model!r}; built-in models: "
                       f"{', '.join(models.available_models())} (or a TorchScript file path)")


def _load_model(args):
    from relay_ext import models

    _check_model(args)
    try:
        if _looks_like_path(args.model):
            return models.from_torchscript(args.model, {models.DEFAULT_INPUT_NAME: _parse_shape(args.input_shape)},
                                           layout=args.layout)
        return models.load(args.model, image_size=args.image_size, layout=args.layout)
    except (ValueError, FileNotFoundError) as error:
        raise BadInput(str(error)) from None


def _writable_dir(path: str) -> Path:
    work_dir = Path(path)
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=work_dir, prefix=".quantfuse-write-test"):
            pass
    except OSError as error:
        raise BadInput(f"cannot write to work dir {path!r} ({error.strerror or error}); "
                       "pass a --work-dir you can write to") from None
    return work_dir


# --- commands -----------------------------------------------------------------------------------


def cmd_models(args) -> int:
    from relay_ext.demo import print_table
    from relay_ext import models

    rows = [[name, models.MODELS[name].description] for name in models.available_models()]
    print_table(["model", "description"], rows)
    print("\nOr a TorchScript file: --model my_model.pt --input-shape 1,3,224,224")
    return 0


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def failure_reasons(report) -> List[str]:
    """TVM's reasons for the tasks whose design spaces failed, each once, in table order."""
    reasons = [task.variants[v].failed for task in report.tasks for v in report.variants]
    return list(dict.fromkeys(r for r in reasons if r is not None))


def fusion_rows(report) -> List[List[str]]:
    """The fusion table's rows; a failed task's cell points at its reason in failure_reasons."""
    reasons = failure_reasons(report)

    def cell(result) -> str:
        if result.failed is not None:
            return f"failed [{reasons.index(result.failed) + 1}]"
        return f"{result.intermediates} ({_human_bytes(result.bytes)})"

    rows = []
    for task in report.tasks:
        rows.append([task.name if len(task.name) <= 60 else task.name[:57] + "...", task.anchor]
                    + [cell(task.variants[v]) for v in report.variants])
    totals = report.totals
    rows.append(["TOTAL", f"{len(report.tasks)} tasks"]
                + [f"{totals[v]['intermediates']} ({_human_bytes(totals[v]['bytes'])}) in "
                   f"{totals[v]['tasks_with_intermediates']} tasks"
                   + (f"; {totals[v]['tasks_failed']} failed" if totals[v]["tasks_failed"] else "")
                   for v in report.variants])
    return rows


def _markdown(report, title: str) -> str:
    header = ["task", "anchor", *report.variants]
    lines = [f"# Fusion report: {title}", "", f"Target: `{report.target}`", "",
             "Global-memory intermediates of each task's worst design space, and the bytes of "
             "global traffic they cost (write + read).", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in fusion_rows(report)]
    notes = _failure_notes(report)
    if notes:
        lines += ["", *[f"- {note}" for note in notes]]
    return "\n".join(lines) + "\n"


def _failure_notes(report) -> List[str]:
    return [f"[{n}] TVM could not generate design spaces (tried other random states and without "
            f"the failing rule): {reason}" for n, reason in enumerate(failure_reasons(report), 1)]


def cmd_fusion(args) -> int:
    from relay_ext.demo import print_table
    from relay_ext.fusion_report import fusion_report, parse_variants

    try:
        variants = parse_variants(args.variants)
    except ValueError as error:
        raise BadInput(f"--variants: {error}") from None
    _check_model(args)
    target = _target(args.target, variants[0])
    out = Path(args.out) if args.out else None
    if out is not None and not os.access(out.parent if str(out.parent) else ".", os.W_OK):
        raise BadInput(f"cannot write --out {args.out!r}: its directory is missing or not writable")
    loaded = _load_model(args)
    report = fusion_report(loaded.mod, loaded.params, target, variants)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(f"Fusion report for {loaded.name} ({loaded.layout}) on {report.target}")
        print("per variant: global-memory intermediates of the worst design space (bytes of "
              "global traffic, write + read)\n")
        print_table(["task", "anchor", *report.variants], fusion_rows(report))
        for note in _failure_notes(report):
            print(note)
    if out is not None:
        out.write_text(_markdown(report, f"{loaded.name} ({loaded.layout})"))
        print(f"\nwrote {out}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _search_strategy():
    """MetaSchedule's search strategy for ``quantfuse tune`` (tests replace it by a small one)."""
    return "evolutionary"


def _recorded_run(work_dir: Path) -> Optional[dict]:
    """What ``work_dir`` was tuned for (its RUN_FILE), or None when nothing was tuned there yet."""
    path = work_dir / RUN_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise BadInput(f"{path} is not quantfuse's (not JSON); remove it or pick another --work-dir") from None


def _check_same_run(work_dir: Path, run: dict) -> None:
    previous = _recorded_run(work_dir)
    if previous is None:
        return
    different = {k: (previous.get(k), v) for k, v in run.items() if previous.get(k) != v}
    if different:
        what = ", ".join(f"{k} {old!r} (now {new!r})" for k, (old, new) in different.items())
        raise BadInput(f"work dir {str(work_dir)!r} holds tuning for {what}; "
                       "run the same command again to resume, or pick another --work-dir")


def _checked_variant_model_target(args):
    """Check --variant and --model (BadInput naming the option), return the normalized target."""
    from meta_rules.rule_sets import check_variant

    try:
        check_variant(args.variant)
    except ValueError as error:
        raise BadInput(f"--variant: {error}") from None
    _check_model(args)
    return _target(args.target, args.variant)


def _warn_if_generic_llvm(text: str, target) -> None:
    """Plain llvm builds for generic x86-64: say so, once every input check has passed."""
    from relay_ext.targets import host_target_text, is_generic_x86

    if is_generic_x86(target):
        logger.warning("--target %r has no -mcpu: TVM compiles for generic x86-64 (no AVX2 or "
                       "AVX-512), and int8 code is ~25x slower; for this machine use --target "
                       "'%s'", text, host_target_text())


def _runner(rpc: Optional[str]):
    """'local', or MetaSchedule's RPCRunner for --rpc once the tracker answered (BadInput if not)."""
    from relay_ext import rpc_tracker

    if rpc is None:
        return "local"
    try:
        address = rpc_tracker.parse_rpc_address(rpc)
        servers = rpc_tracker.check_tracker(address)
    except (ValueError, rpc_tracker.TrackerError) as error:
        raise BadInput(f"--rpc: {error}") from None
    print(f"measuring on {servers} RPC server(s) with key {address.key!r} at "
          f"{address.host}:{address.port}")
    return rpc_tracker.rpc_runner(address, max_workers=servers)


class ProgressPrinter:
    """Shows tuning progress: a bar redrawn in place on a terminal, one line per batch otherwise."""

    def __init__(self, stream):
        self.stream = stream
        self.interactive = hasattr(stream, "isatty") and stream.isatty()
        self.drawn = False

    def show(self, snapshot) -> None:
        from relay_ext.tuning_progress import progress_bar

        line = progress_bar(snapshot)
        if self.interactive:
            self.stream.write("\r" + line.ljust(100)[:160])
            self.drawn = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


def _records_kept(work_dir: Path) -> int:
    from relay_ext.database_repair import repair_database

    return repair_database(work_dir)["records"]


def cmd_tune(args) -> int:
    from relay_ext.database_repair import NotADatabaseError, repair_database
    from relay_ext.tuning import read_tuning_summary, tune

    target = _checked_variant_model_target(args)
    if args.rpc is None:  # with --rpc the target describes the remote devices
        _check_runs_here(target)
    runner = _runner(args.rpc)
    work_dir = _writable_dir(args.work_dir)
    try:
        before = repair_database(work_dir)
    except NotADatabaseError as error:
        raise BadInput(f"{error}; move it away or pick another --work-dir") from None
    run = {"model": os.path.abspath(args.model) if _looks_like_path(args.model) else args.model,
           "input_shape": args.input_shape if _looks_like_path(args.model) else None,
           "image_size": None if _looks_like_path(args.model) else args.image_size,
           "layout": args.layout, "target": str(target), "variant": args.variant}
    _check_same_run(work_dir, run)
    remaining = args.trials - before["records"]
    if remaining <= 0:
        print(f"{work_dir} already holds {before['records']} records (--trials {args.trials}); "
              "nothing to do. Raise --trials to tune further.")
        return 0
    loaded = _load_model(args)
    _warn_if_generic_llvm(args.target, target)
    (work_dir / RUN_FILE).write_text(json.dumps(run, indent=2))
    if before["records"]:
        print(f"resuming: {before['records']} records in {work_dir}, {remaining} trials to go")
    bar = ProgressPrinter(sys.stderr)
    try:
        database = tune(loaded.mod, loaded.params, target, work_dir, max_trials=remaining,
                        variant=args.variant, num_trials_per_iter=min(16, remaining),
                        seed=args.seed, strategy=_search_strategy(), runner=runner,
                        progress=bar.show)
    except KeyboardInterrupt:
        bar.close()
        kept = _records_kept(work_dir)
        print(f"quantfuse: interrupted; {work_dir} keeps {kept} records (the database is "
              "loadable); run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    bar.close()
    print(f"tuned {loaded.name} on {target} ({args.variant}): {len(database)} records in "
          f"{work_dir} (was {before['records']}); {_measured_line(read_tuning_summary(work_dir))}")
    return 0


def _measured_line(summary: dict) -> str:
    """'9 of 10 tasks have a valid measurement; 1 left to TVM's default schedule: name'."""
    left = summary["left_to_default_schedule"]
    line = f"{summary['tasks_measured']} of {len(summary['tasks'])} tasks have a valid measurement"
    if left:
        line += f"; {len(left)} left to TVM's default schedule: {', '.join(left)}"
    return line


def _check_bench_run(work_dir: Path, args) -> None:
    """Refuse a bench whose model does not match what the work dir was tuned for."""
    run = _recorded_run(work_dir)
    if run is None:
        return
    model = os.path.abspath(args.model) if _looks_like_path(args.model) else args.model
    now = {"model": model, "layout": args.layout, "variant": args.variant,
           "image_size": None if _looks_like_path(args.model) else args.image_size}
    different = [f"{k} {run.get(k)!r} (now {v!r})" for k, v in now.items()
                 if k in run and run.get(k) != v]
    if different:
        raise BadInput(f"work dir {str(work_dir)!r} was tuned for {', '.join(different)}; pass the "
                       "options you tuned with")


def _open_database(work_dir: Path):
    from tvm import meta_schedule as ms
    from relay_ext.database_repair import NotADatabaseError, RECORD_FILE, repair_database

    if not work_dir.is_dir():
        raise BadInput(f"work dir {str(work_dir)!r} does not exist; run 'quantfuse tune' first")
    try:
        held = repair_database(work_dir)
    except NotADatabaseError as error:
        raise BadInput(f"{error}; pick a work dir that 'quantfuse tune' filled") from None
    if not held["records"]:
        raise BadInput(f"work dir {str(work_dir)!r} has no tuning database ({RECORD_FILE}); run "
                       "'quantfuse tune --work-dir ...' first")
    return ms.database.JSONDatabase(work_dir=str(work_dir), allow_missing=False)


def bench(loaded, work_dir: Path, target, variant="ours", repeats=10, number=10, threads=None):
    """Measure, print the table, write report.md and the chart; returns the BenchResult."""
    from relay_ext.demo import print_table
    from relay_ext.latency_bench import BenchResult, measure_latency, write_report

    database = _open_database(work_dir)
    result = measure_latency(loaded, database, target, variant, repeats=repeats, number=number,
                             threads=threads)
    print(f"{result.model} {'x'.join(map(str, result.input_shape))} on {result.target}, "
          f"{result.threads} threads, median of {result.repeats} repeats x {result.number} runs")
    print(f"TVM tuned vs PyTorch: max {result.max_steps:.2f} output quantization steps apart "
          f"(mean {result.mean_steps:.3f}, {100 * result.fraction_equal:.1f}% equal); "
          f"untuned: {result.untuned_max_steps:.2f}\n")
    print_table(BenchResult.HEADER, result.rows())
    if result.busy_warning:
        print(f"\n{result.busy_warning}")
    paths = write_report(result, work_dir)
    print(f"\nwrote {paths['report']} and {paths['chart']}")
    return result


def cmd_bench(args) -> int:
    target = _checked_variant_model_target(args)
    if target.kind.name != "llvm":
        raise BadInput(f"bench runs on this CPU: --target must be llvm, got {args.target!r}")
    _check_runs_here(target)
    work_dir = Path(args.work_dir)
    _open_database(work_dir)  # before the slow model load
    _check_bench_run(work_dir, args)
    loaded = _load_model(args)
    if loaded.output_scale is None:
        raise BadInput(f"model {loaded.name!r} is not quantized; bench compares int8 models")
    _warn_if_generic_llvm(args.target, target)
    bench(loaded, work_dir, target, args.variant, args.repeats, args.number, args.threads)
    return 0


def _demo_search():
    """A small evolutionary search: the demo's tune takes seconds per task."""
    from tvm import meta_schedule as ms

    return ms.search_strategy.EvolutionarySearch(
        population_size=16, init_measured_ratio=0.5, init_min_unmeasured=4,
        genetic_num_iters=1, genetic_max_fail_count=2)


def cmd_demo(args) -> int:
    import time

    from relay_ext import models
    from relay_ext.demo import print_table
    from relay_ext.fusion_report import fusion_report
    from relay_ext.targets import host_llvm_target
    from relay_ext.tuning import extract_tasks, read_tuning_summary, tune

    import meta_rules

    start = time.monotonic()
    work_dir = _writable_dir(args.work_dir)
    llvm = host_llvm_target(os.cpu_count() or 1)  # the best -mcpu the OS enables the features of
    name = "tiny_resnet"

    def step(text):
        print(f"\n== [{time.monotonic() - start:5.1f} s] {text}", flush=True)

    step(f"fusion report: {name} {args.image_size}x{args.image_size}, nvidia/nvidia-a100, "
         "all variants (nothing tuned)")
    loaded = models.load(name, image_size=args.image_size)
    report = fusion_report(loaded.mod, loaded.params, _target("nvidia/nvidia-a100"),
                           list(meta_rules.VARIANTS))
    print_table(["task", "anchor", *report.variants], fusion_rows(report))

    n_tasks = len(extract_tasks(loaded.mod, loaded.params, llvm, "ours"))
    trials = args.trials or 2 * n_tasks
    step(f"tune on {llvm} (ours): {trials} trials over {n_tasks} tasks, into {work_dir}")
    database = tune(loaded.mod, loaded.params, llvm, work_dir, max_trials=trials, variant="ours",
                    num_trials_per_iter=min(4, trials), seed=0, strategy=_demo_search())
    (work_dir / RUN_FILE).write_text(json.dumps(
        {"model": name, "input_shape": None, "image_size": args.image_size, "layout": "NCHW",
         "target": str(llvm), "variant": "ours"}, indent=2))
    print(f"{len(database)} records; {_measured_line(read_tuning_summary(work_dir))}")

    step("compile with the tuned records, check against PyTorch, time TVM and PyTorch")
    result = bench(loaded, work_dir, llvm, "ours", repeats=10, number=10)
    ok = round(result.max_steps, 3) <= 3  # whole steps apart, up to float rounding
    step(f"done: TVM tuned is {result.max_steps:.2f} quantization steps from PyTorch "
         f"({'OK' if ok else 'MORE THAN 3'}); report in {work_dir}")
    return 0 if ok else EXIT_FAILED


COMMANDS = {"models": cmd_models, "fusion": cmd_fusion, "tune": cmd_tune, "bench": cmd_bench,
            "demo": cmd_demo}


# --- entry point --------------------------------------------------------------------------------


def _with_native_log(args, command) -> int:
    """Run ``command`` with TVM's native log lines in a file, not on the terminal: the work dir's
    ``logs/tvm.log`` when the command has a work dir that exists at the end, else a temporary
    file. One summary line goes to stderr (not after bad input: that stays one error line)."""
    from relay_ext.native_log import native_log_to

    captured = Path(tempfile.mkdtemp(prefix="quantfuse-log-")) / "tvm.log"
    bad_input = False
    try:
        with native_log_to(captured) as log:
            return command(args)
    except BadInput:
        bad_input = True
        raise
    finally:
        log.path = _keep_native_log(captured, getattr(args, "work_dir", None))
        line = None if bad_input else log.summary()
        if line:
            print(f"quantfuse: {line}", file=sys.stderr)


def _keep_native_log(captured: Path, work_dir: Optional[str]) -> Path:
    """Append the captured lines to ``work_dir/logs/tvm.log`` when the work dir exists (else keep
    the temporary file); an empty capture is removed. Returns where the lines are."""
    if not captured.exists() or captured.stat().st_size == 0:
        captured.unlink(missing_ok=True)
        captured.parent.rmdir()
        return captured
    if work_dir is None or not Path(work_dir).is_dir():
        return captured
    kept = Path(work_dir) / "logs" / captured.name
    try:
        kept.parent.mkdir(exist_ok=True)
        with open(kept, "ab") as out:
            out.write(captured.read_bytes())
    except OSError:
        return captured
    captured.unlink()
    captured.parent.rmdir()
    return kept


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("quantfuse: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    try:
        args = build_parser().parse_args(argv)
        if args.command == "demo" and args.work_dir is None:
            args.work_dir = tempfile.mkdtemp(prefix="quantfuse-demo-")
        if verbose or args.command == "models":
            return COMMANDS[args.command](args)
        return _with_native_log(args, COMMANDS[args.command])
    except SystemExit as exit_:  # --help
        return exit_.code if isinstance(exit_.code, int) else 0
    except BadInput as error:
        if verbose:
            traceback.print_exc()
        print(f"quantfuse: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("quantfuse: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as error:  # noqa: BLE001 - one line unless --verbose
        if verbose:
            traceback.print_exc()
        from meta_rules.tvm_errors import tvm_error_message

        print(f"quantfuse: failed: {tvm_error_message(error)} (rerun with --verbose for the "
              "traceback)", file=sys.stderr)
        return EXIT_FAILED
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


if __name__ == "__main__":
    raise SystemExit(main())
