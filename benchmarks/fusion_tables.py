"""Fusion of the built-in int8 models under each variant, per target (no tuning).

    python -m benchmarks.fusion_tables [--models resnet18,resnet50,mobilenet_v2] [--image-size 224]

For each model and configuration the static fusion report of ``quantfuse fusion`` is computed
(global-memory intermediates of each task's worst design space) and summarised: tasks, tasks that
keep an intermediate, intermediates and their global traffic per variant, the tasks where "ours"
leaves more than "upstream" (expected: none), and the time the report took. Each row is kept in
``benchmarks/results/fusion_tables.json`` (with its date and commit), so configurations can be run
one at a time; the section ``fusion_tables`` of docs/BENCHMARKS.md is rendered from all rows.

Configurations:

* ``llvm``: NCHW, ``llvm -mcpu=skylake-avx512 -num-cores 2``: TVM's AVX-512 rule set (the rows
  were computed with it; :func:`relay_ext.lowering.targets.host_llvm_target` picks
  ``cascadelake`` on a VNNI host, whose x86 rules differ only in the tensor intrinsic).
* ``a100, cuda rules``: NCHW, the nvidia/nvidia-a100 tag without its ``arch``: MetaSchedule picks
  its tensor-core rule set for any ``sm_75`` or newer arch, so dropping the arch is how the plain
  CUDA rules are applied with the A100's limits.
* ``a100, cuda-tensorcore rules``: NHWC, the nvidia/nvidia-a100 tag as it is.
* ``cuda sm_70``, ``vulkan``, ``rocm``: NCHW, the other GPU rule sets' targets, each with the limits
  MetaSchedule needs and no device to ask: ``cuda -arch=sm_70`` with a V100's limits (TVM's plain
  CUDA rules), ``vulkan`` with 32 KiB of shared memory per block (TVM's vulkan kind has no default
  for it, and MetaSchedule needs one), ``rocm`` as TVM defaults it (gfx900).

Every row also keeps the tasks where "ours" still leaves an intermediate, with the buffers, so a
note can name them.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Dict, List

from tvm.target import Target

import meta_rules
from benchmarks.markdown_report import (current_commit, load_results, markdown_table, save_result,
                                        utc_now, write_section)
import relay_ext
from relay_ext.report.fusion import FusionReport, fusion_report


def a100_with_cuda_rules() -> Target:
    """The A100's limits without the arch that makes MetaSchedule pick tensor-core rules."""
    config = dict(Target("nvidia/nvidia-a100").export())
    config.pop("arch", None)
    config.pop("host", None)
    return Target(config)


CONFIGS: Dict[str, Dict] = {
    "llvm": {"label": "llvm AVX-512 (NCHW)", "target": lambda: Target("llvm -mcpu=skylake-avx512 -num-cores 2"),
             "layout": "NCHW"},
    "a100-cuda": {"label": "a100, cuda rules (NCHW)", "target": a100_with_cuda_rules,
                  "layout": "NCHW"},
    "a100-tensorcore": {"label": "a100, cuda-tensorcore rules (NHWC)",
                        "target": lambda: "nvidia/nvidia-a100", "layout": "NHWC"},
    "cuda-sm70": {"label": "cuda sm_70 (NCHW)", "layout": "NCHW", "target": lambda: Target(
        "cuda -arch=sm_70 -max_threads_per_block=1024 -max_shared_memory_per_block=49152 "
        "-thread_warp_size=32")},
    "vulkan": {"label": "vulkan (NCHW)", "layout": "NCHW",
               "target": lambda: Target("vulkan -max_shared_memory_per_block=32768")},
    "rocm": {"label": "rocm gfx900 (NCHW)", "layout": "NCHW", "target": lambda: Target("rocm")},
}


RESULTS = Path(__file__).resolve().parent / "results" / "fusion_tables.json"


# Why the llvm rows cannot tell the variants apart (checked on a ResNet-18 conv task: the three
# variants give the same three spaces, intermediates [[], [], ["conv2d_NCHWc_int8"]]).
LLVM_NOTE = (
    "On `llvm` the three variants are equal by construction, not because the constants are "
    "harmless there: TVM's CPU rules never reverse-inline an epilogue (AutoInline has "
    "`into_producer=false` for llvm and x86), they fuse it with MultiLevelTiling's write reuse "
    "(`reuse_write` req `may`, levels 1 and 2), a reverse compute-at that constant producers do "
    "not block. `may` also keeps a third space without the fusion, so every conv/dense task's "
    "worst space keeps its output in global memory under every variant. The constant blocks "
    "matter on GPU targets, where AutoInline reverse-inlines (the a100 rows)."
)


def worse_than_upstream(report: FusionReport) -> List[str]:
    """Tasks where "ours" leaves more global intermediates than "upstream"."""
    return [t.name for t in report.tasks
            if t.variants["ours"].intermediates > t.variants["upstream"].intermediates]


def kept_by_ours(report: FusionReport) -> List[str]:
    """``"<task> (<anchor>): <buffers>"`` for every task where "ours" keeps an intermediate."""
    return [f"{t.name} ({t.anchor}): {', '.join(t.variants['ours'].buffers)}"
            for t in report.tasks if t.variants["ours"].intermediates]


