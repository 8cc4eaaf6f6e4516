"""TVM's ``layout_transform`` in numpy, for constants folded or rewritten before Relay's build
(:mod:`relay_ext.lowering.prefold`, :mod:`relay_ext.lowering.x86.int16_winograd`)."""

from __future__ import annotations

import re
from typing import Dict, List, Tuple

import numpy as np


def _axes(layout: str) -> List[Tuple[str, int]]:
    """``"OIHW4i16o4i"`` -> [("O", 0), ("I", 0), ("H", 0), ("W", 0), ("I", 4), ("O", 16),
    ("I", 4)]: a primal axis (factor 0) or a sub-axis with its factor."""
    axes = []
    for factor, name in re.findall(r"(\d*)([A-Za-z])", layout):
        if name.isupper():
            if factor:
                raise ValueError(layout)
            axes.append((name, 0))
        else:
            axes.append((name.upper(), int(factor)))
    return axes


def layout_transform(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    """TVM's ``layout_transform`` of an array whose axes divide evenly (a sub-axis's factor
    divides its primal axis); a sub-axis written first is the more significant."""
    src_axes, dst_axes = _axes(src), _axes(dst)
    primal = [name for name, factor in src_axes if factor == 0]
    if sorted(primal) != sorted(n for n, f in dst_axes if f == 0) or len(src_axes) != x.ndim:
        raise ValueError(f"{src} -> {dst}")
    # src -> primal: group each primal axis's dims (outer first, then its sub-axes in order)
    order = [i for name in primal for i, (n, _) in enumerate(src_axes) if n == name]
    grouped = x.transpose(order)
    sizes = {}
    for name in primal:
        sizes[name] = int(np.prod([x.shape[i] for i, (n, _) in enumerate(src_axes) if n == name]))
    full = grouped.reshape([sizes[name] for name in primal])
    # primal -> dst: split each primal axis (outer, then its dst sub-axes in order), transpose
    split_shape, position = [], {}
    for name in primal:
        factors = [f for n, f in dst_axes if n == name and f]
        if sizes[name] % int(np.prod(factors or [1])):
            raise ValueError(f"{dst}: {name} of {sizes[name]} does not divide")
        position[(name, 0)] = len(split_shape)
        split_shape.append(sizes[name] // int(np.prod(factors or [1])))
        for k, factor in enumerate(factors):
            position[(name, k + 1)] = len(split_shape)
            split_shape.append(factor)
    seen: Dict[str, int] = {}
    perm = []
    for name, factor in dst_axes:
        if factor == 0:
            perm.append(position[(name, 0)])
        else:
            seen[name] = seen.get(name, 0) + 1
            perm.append(position[(name, seen[name])])
    return np.ascontiguousarray(full.reshape(split_shape).transpose(perm))
