"""`make demo`: the seed workload's design spaces under each variant, and what stays in global memory.

Run as ``python -m relay_ext.demo``. It needs no GPU: CUDA design spaces are generated on the CPU.
"""

from __future__ import annotations

import argparse
import logging
from typing import List, Sequence

import meta_rules
from meta_rules import fusion
from relay_ext.te_workloads import quantized_conv2d_nhwc, quantized_dense

DEMO_TARGETS = {
    "nvidia/nvidia-a100 (cuda-tensorcore rules)": "nvidia/nvidia-a100",
    "cuda sm_70 (plain cuda rules)": "cuda -arch=sm_70 -max_threads_per_block=1024 "
                                     "-max_shared_memory_per_block=49152 -thread_warp_size=32",
    "llvm (cpu rules)": "llvm -num-cores 2",
}
WORKLOADS = {
    "int8 conv2d NHWC + requantize": quantized_conv2d_nhwc,
    "int8 dense + requantize": quantized_dense,
}


def seed_fusion_rows(variants: Sequence[str] = meta_rules.VARIANTS, rand_state: int = 1) -> List[List[str]]:
    """One row per (workload, target): the global intermediates of each design space per variant."""
    rows = []
    for workload_name, build in WORKLOADS.items():
        mod = build()
        for target_name, target in DEMO_TARGETS.items():
            row = [workload_name, target_name]
            for variant in variants:
                spaces = fusion.design_spaces(mod, target, variant, rand_state=rand_state)
                per_space = [fusion.global_intermediates(s.mod) for s in spaces]
                names = sorted({n for names in per_space for n in names})
                row.append(f"{[len(n) for n in per_space]} {', '.join(names)}".strip())
            rows.append(row)
    return rows


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    print(line)
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    print("Global-memory intermediates per design space (count per space, then buffer names).")
    print("Each one is a round trip through global memory that a fused epilogue does not pay.\n")
    print_table(["workload", "target", *meta_rules.VARIANTS], seed_fusion_rows())
    print("\nlegacy = TVM without InlineConstantScalars; upstream = TVM 0.19 defaults; "
          "ours = quantfuse (InlineConstantBlocks before every other rule).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
