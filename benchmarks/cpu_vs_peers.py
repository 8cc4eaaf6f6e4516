"""Tuned int8 on this CPU against its peers: TVM tuned, TVM no-search, TVM untuned, PyTorch int8,
ONNX Runtime int8, OpenVINO int8 and PyTorch Inductor int8, after a tune of a given wall time.

    python -m benchmarks.cpu_vs_peers [--models resnet18,resnet50,mobilenet_v2] [--minutes 15]
        [--trials N] [--image-size 224] [--threads 2] [--target host] [--repeats 7]
        [--number 5] [--work-root /tmp/quantfuse-cpu-vs-peers]

Per model, as ``quantfuse tune --target host --minutes M`` and ``quantfuse bench --json`` do it,
through the library: :func:`relay_ext.tune` with its default search for M minutes (the wall time
it really took is reported; ``--trials N`` also caps the work dir's trials, for a smoke run), then
:func:`relay_ext.bench` times the configurations in interleaved rounds on the same input with
``--threads`` threads each (OpenVINO and Inductor compiled once before, docs/bench.md; a peer that
cannot run is listed with its reason); TVM tuned is compiled with bench's per-task choice
(docs/cpu.md). The table's last column is each row against the fastest peer.

A rerun with the same --work-root resumes each model's tune. Each result is kept in
``benchmarks/results/cpu_vs_peers.json`` under its host class (from the CPU flags the OS enables:
AMX, AVX-512 VNNI, AVX-512, AVX2), model and CPU (a rerun on one CPU replaces its result, another
CPU's is kept beside it); docs/BENCHMARKS.md gets one section per host class,
``cpu_vs_peers_<class>``, whose tables each name their machine.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import relay_ext
from benchmarks.markdown_report import (current_commit, load_results, markdown_table, save_result,
                                         utc_now, write_results_section)
from relay_ext.lowering.targets import host_cpu_flags, normalize_target
from relay_ext.report.tables import machine_description
from relay_ext.workdir.files import RECORD_FILE, RunDescription

RESULTS = Path(__file__).resolve().parent / "results" / "cpu_vs_peers.json"
ROWS = ("TVM tuned (ours)", "TVM no-search (ours)", "TVM untuned", "PyTorch int8", "ONNX Runtime int8", "OpenVINO int8",
        "PyTorch Inductor int8")


def host_class(flags: Optional[frozenset] = None) -> str:
    """The host class this project measures on, from the flags the OS enables."""
    flags = host_cpu_flags() if flags is None else flags
    flags = flags or frozenset()
    if {"amx_tile", "amx_int8"} <= flags:
        return "amx"
    if "avx512_vnni" in flags:
        return "avx512_vnni"
    if "avx512bw" in flags:
        return "avx512"
    if "avx2" in flags:
        return "avx2"
    return "other"


CLASS_TITLES = {"amx": "AMX-INT8 (and AVX-512 VNNI)", "avx512_vnni": "AVX-512 VNNI",
                "avx512": "AVX-512 without VNNI", "avx2": "AVX2 only", "other": "no AVX2"}


def tune_for(loaded, target, work_dir: Path, minutes: float, seed: int,
             trials: Optional[int] = None, started: Optional[float] = None) -> Dict:
    """:func:`relay_ext.tune` for ``minutes`` (and at most ``trials`` records in the work dir when
    given) into ``work_dir``, resuming from the records there, with the default search; the wall
    time it took (from ``started``, a ``time.monotonic()`` before the model loaded, as
    ``quantfuse tune --minutes`` counts it) and the records it left."""
    started = time.monotonic() if started is None else started
    resumed_from = len_records(work_dir)
    remaining = None if trials is None else trials - resumed_from
    if remaining is None or remaining > 0:
        RunDescription(loaded.name, None, loaded.builtin.image_size, "NCHW", target,
                       "ours").write(work_dir)
        relay_ext.tune(loaded.mod, loaded.params, target, work_dir, max_minutes=minutes,
                       max_trials=remaining, seed=seed, clock_started=started)
    return {"tuning_s": round(time.monotonic() - started, 1), "records": len_records(work_dir),
            "resumed_from": resumed_from}


def len_records(work_dir: Path) -> int:
    path = work_dir / RECORD_FILE
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def bench_model(name: str, args) -> Dict:
    target = normalize_target(args.target)
    work_dir = Path(args.work_root) / host_class() / f"{name}_{args.image_size}"
    work_dir.mkdir(parents=True, exist_ok=True)
    print(f"{name}: tuning {args.minutes} min in {work_dir}", flush=True)
    started = time.monotonic()
    loaded = relay_ext.load_model(name, image_size=args.image_size)
    tuning = tune_for(loaded, target, work_dir, args.minutes, args.seed, args.trials, started)
    result = relay_ext.bench(loaded, target=target, records=work_dir, repeats=args.repeats,
                             number=args.number, threads=args.threads).to_dict()
    result.update({
        "host_class": host_class(), "tuning": tuning, "tuning_minutes_asked": args.minutes,
        "commit": current_commit(), "measured": utc_now(), "machine": machine_description(),
        "command": shlex.join(["python", "-m", "benchmarks.cpu_vs_peers", *sys.argv[1:]]),
    })
    return result


def cpu_of(result: Dict) -> str:
    """The CPU part of a result's machine description ("AMD EPYC (family 25 model 17)")."""
    return result.get("machine", "").split(",")[0].strip()


