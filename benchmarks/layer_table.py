"""The per-layer table of benchmarks/where_time_goes.py: TVM's tasks against each peer's layers.

A helper, not a script. Convolutions are matched by
:data:`relay_ext.latency.layer_pairing.Signature` (input channels, output channels, kernel,
stride, output height and width; a peer's channel counts as TVM's x86 int8 convolutions run them,
:func:`~relay_ext.latency.layer_pairing.tvm_channels`: padded; ``quantfuse profile`` pairs
them the same way): a row sums every TVM
task and every peer layer with that signature. The rest is
"everything else" per side; a peer convolution whose signature no TVM task has is counted in a
row of its own, never silently in another.

A peer is ``{"name": ..., "rows": [{"signature": Signature | None, "ms": float, "kind": str}],
"total": float}``: its per-layer times (the sum over its layers of one inference), what ran each
(its kernel), and its whole-model latency.
"""

from __future__ import annotations

import collections
from typing import Dict, List, Tuple

# the pairing is the library's (quantfuse profile uses it too); re-exported for the scripts
from relay_ext.latency.layer_pairing import (Signature, describe, match,  # noqa: F401
                                             tvm_channels)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def table(tvm_rows: List[Dict], tvm_total: float, peers: List[Dict],
          label: str = "tuned") -> Tuple[List[str], List[List[str]]]:
    """Header and rows: per conv signature, TVM (``label``: what build it is) and TOPI's default,
    each peer, TVM's ratio to each peer, the gap to the fastest peer, and what kernel each side
    ran; then everything else, the sums of the layers and the whole models."""
    by_sig: Dict[Signature, Dict] = collections.OrderedDict()
    for row in tvm_rows:
        if row["signature"] is None:
            continue
        entry = by_sig.setdefault(row["signature"], {"tvm": 0.0, "default": 0.0, "calls": 0,
                                                     "kinds": set()})
        entry["tvm"] += row["calls"] * row["used_ms"]
        entry["default"] += row["calls"] * row["default_ms"]
        entry["calls"] += row["calls"]
        if row.get("kind"):
            entry["kinds"].add(row["kind"])
    matched = [match(tvm_rows, peer["rows"]) for peer in peers]
    names = [peer["name"] for peer in peers]
    header = (["layer", "calls (TVM / " + " / ".join(names) + ")", f"TVM {label} ms",
               "TVM default ms"] + [f"{n} ms" for n in names]
              + [f"TVM / {n}" for n in names] + ["gap to fastest peer ms", "TVM kernel"]
              + [f"{n} kernel" for n in names])

    def line(name, calls, tvm, default, peer_ms, kinds) -> List[str]:
        best = min(peer_ms) if peer_ms else None
        return ([name, calls, f"{tvm:.3f}", "" if default is None else f"{default:.3f}"]
                + [f"{ms:.3f}" for ms in peer_ms] + [_ratio(tvm, ms) for ms in peer_ms]
                + [f"{tvm - best:+.3f}" if best is not None else "-"] + kinds)

    convs = []
    for signature, e in by_sig.items():
        peer_ms, counts, kinds = [], [], []
        for grouped in matched:
            rows = grouped.get(signature, [])
            peer_ms.append(sum(r["ms"] for r in rows))
            counts.append(str(len(rows)))
            kinds.append(", ".join(sorted({r["kind"] for r in rows if r.get("kind")})) or "-")
        gap = e["tvm"] - min(peer_ms) if peer_ms else e["tvm"]
        convs.append((gap, line(describe(signature), " / ".join([str(e["calls"])] + counts),
                                e["tvm"], e["default"], peer_ms,
                                [", ".join(sorted(e["kinds"])) or "-"] + kinds)))
    rows = [row for _, row in sorted(convs, key=lambda c: -c[0])]
    blank = [""] * (1 + len(peers))
    unmatched = [sum(r["ms"] for r in g.get(None, []) if r["signature"] is not None)
                 for g in matched]
    if any(unmatched):
        rows.append(line("convs with no TVM task of their shape", "", 0.0, None, unmatched, blank))
    tvm_other = sum(r["calls"] * r["used_ms"] for r in tvm_rows if r["signature"] is None)
    rows.append(line("everything else", "", tvm_other,
                     sum(r["calls"] * r["default_ms"] for r in tvm_rows if r["signature"] is None),
                     [sum(r["ms"] for r in g.get(None, []) if r["signature"] is None)
                      for g in matched], blank))
    rows.append(line("sum of the layers", "", sum(r["calls"] * r["used_ms"] for r in tvm_rows),
                     sum(r["calls"] * r["default_ms"] for r in tvm_rows),
                     [sum(r["ms"] for r in peer["rows"]) for peer in peers], blank))
    rows.append(line("whole model (one run, median)", "", tvm_total, None,
                     [peer["total"] for peer in peers], blank))
    return header, rows


def other_parts(tvm_rows: List[Dict], peers: List[Dict], top: int = 6) -> Tuple[List[str], List[List[str]]]:
    """What "everything else" holds: TVM's non-conv tasks and each peer's non-conv layers,
    grouped by ``part`` (a peer row's ``part``, else its kind), largest first, ``top`` each."""
    header = ["side", "part", "ms"]
    rows: List[List[str]] = []
    tvm_parts = collections.Counter()
    for row in tvm_rows:
        if row["signature"] is None:
            tvm_parts[row["task"]] += row["calls"] * row["used_ms"]
    for part, ms in tvm_parts.most_common(top):
        rows.append(["TVM", part, f"{ms:.3f}"])
    for peer in peers:
        parts = collections.Counter()
        for row in peer["rows"]:
            if row["signature"] is None:
                parts[row.get("part") or row.get("kind") or "?"] += row["ms"]
        for part, ms in parts.most_common(top):
            rows.append([peer["name"], part, f"{ms:.3f}"])
    return header, rows
