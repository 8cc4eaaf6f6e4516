"""The per-layer table of benchmarks/where_time_goes.py: TVM's tasks against each peer's layers.

A helper, not a script. Convolutions are matched by :data:`Signature` (input channels, output
channels, kernel, stride, output height and width; a peer's channel counts as TVM's x86 int8
convolutions run them, :func:`tvm_channels`: padded, and on a target without VNNI over twice the
input channels): a row sums every TVM task and every peer layer with that signature. The rest is
"everything else" per side; a peer convolution whose signature no TVM task has is counted in a
row of its own, never silently in another.

A peer is ``{"name": ..., "rows": [{"signature": Signature | None, "ms": float, "kind": str}],
"total": float}``: its per-layer times (the sum over its layers of one inference), what ran each
(its kernel), and its whole-model latency.
"""

from __future__ import annotations

import collections
from typing import Dict, List, Optional, Sequence, Tuple

# in channels, out channels, kernel, stride, out H, out W
Signature = Tuple[int, int, int, int, int, int]


def tvm_channels(cin: int, cout: int, groups: int, split: bool = False) -> Tuple[int, int]:
    """The channel counts TVM's x86 int8 convolution runs with: a non-grouped one has its input
    channels padded to a multiple of 4 and its output channels to a multiple of 16 (TOPI's
    ``conv2d_alter_int8_common``), so ResNet's 3-channel stem is a 4-channel conv there.
    ``split``: TVM runs the conv in its saturation-free form, one conv over the input read twice
    (:mod:`relay_ext.lowering.x86.saturation_free_int8`), so its input channels are doubled
    before the padding: the 3-channel stem is an 8-channel conv there."""
    if groups != 1:
        return cin, cout
    cin *= 2 if split else 1
    return -(-cin // 4) * 4, -(-cout // 16) * 16


def describe(signature: Signature) -> str:
    cin, cout, kernel, stride, height, width = signature
    return f"conv {kernel}x{kernel}/{stride} {cin}->{cout}, out {height}x{width}"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def match(tvm_rows: Sequence[Dict], peer_rows: Sequence[Dict]) -> Dict[Optional[Signature], List[Dict]]:
    """The peer's rows by the TVM signature they match; ``None``: not a convolution, or a
    convolution with no TVM task of its signature (each row gets ``matched`` True / False)."""
    signatures = {row["signature"] for row in tvm_rows if row["signature"] is not None}
    grouped: Dict[Optional[Signature], List[Dict]] = collections.defaultdict(list)
    for row in peer_rows:
        hit = row["signature"] if row["signature"] in signatures else None
        grouped[hit].append({**row, "matched": hit is not None})
    return grouped


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
