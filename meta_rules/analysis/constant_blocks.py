"""Pure analysis of constant-producing blocks, shared by the schedule rules and the TE->TIR converter.

A *constant block* is one whose value does not depend on any buffer: it reads nothing and writes
exactly one buffer. Relay's scalar constants (``compile_engine_const``), ``full``/broadcast
constants and index-only blocks such as an ``arange`` all have this shape::

    with T.block("compile_engine_const"):        with T.block("T_arange"):
        vi = T.axis.spatial(1, 0)                     v0 = T.axis.spatial(16, i0)
        T.reads()                                     T.reads()
        T.writes(compile_engine_const[()])            T.writes(T_arange[v0])
        compile_engine_const[()] = 3                  T_arange[v0] = v0 * 2

Everything here is decided from the block's structure, never from its name.
"""

from __future__ import annotations

from tvm import tir


def is_constant_block(block: tir.Block) -> bool:
    """True when ``block`` reads no buffer and writes exactly one (whatever it stores there)."""
    return len(block.reads) == 0 and len(block.writes) == 1


def is_0d_constant_block(block: tir.Block) -> bool:
    """True for a constant block whose output buffer is 0-d, whatever it stores there (what TVM's
    InlineConstantScalars takes); Relay's scalar constants, which store a literal, are some of
    them."""
    return is_constant_block(block) and len(block.writes[0].buffer.shape) == 0
