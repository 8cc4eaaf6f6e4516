"""The commands: each checks its input (:mod:`.inputs`), calls the library and prints for people."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

from relay_ext.cli import EXIT_INTERRUPTED
from relay_ext.cli.inputs import (
    check_model,
    check_runs_here,
    checked_variant,
    closed_after,
    load_model,
    resolve_target,
    rpc_runner,
    run_description,
    warn_if_generic_llvm,
    work_dir_checked,
    work_dir_locked,
    writable_dir,
)
from relay_ext.cli.parser import BadInput
from relay_ext.cli.progress_bar import ProgressPrinter
from relay_ext.lowering.toolchain import require_c_compiler  # standard library only


def search_strategy():
    """MetaSchedule's search strategy for ``quantfuse tune`` (tests replace it by a small one)."""
    from relay_ext.tuning.strategy import default_search

    return default_search()


def cmd_models(args) -> int:  # pylint: disable=unused-argument
    from relay_ext.frontend import models
    from relay_ext.report.tables import text_table

    rows = [[name, models.MODELS[name].description] for name in models.available_models()]
    print(text_table(["model", "description"], rows))
    print("\nOr a TorchScript file: --model my_model.pt --input-shape 1,3,224,224")
    return 0


def print_fusion_table(report) -> None:
    from relay_ext.report.fusion_table import failure_notes, fusion_header, fusion_rows, layout_line
    from relay_ext.report.tables import text_table

    print(text_table(fusion_header(report), fusion_rows(report)))
    for note in failure_notes(report):
        print(note)
    line = layout_line(report)
    if line is not None:
        print(line)


def cmd_fusion(args) -> int:
    from relay_ext.report.fusion import fusion_report, parse_variants
    from relay_ext.report.fusion_table import fusion_markdown

    try:
        variants = parse_variants(args.variants)
    except ValueError as error:
        raise BadInput(f"--variants: {error}") from None
    check_model(args)
    target = resolve_target(args.target, variants[0], quiet=args.json)
    out = Path(args.out) if args.out else None
    if out is not None and not os.access(out.parent if str(out.parent) else ".", os.W_OK):
        raise BadInput(f"cannot write --out {args.out!r}: its directory is missing or not writable")
    loaded = load_model(args)
    report = fusion_report(loaded.mod, loaded.params, target, variants)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(f"Fusion report for {loaded.name} ({loaded.layout}) on {report.target}")
        print("per variant: global-memory intermediates of the worst design space (bytes of "
              "global traffic, write + read)\n")
        print_fusion_table(report)
    if out is not None:
        out.write_text(fusion_markdown(report, f"{loaded.name} ({loaded.layout})"))
        print(f"\nwrote {out}", file=sys.stderr if args.json else sys.stdout)
    return 0


def cmd_tune(args) -> int:
    started = time.monotonic()  # --minutes counts from here: loading the model is part of it
    if args.trials is None and args.minutes is None:
        raise BadInput("tune needs a budget: --trials N, --minutes M or both")
    check_model(args)
    checked_variant(args.variant)  # its own message, before the target's checks use it
    run = run_description(args, resolve_target(args.target, args.variant))
    require_c_compiler()  # every candidate is linked with it: refuse before the model loads
    if args.rpc is None:  # with --rpc the target describes the remote devices
        check_runs_here(run.target)
    runner = rpc_runner(args.rpc, run.target)
    work_dir = writable_dir(args.work_dir)
    run = dataclasses.replace(run, candidate_timing=candidate_timing(args, run.target, work_dir))
    # One tune per work dir, locked before repair touches its files; the RPC runner's popen
    # workers are killed on every way out (Ctrl-C included).
    with work_dir_locked(work_dir), closed_after(runner):
        return _tune_into(args, run, runner, work_dir, started)


def candidate_timing(args, target, work_dir: Path) -> str:
    """--candidate-timing, else what the work dir was tuned with (a resumed tune goes on as it
    began; :func:`recorded_run` says warm for a work dir from before the option), else the
    target's default."""
    from relay_ext.measure.candidate_timing import default_candidate_timing
    from relay_ext.workdir.files import recorded_run

    if args.candidate_timing is not None:
        return args.candidate_timing
    previous = work_dir_checked(recorded_run, work_dir)
    if previous is not None:
        return previous["candidate_timing"]
    return default_candidate_timing(target)