def same_cpu(a: str, b: str) -> bool:
    """Whether two CPU descriptions name one CPU; results stored before the family and model
    number were part of the description match on the name alone."""
    if a == b:
        return True
    legacy = " (family " not in a or " (family " not in b
    return legacy and a.split(" (family ")[0] == b.split(" (family ")[0]


def keep_result(path: Path, result: Dict, image_size: int) -> str:
    """Store ``result`` under ``<host class>/<model>/<image size>/<CPU>``: a rerun on the same CPU
    replaces its earlier result, a run on another CPU of the class (an Intel and an AMD host both
    enable AVX-512 VNNI) is kept beside it. The key."""
    prefix = f"{result['host_class']}/{result['model']}/{image_size}"
    key = f"{prefix}/{cpu_of(result)}"
    save_result(path, key, result, replacing=lambda old_key, row: (
        old_key.split("/", 3)[:3] == prefix.split("/") and same_cpu(cpu_of(row), cpu_of(result))))
    return key


def model_table(result: Dict) -> str:
    rows = {row["configuration"]: row for row in result["rows"]}
    torch_ms = rows.get("PyTorch int8", {}).get("median_ms")
    fastest = result.get("fastest_peer") or {}
    # the fastest runtime beside TVM (older results have no fastest_peer)
    peer_ms = [row["median_ms"] for row in result["rows"]
               if row.get("median_ms") is not None and not row["configuration"].startswith("TVM")]
    best_ms = min(peer_ms) if peer_ms else None
    table = []
    for label in [*ROWS, *[label for label in rows if label not in ROWS]]:
        if label not in rows:
            continue
        row = rows[label]
        if row.get("median_ms") is None:  # a peer that did not run
            table.append([label, row.get("version") or "-", "not run: " + (row.get("reason") or "?"),
                          "", "", ""])
            continue
        table.append([label, row.get("version") or "-", f"{row['median_ms']:.3f}",
                      f"{row['min_ms']:.3f} - {row['max_ms']:.3f}",
                      f"{row['median_ms'] / torch_ms:.2f}x" if torch_ms else "-",
                      f"{row['median_ms'] / best_ms:.2f}x" if best_ms else "-"])
    peers = result.get("peers") or []
    checks = "; ".join(f"{p['label']} vs {p['reference']}: max {p['max_steps']:.2f} steps"
                       for p in peers if p.get("reason") is None)
    defaults = result.get("tasks_vs_default") or []
    used = [t for t in defaults if t["uses_default"]]
    tuning = result["tuning"]
    shape = "x".join(map(str, result["input_shape"]))
    return (
        f"### int8 {result['model']} {shape}: {cpu_of(result) or 'machine not recorded'}\n\n"
        f"Machine: {result.get('machine') or 'not recorded'}. "
        f"Target `{result['target']}`; host flags {', '.join(result['host_flags'])}. Tuned "
        f"{tuning['tuning_s'] / 60:.1f} min (asked {result['tuning_minutes_asked']}) to "
        f"{tuning['records']} records"
        + (f" (resumed from {tuning['resumed_from']})" if tuning["resumed_from"] else "")
        + f"; {result['threads']} threads for every runtime; median of {result['repeats']} "
        f"interleaved rounds x {result['number']} runs; load average before timing "
        f"{'?' if result['load_average'] is None else round(result['load_average'], 2)}. "
        f"TVM tuned vs {result['reference']}: max {result['max_steps']:.2f} output steps"
        + (f"; {checks}" if checks else "") + ". "
        + (f"Fastest peer: {fastest['configuration']}, TVM tuned "
           f"{fastest['tvm_tuned_ratio']:.2f}x its time. " if fastest else "")
        + f"Per-task choice: {len(used)} of {len(defaults)} tasks compiled with TVM's "
        f"default schedule"
        + (f", {sum(t.get('choice') == 'no-search' for t in defaults)} with their no-search "
           "schedule (no tuned record, or one slower here)" if any("choice" in t for t in defaults)
           else "")
        + whole_model_sentence(result.get("whole_model"))
        + f". Measured {result['measured']} (commit {result['commit']}), "
        f"command `{result['command']}`.\n\n"
        + markdown_table(["configuration", "version", "median ms", "min - max ms", "/ PyTorch int8",
                          "/ fastest peer"], table)
        + ("\n\n**" + result["busy_warning"] + "**" if result.get("busy_warning") else "")
        + ("\n\nNote, added after the run: " + result["note"] if result.get("note") else "")
        + "\n"
    )


