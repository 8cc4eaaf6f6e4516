"""Which OpenVINO layer runs the same convolution as which of TVM's fused ops, and what
instructions a build's kernels use: what ``quantfuse profile`` puts side by side.

Convolutions are paired by :data:`Signature` (input channels, output channels, kernel, stride,
output height and width). TVM's x86 int8 convolutions do not run the network's channel counts:
a non-grouped one has its input channels padded to a multiple of 4 and its output channels to a
multiple of 16 (TOPI's ``conv2d_alter_int8_common``; the int16 convs of targets without VNNI,
:mod:`relay_ext.lowering.x86.int16_pair_conv`, alike). A peer's conv (the network's channels) is
therefore counted as TVM's build runs it (:func:`peer_signature`).
"""

from __future__ import annotations

import collections
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tvm
from tvm import meta_schedule as ms
from tvm import relay

# in channels, out channels, kernel, stride, out H, out W
Signature = Tuple[int, int, int, int, int, int]


def tvm_channels(cin: int, cout: int, groups: int) -> Tuple[int, int]:
    """The channel counts TVM's x86 int8 convolution runs with (see the module doc): a
    non-grouped one pads its input channels to a multiple of 4 and its output channels to a
    multiple of 16, so ResNet's 3-channel stem is a 4-channel conv."""
    if groups != 1:
        return cin, cout
    return -(-cin // 4) * 4, -(-cout // 16) * 16


def describe(signature: Signature) -> str:
    """``conv 3x3/1 64->64, out 56x56``."""
    cin, cout, kernel, stride, height, width = signature
    return f"conv {kernel}x{kernel}/{stride} {cin}->{cout}, out {height}x{width}"


def peer_signature(cin: int, cout: int, groups: int, kernel: int, stride: int, height: int,
                   width: int) -> Signature:
    """A peer's conv (the network's channel counts) as TVM's build runs it: channels padded."""
    return (*tvm_channels(cin, cout, groups), kernel, stride, height, width)


def _conv_call(task: ms.ExtractedTask) -> Optional[relay.Call]:
    """The task's first conv2d call; None where it has none or runs a dense layer
    (:func:`_dense_as_conv`)."""
    (_, func), = task.mod.functions.items()
    found: List[relay.Call] = []

    def visit(node):
        if isinstance(node, relay.Call) and isinstance(node.op, tvm.ir.Op) and \
                "conv2d" in node.op.name and not found:
            found.append(node)

    relay.analysis.post_order_visit(func.body, visit)
    if not found or _dense_as_conv(found[0]):
        return None
    return found[0]


def _data_channels(node: relay.Call) -> int:
    data = [int(d) for d in node.args[0].checked_type.shape]
    if str(node.attrs.data_layout).startswith("NCHW"):
        return data[1] * (data[4] if len(data) == 5 else 1)
    return data[3]


def conv_signature(task: ms.ExtractedTask) -> Optional[Signature]:
    """The signature of the task's convolution, or None when it has none (or runs a dense layer,
    :func:`_dense_as_conv`); its channel counts as
    :func:`tvm_channels` pads them, so that a target where TOPI does not pad them (no int8
    layout) still pairs with the peers' padded ones."""
    node = _conv_call(task)
    if node is None:
        return None
    out = [int(d) for d in node.checked_type.shape]
    height, width = ((out[2], out[3]) if str(node.attrs.data_layout).startswith("NCHW")
                     else (out[1], out[2]))
    cin, cout = tvm_channels(_data_channels(node), int(node.attrs.channels),
                             int(node.attrs.groups))
    return (cin, cout, int(node.attrs.kernel_size[0]), int(node.attrs.strides[0]), height, width)


def conv_macs(task: ms.ExtractedTask) -> Optional[int]:
    """The multiply-adds of one call of the task's convolution as TVM's build runs it (the
    channels of its input and output tensors, padded where TOPI pads them; a grouped conv's
    inputs per group), or None where :func:`conv_signature` is None."""
    node = _conv_call(task)
    if node is None:
        return None
    outputs = int(np.prod([int(d) for d in node.checked_type.shape]))
    taps = int(np.prod([int(k) for k in node.attrs.kernel_size]))
    return outputs * taps * (_data_channels(node) // int(node.attrs.groups))


def _dense_as_conv(node: relay.Call) -> bool:
    """A dense layer that TVM runs as a 1x1 int16 conv over a 1x1 map (targets without VNNI,
    :func:`relay_ext.lowering.x86.int16_pair_conv.int16_dense`): no conv to the peers, whose
    layer is a fully connected one."""
    data_shape = [int(d) for d in node.args[0].checked_type.shape]
    spatial = data_shape[2:4] if str(node.attrs.data_layout).startswith("NCHW") else data_shape[1:3]
    return (int(node.attrs.kernel_size[0]) == 1 and list(spatial) == [1, 1]
            and str(node.args[0].checked_type.dtype) == "int16")


def asm_kernel_kind(asm: str) -> str:
    """What int8 instructions assembly text uses: ``AMX`` (``tdpbusd``), ``VNNI xN`` (``N``
    distinct ``vpdpbusd`` accumulator registers; 1: each waits for the previous),
    ``vpmaddubsw`` (an int8 multiply-add without VNNI), ``vpmaddwd`` (int8 widened to 16 bits
    first) or ``no int8 dot``."""
    if "tdpbusd" in asm:
        return "AMX"
    chains = {line.split(",")[-1].strip() for line in asm.splitlines() if "vpdpbusd" in line}
    if chains:
        return f"VNNI x{len(chains)}"
    if "vpmaddubsw" in asm:
        return "vpmaddubsw"
    return "vpmaddwd" if "vpmaddwd" in asm else "no int8 dot"


def kernel_kind(lib) -> str:
    """:func:`asm_kernel_kind` of a built module's whole code."""
    return asm_kernel_kind(lib.get_lib().get_source("asm"))


_LABEL = re.compile(r"^([A-Za-z_][\w.$]*):")
_PARALLEL_BODY = "_compute_"  # LLVM's codegen: a parallel loop's body, <function>_compute_


def function_kernel_kinds(lib, names: Sequence[str]) -> Dict[str, str]:
    """Per function of ``names`` (as the graph calls them, ``tvmgen_default_fused_...``) of a
    whole-model build: :func:`asm_kernel_kind` of its code and its parallel bodies'. Empty where
    the code has no assembly (a non-llvm build)."""
    try:
        asm = lib.get_lib().get_source("asm")
    except tvm.TVMError:
        return {}
    wanted = set(names)
    pieces: Dict[str, List[str]] = collections.defaultdict(list)
    owner: Optional[str] = None
    for line in asm.splitlines():
        label = _LABEL.match(line)
        if label:
            name = label.group(1)
            base = name[:-len(_PARALLEL_BODY)] if name.endswith(_PARALLEL_BODY) else name
            owner = base if base in wanted else None  # local labels (.LBB0_1) match no label
        if owner is not None:
            pieces[owner].append(line)
    return {name: asm_kernel_kind("\n".join(lines)) for name, lines in pieces.items()}


def openvino_rows(profile) -> List[Dict]:
    """An :class:`relay_ext.peers.openvino_layers.OpenVINOProfile`'s nodes in execution order,
    as peer rows: conv nodes with their signature (channels as TVM's build runs them,
    :func:`peer_signature`), every node with its kernel (``kind``, ``+ add`` where a conv
    also adds the shortcut) and what it is (``part``)."""
    rows = []
    for layer in profile.layers:
        signature = None
        if layer.conv is not None:
            c = layer.conv
            signature = peer_signature(c.in_channels, c.out_channels, c.groups, c.kernel, c.stride,
                                       c.out_height, c.out_width)
        rows.append({"signature": signature, "ms": layer.ms, "name": layer.name,
                     "kind": layer.exec_type + (" + add" if layer.residual_add else ""),
                     "part": f"{layer.layer_type} ({layer.exec_type})"})
    return rows


def match(tvm_rows: Sequence[Dict], peer_rows: Sequence[Dict]) -> Dict[Optional[Signature], List[Dict]]:
    """The peer's rows by the TVM signature they match; ``None``: not a convolution, or a
    convolution with no TVM row of its signature (each row gets ``matched`` True / False)."""
    signatures = {row["signature"] for row in tvm_rows if row["signature"] is not None}
    grouped: Dict[Optional[Signature], List[Dict]] = collections.defaultdict(list)
    for row in peer_rows:
        hit = row["signature"] if row["signature"] in signatures else None
        grouped[hit].append({**row, "matched": hit is not None})
    return grouped


def pair_calls(calls: Sequence[Tuple[str, Optional[Signature]]],
               peer_rows: Sequence[Dict]) -> Tuple[Dict[str, List[Dict]], List[Dict]]:
    """TVM's kernel calls in execution order (name, conv signature or None) against a peer's
    rows in its execution order: each call of a conv takes the next unpaired peer row of its
    signature (both follow the network's order, so the n-th conv of a shape meets the n-th).
    Returns the peer rows per kernel name, and the peer rows no call took."""
    queues: Dict[Signature, collections.deque] = collections.defaultdict(collections.deque)
    left: List[Dict] = []
    for row in peer_rows:
        if row["signature"] is None:
            left.append(row)
        else:
            queues[row["signature"]].append(row)
    paired: Dict[str, List[Dict]] = collections.defaultdict(list)
    for name, signature in calls:
        if signature is not None and queues.get(signature):
            paired[name].append(queues[signature].popleft())
    leftover = [row for queue in queues.values() for row in queue]
    order = {id(row): index for index, row in enumerate(peer_rows)}
    return dict(paired), sorted(left + leftover, key=lambda row: order[id(row)])
