"""Model latency reached after M minutes of tuning: MetaSchedule's default search vs quantfuse's.

    python -m benchmarks.latency_after_tuning [--model resnet18] [--image-size 224]
        [--target host] [--minutes 1,5,15,60] [--settings tvm,sized] [--seed 0]
        [--keep-checkpoints DIR]

For each search setting (relay_ext/tuning/strategy.py: ``tvm`` is MetaSchedule 0.19's
EvolutionarySearch defaults, ``sized`` the CLI's default) one tune runs with a time budget of the
largest checkpoint (``tune(..., max_minutes=...)``, start-up included, as ``quantfuse tune
--minutes`` does). When a checkpoint's time passes, the database files are copied aside; afterwards
each copy is compiled (:func:`relay_ext.compile`: each task its fastest record, a task without
one its rule design, nothing timed per task) and the model's latency measured (TVM's
time_evaluator, median of
``--repeats`` rounds of ``--number`` runs). The table (latency reached, trials measured, seconds of
wall time per measured trial) goes to docs/BENCHMARKS.md, its rows to
benchmarks/results/latency_after_tuning.json (one row per model, target, setting and budget). With
``--keep-checkpoints DIR`` the copies stay in ``DIR/<setting>/<M>min`` (each a work dir that
``quantfuse bench --work-dir`` reads: the state of a tune of M minutes).

The table in docs/BENCHMARKS.md is ResNet-18 224 at 1, 5, 15 and 60 minutes on 2 cores: about
2 x 81 minutes of tuning plus the compiles. Run it on a quiet machine; numbers taken while other
processes compete for the CPU say little.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from benchmarks.markdown_report import (
    load_results,
    markdown_table,
    save_result,
    utc_now,
    write_section,
)
import relay_ext
from relay_ext.lowering.targets import normalize_target
from relay_ext.tuning.progress import ProgressSnapshot
from relay_ext.tuning.strategy import SETTINGS, evolutionary_search
from relay_ext.measure.timing import tvm_timer, with_tvm_threads
from relay_ext.workdir.files import RECORD_FILE, WORKLOAD_FILE

RESULTS = Path(__file__).resolve().parent / "results" / "latency_after_tuning.json"
SECTION = "latency_after_tuning"


class Checkpoints:
    """A progress callback that copies the database aside when each checkpoint's time passes.

    MetaSchedule reports after each measured batch, so a copy is taken at the first batch after
    the checkpoint (the latency it reflects is that of the checkpoint or slightly later)."""

    def __init__(self, work_dir: Path, out: Path, minutes: List[float], started: float):
        self.work_dir, self.out, self.started = work_dir, out, started
        self.left = sorted(minutes)
        self.taken: Dict[float, Dict] = {}

    def __call__(self, snapshot: ProgressSnapshot) -> None:
        elapsed = time.monotonic() - self.started
        while self.left and elapsed >= 60 * self.left[0]:
            self.take(self.left.pop(0), snapshot.trials_done, elapsed)

    def take(self, minutes: float, trials: int, elapsed: float) -> None:
        target = self.out / f"{minutes:g}min"
        target.mkdir(parents=True, exist_ok=True)
        for name in (WORKLOAD_FILE, RECORD_FILE):
            if (self.work_dir / name).exists():
                shutil.copy(self.work_dir / name, target / name)
        self.taken[minutes] = {"dir": target, "trials": trials, "elapsed_s": elapsed}


def latency_ms(loaded, database_dir: Path, target: str, repeats: int, number: int,
               threads: int) -> float:
    """The model compiled with the best record of each task in ``database_dir`` (no per-task
    timing: this measures what the search found), median ms of ``repeats`` rounds on ``threads``
    threads of TVM's pool (left alone, a 2-CPU machine's pool has one)."""
    from tvm import meta_schedule as ms

    from meta_rules.database_intrinsics import register_database_intrinsics

    register_database_intrinsics(target, database_dir)  # before TVM replays records naming them
    database = ms.database.JSONDatabase(work_dir=str(database_dir))
    lib = relay_ext.compile(loaded, target=target, records=database, choose_per_task=False).lib

    def timed() -> float:
        _, one_round = tvm_timer(lib, loaded.inputs, number)
        return 1e3 * statistics.median(one_round() for _ in range(repeats))

    return with_tvm_threads(threads, timed)


def remeasure(loaded, keep: Path, args) -> None:
    """Measure again the latency of every stored row whose checkpoint is kept in ``keep``
    (``--remeasure``): trials and seconds per trial stay as the tune recorded them."""
    stored = load_results(RESULTS)
    for key, row in stored.items():
        if (row["model"], row["image_size"], row["target"]) != (args.model, args.image_size,
                                                                args.target):
            continue
        checkpoint = keep / row["setting"] / f"{row['minutes']:g}min"
        if not (checkpoint / RECORD_FILE).exists():
            continue
        row["latency_ms"] = latency_ms(loaded, checkpoint, args.target, args.repeats,
                                       args.number, args.threads)
        row["threads"], row["latency_measured"] = args.threads, utc_now()
        save_result(RESULTS, key, row)
        print(key, f"{row['latency_ms']:.3f} ms", flush=True)


def run_setting(loaded, target: str, setting: str, minutes: List[float], seed: int,
                repeats: int, number: int, threads: int,
                keep: Optional[Path] = None) -> List[Dict]:
    with tempfile.TemporaryDirectory(prefix=f"latency-after-tuning-{setting}-") as tmp:
        work_dir = Path(tmp) / "work"
        copies = keep / setting if keep is not None else Path(tmp) / "checkpoints"
        started = time.monotonic()
        checkpoints = Checkpoints(work_dir, copies, minutes, started)
        relay_ext.tune(loaded.mod, loaded.params, target, work_dir, max_minutes=max(minutes),
                       strategy=evolutionary_search(SETTINGS[setting]), seed=seed,
                       progress=checkpoints)
        wall = time.monotonic() - started
        if checkpoints.left:  # the tune ended before the last checkpoint: take the end state
            from tvm import meta_schedule as ms

            trials = len(ms.database.JSONDatabase(work_dir=str(work_dir)))
            for m in list(checkpoints.left):
                checkpoints.take(m, trials, wall)
        rows = []
        for m in sorted(checkpoints.taken):
            taken = checkpoints.taken[m]
            rows.append({
                "setting": setting, "minutes": m, "trials": taken["trials"],
                "s_per_trial": taken["elapsed_s"] / max(1, taken["trials"]),
                "latency_ms": latency_ms(loaded, taken["dir"], target, repeats, number, threads),
                "threads": threads, "date": utc_now(),
            })
            print(rows[-1], flush=True)
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--target", default="host",
                        help="a TVM target, or host (default): this machine's best target")
    parser.add_argument("--minutes", default="1,5,15,60")
    parser.add_argument("--settings", default="tvm,sized")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--number", type=int, default=10)
    parser.add_argument("--keep-checkpoints", type=Path, default=None,
                        help="keep each checkpoint's work dir in DIR/<setting>/<M>min")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads the latency is measured with (default: the target's "
                             "-num-cores)")
    parser.add_argument("--remeasure", type=Path, default=None, metavar="DIR",
                        help="no tuning: measure again the stored rows whose checkpoints "
                             "--keep-checkpoints DIR kept, then rewrite the table")
    args = parser.parse_args()
    target = normalize_target(args.target)
    args.target = str(target)  # "host" -> what it means here
    if args.threads is None:
        args.threads = int(target.attrs.get("num-cores", 1))
    minutes = [float(m) for m in args.minutes.split(",")]
    loaded = relay_ext.load_model(args.model, image_size=args.image_size)
    for setting in ([] if args.remeasure else args.settings.split(",")):
        for row in run_setting(loaded, args.target, setting, minutes, args.seed, args.repeats,
                               args.number, args.threads, args.keep_checkpoints):
            key = f"{args.model}/{args.image_size}/{args.target}/{setting}/{row['minutes']:g}"
            save_result(RESULTS, key, {**row, "model": args.model,
                                       "image_size": args.image_size, "target": args.target})
    if args.remeasure:
        remeasure(loaded, args.remeasure, args)
    rows = sorted(load_results(RESULTS).values(),
                  key=lambda r: (r["model"], r["image_size"], r["target"], r["minutes"],
                                 r["setting"]))
    table = markdown_table(
        ["model", "target", "minutes", "search", "trials", "s / trial", "latency (ms)", "threads",
         "date"],
        [[f"{r['model']} {r['image_size']}", r["target"], f"{r['minutes']:g}", r["setting"],
          r["trials"], f"{r['s_per_trial']:.2f}" if r["trials"] else "-",
          f"{r['latency_ms']:.3f}", r.get("threads", "1 (TVM's default pool)"), r["date"]]
         for r in rows])
    write_section(SECTION, "Tuning time: latency reached after M minutes, by search setting",
                  "`tvm`: MetaSchedule 0.19's EvolutionarySearch defaults (population 512, 4 "
                  "generations); `sized`: quantfuse tune's default (relay_ext/tuning/"
                  "strategy.py); both run inside quantfuse's tune (recorded candidates "
                  "skipped, exhausted tasks ended, a new task's first batch drawn at random under "
                  "a time budget). One tune per setting with a time budget of the largest "
                  "M (start-up included); its database is copied at the first batch after each M "
                  "and compiled afterwards with each task's best record (no per-task timing: this "
                  "measures what the search found), timed with TVM's pool at `--threads` threads. "
                  "s / trial: wall time per measured trial up to that "
                  "copy (- where nothing was measured: the latency is then that of TVM's default "
                  "schedules).\n\n" + table)


if __name__ == "__main__":
    main()