def _tune_into(args, run, runner, work_dir: Path, started: float) -> int:
    from relay_ext.tuning import measured_line, read_tuning_summary, tune
    from relay_ext.workdir.files import repair_database

    before = work_dir_checked(repair_database, work_dir)
    work_dir_checked(run.check_same_run, work_dir)
    remaining = None if args.trials is None else args.trials - before["records"]
    if remaining is not None and remaining <= 0:
        print(f"{work_dir} already holds {before['records']} records (--trials {args.trials}); "
              "nothing to do. Raise --trials to tune further.")
        return 0
    loaded = load_model(args)
    warn_if_generic_llvm(args.target, run.target)
    run.write(work_dir)
    if before["records"]:
        to_go = "" if remaining is None else f", {remaining} trials to go"
        print(f"resuming: {before['records']} records in {work_dir}{to_go}")
    bar = ProgressPrinter(sys.stderr)
    try:
        database = tune(loaded.mod, loaded.params, run.target, work_dir, max_trials=remaining,
                        variant=run.variant, num_trials_per_iter=min(16, remaining or 16),
                        seed=args.seed, strategy=search_strategy(), runner=runner,
                        progress=bar.show, max_minutes=args.minutes, clock_started=started,
                        candidate_timing=run.candidate_timing)
    except KeyboardInterrupt:
        bar.close()
        kept = repair_database(work_dir)["records"]
        print(f"quantfuse: interrupted; {work_dir} keeps {kept} records (the database is "
              "loadable); run the same command again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:  # the error line of a failed tune (no RPC server, a failed write) starts a line
        bar.close()
    summary = read_tuning_summary(work_dir)
    if summary.get("time_budget_spent"):
        print(f"quantfuse: the time budget of {args.minutes:g} minutes is spent; {work_dir} keeps "
              f"{len(database)} records (the database is loadable); run the same command again "
              "to tune further", file=sys.stderr)
    print(f"tuned {loaded.name} on {run.target} ({run.variant}): {len(database)} records in "
          f"{work_dir} (was {before['records']}); {measured_line(summary)}")
    return 0


def print_bench(result, work_dir: Optional[Path], as_json: bool = False) -> None:
    """A BenchResult for people (``as_json``: one JSON object on stdout, and nothing else
    there), and where its report went."""
    from relay_ext.latency.report import text_report
    from relay_ext.workdir.files import CHART_FILE, REPORT_FILE

    for note in result.notes:  # a row left out before timing
        print(note, file=sys.stderr if as_json else sys.stdout)
    wrote = None if work_dir is None else f"wrote {work_dir / REPORT_FILE} and {work_dir / CHART_FILE}"
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
        if wrote:
            print(wrote, file=sys.stderr)
        return
    print(text_report(result))
    print("\n(no report.md or chart: they go to --work-dir)" if wrote is None else f"\n{wrote}")


def cpu_run(args, command: str):
    """The run description of a command that times the model on this CPU (``bench``,
    ``profile``): the model, variant and target checked, the target one this host runs."""
    check_model(args)
    checked_variant(args.variant)
    run = run_description(args, resolve_target(args.target, args.variant, quiet=args.json))
    if run.target.kind.name != "llvm":
        raise BadInput(f"{command} runs on this CPU: --target must be llvm, got {args.target!r}")
    check_runs_here(run.target)
    return run


def quantized_model(args, run, command: str):
    """The model of a command that times int8 models on this CPU, loaded (after the quick checks
    of its arguments: the model load is slow)."""
    loaded = load_model(args)
    if loaded.output_scale is None:
        raise BadInput(f"model {loaded.name!r} is not quantized; {command} times int8 models")
    warn_if_generic_llvm(args.target, run.target)
    return loaded


def cmd_bench(args) -> int:
    from relay_ext.latency.run import bench
    from relay_ext.workdir.files import open_tuned_database

    run = cpu_run(args, "bench")
    work_dir = None if args.work_dir is None else Path(args.work_dir)
    database = None  # no work dir: bench times the no-search build
    if work_dir is not None:
        database = work_dir_checked(open_tuned_database, work_dir)  # before the slow model load
        work_dir_checked(run.check_tuned_for, work_dir)
    loaded = quantized_model(args, run, "bench")
    result = bench(loaded, target=run.target, records=database, work_dir=work_dir,
                   variant=run.variant, repeats=args.repeats, number=args.number,
                   threads=args.threads, choose_per_task=not args.keep_slower_records,
                   peers=not args.no_peers)
    print_bench(result, work_dir, as_json=args.json)
    return 0


def cmd_profile(args) -> int:
    from relay_ext.latency.profile import has_records, profile
    from relay_ext.latency.profile_report import profile_text
    from relay_ext.workdir.files import open_tuned_database

    run = cpu_run(args, "profile")
    if args.png is not None:
        png = Path(args.png)
        if png.suffix.lower() != ".png":
            raise BadInput(f"--png {args.png!r}: the chart is a PNG file; name it ....png")
        if not os.access(png.parent if str(png.parent) else ".", os.W_OK):
            raise BadInput(f"cannot write --png {args.png!r}: its directory is missing or not "
                           "writable")
    work_dir = None if args.work_dir is None else writable_dir(args.work_dir)
    database = None  # a work dir without records: the no-search build, its chart goes there
    if work_dir is not None and has_records(work_dir):
        database = work_dir_checked(open_tuned_database, work_dir)  # before the slow model load
        work_dir_checked(run.check_tuned_for, work_dir)
    loaded = quantized_model(args, run, "profile")
    result = profile(loaded, target=run.target, work_dir=work_dir, records=database,
                     threads=args.threads, rounds=args.rounds, variant=run.variant,
                     choose_per_task=not args.keep_slower_records,
                     openvino=not args.no_openvino, png=args.png)
    wrote = None if result.chart is None else f"wrote {result.chart}"
    if args.json:
        print(result.to_json())
        for line in (result.chart_note, wrote):
            if line:
                print(line, file=sys.stderr)
        return 0
    print(profile_text(result))
    if wrote:
        print(f"\n{wrote}")
    return 0