def summary_row(model: str, config: str, report: FusionReport, seconds: float) -> List[object]:
    totals = report.totals
    cells = [f"{totals[v]['tasks_with_intermediates']} / {totals[v]['intermediates']} / "
             f"{totals[v]['bytes'] / 2**20:.1f} MiB" for v in report.variants]
    return [model, config, len(report.tasks), *cells, len(worse_than_upstream(report)),
            f"{seconds:.0f}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50,mobilenet_v2")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"comma-separated configurations (default: all of {', '.join(CONFIGS)})")
    args = parser.parse_args()
    variants = ["legacy", "upstream", "ours"]
    chosen = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration {', '.join(unknown)}; choose from {', '.join(CONFIGS)}")
    for config_name in chosen:
        config = CONFIGS[config_name]
        label = config["label"]
        for model in args.models.split(","):
            loaded = relay_ext.load_model(model, image_size=args.image_size, layout=config["layout"])
            start = time.perf_counter()
            report = fusion_report(loaded.mod, loaded.params, config["target"](), variants)
            seconds = time.perf_counter() - start
            row = summary_row(model, label, report, seconds)
            print(" | ".join(str(c) for c in row), flush=True)
            save_result(RESULTS, f"{config_name}/{model}/{args.image_size}", {
                "row": row, "worse_than_upstream": worse_than_upstream(report),
                "kept_by_ours": kept_by_ours(report),
                "image_size": args.image_size, "commit": current_commit(),
                "date": utc_now(),
            })
    stored = load_results(RESULTS)
    rows, details, dates, shown, kept = [], [], set(), [], []
    models_of: Dict[str, List[str]] = {}
    model_order = ["resnet18", "resnet50", "mobilenet_v2"]
    for key in sorted(stored, key=lambda k: (list(CONFIGS).index(k.split("/")[0]),
                                             model_order.index(k.split("/")[1])
                                             if k.split("/")[1] in model_order else 99, k)):
        entry = stored[key]
        if entry["image_size"] != args.image_size:
            continue
        rows.append(entry["row"])
        models_of.setdefault(key.split("/")[0], []).append(key.split("/")[1])
        if key.split("/")[0] not in shown:
            shown.append(key.split("/")[0])
        dates.add(f"{entry['date']} (commit {entry['commit']})")
        if entry["worse_than_upstream"]:
            details.append(f"- {entry['row'][0]}, {entry['row'][1]}: ours leaves more than "
                           "upstream on " + ", ".join(entry["worse_than_upstream"]))
        if key.split("/")[0] != "llvm" and entry.get("kept_by_ours"):
            kept.append(f"- {entry['row'][0]}, {entry['row'][1]}: "
                        + "; ".join(entry["kept_by_ours"]))
    assert set(variants) == set(meta_rules.VARIANTS)
    header = ["model", "target (layout)", "tasks",
              *[f"{v}: tasks with / intermediates / traffic" for v in variants],
              "tasks where ours > upstream", "report time (s)"]
    body = (
        f"Rows computed: {'; '.join(sorted(dates))}.\n\n"
        f"int8 models at batch 1, {args.image_size}x{args.image_size}, quantized with PyTorch "
        "(x86 qconfig) and imported with TVM's PyTorch frontend. Per variant: tasks that keep at "
        "least one global-memory intermediate in their worst design space, the number of such "
        "intermediates, and the global traffic they cost (each written once and read once). "
        "`a100, cuda rules` is the nvidia/nvidia-a100 tag without its arch (MetaSchedule picks "
        "tensor-core rules for sm_75 and newer; with no CUDA installed TVM then sets "
        "`-arch=sm_50`); `llvm AVX-512` is `llvm -mcpu=skylake-avx512 -num-cores 2`; `cuda sm_70` "
        "is `cuda -arch=sm_70` with a V100's limits (TVM's plain CUDA rules), `vulkan` is "
        "`vulkan -max_shared_memory_per_block=32768` (TVM gives vulkan no shared-memory limit and "
        "MetaSchedule needs one), `rocm gfx900` is TVM's default `rocm` target. Report time is "
        "the whole `fusion_report` (task extraction under 3 variants and every design space), on "
        "2 cores, shared with other work.\n\n"
        + markdown_table(header, rows)
        + ("\n\n" + "\n".join(details) if details else
           "\n\nOurs leaves no more intermediates than upstream on any task of any row.")
        + ("\n\nGPU tasks where ours still keeps an intermediate (task, anchor op: buffers):\n\n"
           + "\n".join(kept) if kept else
           "\n\nOn every GPU row, ours keeps no global intermediate in any task.")
        + ("\n\n" + LLVM_NOTE if "llvm" in shown else "")
        + "\n\nThe rows of each configuration are recomputed by:\n\n"
        + "\n".join(f"- `python -m benchmarks.fusion_tables --configs {c} --models {','.join(m)}"
                     + (f" --image-size {args.image_size}`" if args.image_size != 224 else "`")
                     for c, m in models_of.items())
    )
    # The command that recomputes every row shown (a run may have added only some of them).
    command = ["benchmarks/fusion_tables.py", "--configs", ",".join(shown)]
    if args.image_size != 224:
        command += ["--image-size", str(args.image_size)]
    write_section("fusion_tables", "Fusion of the int8 models per variant (static, no tuning)", body,
                  command=command)
    print("wrote docs/BENCHMARKS.md section fusion_tables")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