def whole_model_sentence(whole: Optional[Dict]) -> str:
    """The whole-model check of the tuned build against the no-search build, as said after the
    per-task choice's counts; empty for results that have none."""
    if not whole:
        return ""
    said = (f". Whole-model check: the tuned build ran {whole['tuned_ms']:.3f} ms against the "
            f"no-search build's {whole['no_search_ms']:.3f} ({whole['ratio']:.3f}x)")
    return said + (", so the tuned row is the no-search build" if whole["uses_no_search"]
                   else ", so the tuned build was kept")


def render(stored: Dict[str, Dict], classes: Optional[List[str]] = None) -> None:
    """Write the sections of ``classes`` (default: every host class stored). A section's header
    names the machine, date and command of the run that writes it, so a run rewrites only the
    section of the host class it measured: another class's section keeps its own header."""
    for klass in sorted(classes or {r["host_class"] for r in stored.values()}):
        mine = {k: r for k, r in stored.items() if r["host_class"] == klass}
        if not mine:
            continue
        smoke = all(r["model"] == "tiny_resnet" for r in mine.values())
        write_results_section(
            f"cpu_vs_peers_{klass}", f"TVM tuned vs PyTorch, ONNX Runtime, OpenVINO and "
            f"Inductor int8: {CLASS_TITLES.get(klass, klass)} hosts",
            "Written by `benchmarks/cpu_vs_peers.py`: `quantfuse tune --target host` for a wall "
            "time, then `quantfuse bench --json`, per model (through relay_ext.tune and "
            "relay_ext.bench). The goal is TVM tuned at or below 1.0x the fastest peer. Older "
            "results have no OpenVINO or Inductor row. Each model's table names the machine it was measured on "
            "(a class holds Intel and AMD hosts); the header above names the run that last wrote "
            "this section. Compare rows within one table only: they come from one run."
            + (" Only a smoke run of the script so far (tiny_resnet, a minute of tuning): it "
               "shows that the script works, not how fast anything is." if smoke else ""),
            mine, model_table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--minutes", type=float, default=15.0,
                        help="tuning wall time per model (default 15)")
    parser.add_argument("--trials", type=int, default=None,
                        help="also cap the tune at this many trials (a smoke run)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--target", default="host")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--number", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-root", default="/tmp/quantfuse-cpu-vs-peers")
    args = parser.parse_args()
    for name in [m for m in args.models.split(",") if m]:  # --models '': only render
        result = bench_model(name, args)
        print(model_table(result), flush=True)
        keep_result(RESULTS, result, args.image_size)
    klass = host_class()  # the one section this host's results go to
    render(load_results(RESULTS), [klass])
    print(f"wrote docs/BENCHMARKS.md section cpu_vs_peers_{klass}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
