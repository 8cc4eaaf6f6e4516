"""Valid GPU candidates per task, "ours" against "upstream", side by side in one run (no tuning).

    python -m benchmarks.candidate_validity [--models resnet18,resnet50,mobilenet_v2]
        [--configs a100-cuda,a100-tensorcore] [--per-space 8] [--image-size 224]

For each task of each model, each variant's design spaces are generated (random state 1, as in
the fusion report) and candidates are drawn from them the way MetaSchedule's search draws its
first population: the trace of every space replayed on a fresh schedule seeded with ``k`` for
``k = 1 .. --per-space``, then the variant's postprocs, as a tune runs them before measuring. A
candidate is valid when every postproc accepts it. Each candidate is judged by both verifiers,
TVM's VerifyGPUCode (upstream's) and VerifyLoweredGPUCode (ours), so that a difference between the
variants comes from their design spaces, not from ours' stricter verifier.

The two variants draw with the same seeds from every space, and our fusion rules sample nothing,
so the candidates of ours and of upstream make the same tiling and binding decisions wherever
their traces sample the same way (TVM lists the same spaces in another order when the rule list
is longer, so spaces are not paired by position): a paired comparison, where the only difference
is what the rules fused. The unfused schedule samples one more thread extent, for the kernel it
has in addition, after all the decisions both share; pairs are counted on the shared ones. The report
gives, per model and configuration, the valid candidates of each variant, the pairs with the same
decisions, and every task where ours has fewer valid candidates than upstream (expected: none);
per task rows are kept in ``benchmarks/results/candidate_validity.json`` and the section
``candidate_validity`` of docs/BENCHMARKS.md is rendered from all rows.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import tvm
from tvm import meta_schedule as ms

from benchmarks.fusion_tables import CONFIGS
from benchmarks.markdown_report import (current_commit, load_results, markdown_table, save_result,
                                        utc_now, write_section)
from meta_rules.measure import fusion
from meta_rules.testing.candidate_sampling import first_rejection, initialised_postprocs, replay
import relay_ext
from relay_ext.lowering.targets import normalize_target
from relay_ext.tuning import extract_tasks

VARIANTS = ("upstream", "ours")
RESULTS = Path(__file__).resolve().parent / "results" / "candidate_validity.json"
DEFAULT_CONFIGS = ("a100-cuda", "a100-tensorcore")
# Each candidate is judged by both verifiers, so that a difference in valid candidates comes from
# the design spaces, not from ours' stricter verifier (docs/verifier.md).
JUDGES = {"upstream": "VerifyGPUCode", "ours": "VerifyLoweredGPUCode"}


def _decisions(sch: tvm.tir.Schedule) -> List[str]:
    trace = sch.trace
    return [str(trace.decisions[inst]) for inst in trace.insts if inst in trace.decisions]


def _judges(mod: tvm.IRModule, target: tvm.target.Target) -> Tuple[List[ms.Postproc], Dict[str, List[ms.Postproc]]]:
    """The postprocs both variants run before their verifier, and per verifier the rest of its list
    (the verifier, then RewriteTensorize on tensor-core targets), initialised for ``mod``."""
    lists = {v: initialised_postprocs(mod, target, v) for v in VARIANTS}
    at = [isinstance(p, ms.postproc.VerifyGPUCode) for p in lists["upstream"]].index(True)
    if [type(p) for p in lists["upstream"][:at]] != [type(p) for p in lists["ours"][:at]]:
        raise RuntimeError("the variants' postprocs differ before the verifier")
    return lists["upstream"][:at], {JUDGES[v]: procs[at:] for v, procs in lists.items()}


def _verdicts(sch: tvm.tir.Schedule, before: List[ms.Postproc],
              judges: Dict[str, List[ms.Postproc]]) -> Dict[str, Optional[str]]:
    """Per judge, the postproc that rejects ``sch`` (None: a valid candidate)."""
    proc = first_rejection(sch, before)
    if proc is not None:
        return {judge: type(proc).__name__ for judge in judges}
    verdicts = {}
    for judge, rest in judges.items():
        proc = first_rejection(sch.copy(), rest)
        verdicts[judge] = None if proc is None else type(proc).__name__
    return verdicts


def task_validity(mods: Dict[str, tvm.IRModule], target: tvm.target.Target,
                  per_space: int) -> Dict[str, object]:
    """Per variant and judge (verifier), the valid candidates of one task and the postprocs that
    rejected the others; the global intermediates of each variant's worst space; the candidates
    of ours whose decisions agree with an upstream candidate of the same seed."""
    result: Dict[str, object] = {}
    decisions: Dict[str, Dict[int, List[List[str]]]] = {}
    for variant in VARIANTS:
        mod = mods[variant]
        spaces = fusion.design_spaces(mod, target, variant, rand_state=1)
        before, judges = _judges(mod, target)
        rejected: Dict[str, Counter] = {judge: Counter() for judge in judges}
        decisions[variant] = {seed: [] for seed in range(1, per_space + 1)}
        for space in spaces:
            for seed in range(1, per_space + 1):
                sch = replay(mod, space, seed)
                decisions[variant][seed].append(_decisions(sch))
                for judge, proc in _verdicts(sch, before, judges).items():
                    if proc is not None:
                        rejected[judge][proc] += 1
        drawn = per_space * len(spaces)
        result[variant] = {
            "candidates": drawn,
            "valid": {judge: drawn - sum(r.values()) for judge, r in rejected.items()},
            "rejected": {judge: dict(r) for judge, r in rejected.items()},
            "intermediates": max(len(fusion.global_intermediates(s.mod)) for s in spaces),
            "spaces": len(spaces),
        }
    result["paired"] = sum(_matched(decisions["ours"][seed], decisions["upstream"][seed])
                           for seed in decisions["ours"])
    return result


def _agree(a: List[str], b: List[str]) -> bool:
    """Equal on every decision both make: a kernel that only the unfused schedule has (the
    epilogue's, the reduction's) samples its thread extent last, after everything both share."""
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def _matched(ours: List[List[str]], upstream: List[List[str]]) -> int:
    """How many of ``ours`` find their own upstream candidate whose decisions agree."""
    free = list(upstream)
    count = 0
    for mine in ours:
        for index, theirs in enumerate(free):
            if _agree(mine, theirs):
                del free[index]
                count += 1
                break
    return count


def model_validity(model: str, config_name: str, per_space: int, image_size: int) -> Dict[str, object]:
    config = CONFIGS[config_name]
    target = normalize_target(config["target"]())
    loaded = relay_ext.load_model(model, image_size=image_size, layout=config["layout"])
    per_variant = {v: extract_tasks(loaded.mod, loaded.params, target, v) for v in VARIANTS}
    names = [t.task_name for t in per_variant["upstream"]]
    if [t.task_name for t in per_variant["ours"]] != names:
        raise RuntimeError(f"{model}: the variants extract different tasks; cannot pair them")
    tasks = {}
    for index, name in enumerate(names):
        mods = {v: per_variant[v][index].dispatched[0] for v in VARIANTS}
        tasks[f"{index:02d} {name}"] = task_validity(mods, target, per_space)
        row = tasks[f"{index:02d} {name}"]
        valid = "  ".join(f"{judge}: upstream {row['upstream']['valid'][judge]:2d} ours "
                          f"{row['ours']['valid'][judge]:2d}" for judge in JUDGES.values())
        print(f"  {index:2d} {name[:60]:60s} {valid}  paired {row['paired']:2d}  intermediates "
              f"{row['upstream']['intermediates']} -> {row['ours']['intermediates']}", flush=True)
    return tasks


def fewer_valid(task: Dict) -> List[str]:
    """The judges under which ours has fewer valid candidates than upstream on ``task``."""
    return [j for j in JUDGES.values() if task["ours"]["valid"][j] < task["upstream"]["valid"][j]]


def summary(model: str, label: str, tasks: Dict[str, Dict]) -> List[object]:
    drawn = {v: sum(t[v]["candidates"] for t in tasks.values()) for v in VARIANTS}
    changed = [t for t in tasks.values() if t["upstream"]["intermediates"] != t["ours"]["intermediates"]]
    cells = []
    for judge in JUDGES.values():
        valid = {v: sum(t[v]["valid"][judge] for t in tasks.values()) for v in VARIANTS}
        fused = {v: sum(t[v]["valid"][judge] for t in changed) for v in VARIANTS}
        cells.append(f"{valid['upstream']} / {valid['ours']} (fused tasks: {fused['upstream']} / "
                     f"{fused['ours']})")
    more = [t for t in tasks.values() if any(t["ours"]["valid"][j] > t["upstream"]["valid"][j]
                                             for j in JUDGES.values())]
    return [model, label, len(tasks), len(changed), f"{drawn['upstream']} / {drawn['ours']}", *cells,
            f"{sum(t['paired'] for t in tasks.values())}",
            sum(bool(fewer_valid(t)) for t in tasks.values()), len(more)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2")
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    parser.add_argument("--per-space", type=int, default=8,
                        help="candidates per design space (seeds 1..N), per variant")
    parser.add_argument("--image-size", type=int, default=224)
    args = parser.parse_args()
    for config_name in [c.strip() for c in args.configs.split(",") if c.strip()]:
        if config_name not in CONFIGS:
            parser.error(f"unknown configuration {config_name}; choose from {', '.join(CONFIGS)}")
        for model in args.models.split(","):
            print(f"{model} / {config_name}", flush=True)
            start = time.perf_counter()
            tasks = model_validity(model, config_name, args.per_space, args.image_size)
            save_result(RESULTS, f"{config_name}/{model}/{args.image_size}", {
                "row": summary(model, CONFIGS[config_name]["label"], tasks),
                "tasks": tasks, "seconds": round(time.perf_counter() - start),
                "per_space": args.per_space,
                "image_size": args.image_size, "commit": current_commit(), "date": utc_now(),
            })
    render(args.image_size)
    return 0


def render(image_size: int) -> None:
    stored = {k: v for k, v in load_results(RESULTS).items() if v["image_size"] == image_size}
    rows, notes, runs = [], [], []
    for key, entry in stored.items():
        rows.append(entry["row"])
        runs.append(f"{key.split('/')[0]} {key.split('/')[1]}: {entry['date']} (commit "
                    f"{entry['commit']}, {entry['seconds']} s)")
        for name, task in entry["tasks"].items():
            for judge in fewer_valid(task):
                notes.append(f"- {key}, task {name}, judged by {judge}: ours "
                             f"{task['ours']['valid'][judge]}, upstream "
                             f"{task['upstream']['valid'][judge]} (rejected by: ours "
                             f"{task['ours']['rejected'][judge]}, upstream "
                             f"{task['upstream']['rejected'][judge]})")
    header = ["model", "target (layout)", "tasks", "tasks fused by the new rules",
              "candidates drawn: upstream / ours",
              *[f"valid, judged by {j}: upstream / ours" for j in JUDGES.values()],
              "ours candidates with an upstream twin", "tasks where ours < upstream",
              "tasks where ours > upstream"]
    body = (
        "Candidates drawn as MetaSchedule's search draws its first population: the trace of "
        "every design space (random state 1) replayed on a fresh schedule seeded with "
        "`k = 1..N` (`--per-space N`), then the postprocs of the variant's list. A candidate is valid when every "
        "postproc accepts it; each is judged twice, once by each verifier (TVM's VerifyGPUCode, "
        "upstream's, and VerifyLoweredGPUCode, ours), so that a difference between the variants "
        "comes from their design spaces and not from ours' stricter verifier. Both variants draw "
        "with the same seeds from every space; an upstream twin is a candidate of the same seed "
        "whose decisions agree with ours' on every decision both make (the unfused schedule "
        "also samples the thread extent of its extra kernel): the two differ only in what the "
        "rules fused. \"Tasks fused by the new rules\" are those whose worst design "
        "space keeps fewer global intermediates under ours; their valid candidates are given in "
        "brackets. \"ours < upstream\" counts tasks where ours has fewer valid candidates under "
        "either verifier.\n\n"
        "Runs: " + "; ".join(runs) + ".\n\n"
        + markdown_table(header, rows)
        + ("\n\nTasks where ours has fewer valid candidates:\n\n" + "\n".join(notes) if notes
           else "\n\nOurs has at least as many valid candidates as upstream on every task.")
    )
    models_of: Dict[str, List[str]] = {}
    for key in stored:
        models_of.setdefault(key.split("/")[0], []).append(key.split("/")[1])
    per_space = {entry["per_space"] for entry in stored.values()}
    command = ["benchmarks/candidate_validity.py", "--configs", ",".join(models_of),
               "--models", ",".join(dict.fromkeys(m for ms_ in models_of.values() for m in ms_)),
               "--per-space", ",".join(str(p) for p in sorted(per_space))]
    write_section("candidate_validity", "Valid GPU candidates per task: ours vs upstream", body,
                  command=command)


if __name__ == "__main__":
    raise SystemExit(main())
