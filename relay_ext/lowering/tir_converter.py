"""The TE->TIR converter ``inline_constants``: Relay's scalar constants, annotated for inlining.

TVM 0.19 lowers every fused Relay function to TIR through a converter that it looks up by name:
the pass-context option ``relay.backend.tir_converter`` (default ``"default"``) names the
PackedFunc ``relay.backend.tir_converter.<name>``, called with the function's TE tensors and its
non-scalar constants, returning a PrimFunc or None (TVM then falls back to a TE schedule). The
same converter is used at task extraction, during tuning and at final compilation, so a tuned
record is found again at compile time (the database is keyed by the structural hash of the TIR).

Relay turns each scalar constant of a fused function (a zero point, a shift) into
``te.compute((), lambda: value)``. The default converter makes it a block that reads nothing and
writes one 0-d buffer; ``inline_constants`` returns the same PrimFunc with that block annotated::

    compile_engine_const = T.alloc_buffer((), "int32")
    with T.block("compile_engine_const"):
        vi = T.axis.spatial(1, T.int64(0))
        T.reads()
        T.writes(compile_engine_const[()])
        T.block_attr({"schedule_rule": "compute_inline"})     # <- added here
        compile_engine_const[()] = 3

MetaSchedule's ApplyCustomRule, the first rule of every default rule set, then hands the block to
``meta_schedule.<target key>.compute_inline`` (registered by :mod:`meta_rules`), which inlines it
before any other rule sees its consumers. For the constants this is exactly the PrimFunc a TVM
built with ``relay_ext/lowering/patches/te_compiler_cache.patch`` produces with its own default
converter (the layout-transform hand-off below has no patch counterpart).

Constant blocks are recognised by structure (0-d buffer written, no buffer read, a literal value
stored), never by name. A block that already carries a ``schedule_rule`` annotation (a patched
TVM, or a TOPI compute with its own rule) is left as it is, with two exceptions: a TOPI layout
transform marked ``"None"`` (no rule) whose source channel blocks are narrower than its
destination's (``NCHW16c`` -> ``NCHW64c``, the AMX convs' input) is handed to
:mod:`meta_rules.cpu.layout_transform_rule` instead, which copies it a source block at a time,
and one from a layout without channel blocks to one with them (``NCHW`` -> ``NCHW4c``, the model
input's copy) to :mod:`meta_rules.cpu.padded_layout_rule`, which splits the padded borders off.
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import tvm
from tvm import te, tir

import meta_rules  # noqa: F401  registers the custom rule that consumes the annotation
from meta_rules.analysis.constant_blocks import is_0d_constant_block
from meta_rules.base.custom_rules import SCHEDULE_RULE_KEY, with_schedule_rule
from meta_rules.cpu.layout_transform_rule import annotate_layout_transform
from meta_rules.cpu.padded_layout_rule import annotate_padded_layout

logger = logging.getLogger(__name__)

CONVERTER_NAME = "inline_constants"
DEFAULT_CONVERTER_NAME = "default"
COMPUTE_INLINE = "compute_inline"


def converter_global_name(name: str) -> str:
    """The PackedFunc name under which TVM looks up the TE->TIR converter ``name``."""
    return f"relay.backend.tir_converter.{name}"


def is_scalar_literal_block(block: tir.Block) -> bool:
    """True for a block that reads no buffer and stores a literal into one 0-d buffer.

    That is the TIR of a Relay scalar constant; a 0-d block that reads something (a cast of a
    constant, a reduction to a scalar) or computes its value is not one.
    """
    if not is_0d_constant_block(block) or block.init is not None:
        return False
    written = block.writes[0].buffer
    body = block.body
    return (
        isinstance(body, tir.BufferStore)
        and body.buffer.same_as(written)
        and len(body.indices) == 0
        and isinstance(body.value, (tir.IntImm, tir.FloatImm))
    )


def has_schedule_rule(block: tir.Block) -> bool:
    """True when ``block`` already names a MetaSchedule custom rule (whatever its value)."""
    return SCHEDULE_RULE_KEY in block.annotations


def with_compute_inline_rule(block: tir.Block) -> tir.Block:
    """``block`` with the annotation ``schedule_rule = "compute_inline"`` added."""
    return with_schedule_rule(block, COMPUTE_INLINE)


def should_annotate(block: tir.Block) -> bool:
    return is_scalar_literal_block(block) and not has_schedule_rule(block)


def annotate_scalar_constants(func: tir.PrimFunc) -> tir.PrimFunc:
    """``func`` with every unannotated scalar constant block marked for compute_inline (and a
    gathering layout transform for ``quantfuse_layout_transform``, see the module doc).

    Returns ``func`` itself when there is nothing to annotate (a float model, or a PrimFunc that
    is already annotated), so the result is idempotent.
    """

    def annotate(stmt: tir.Stmt) -> Optional[tir.Stmt]:
        if isinstance(stmt, tir.Block) and should_annotate(stmt):
            return with_compute_inline_rule(stmt)
        if isinstance(stmt, tir.Block):  # a layout transform TOPI left to no rule
            return annotate_layout_transform(stmt) or annotate_padded_layout(stmt)  # None: kept
        return None  # keep the node as mutated so far

    body = tir.stmt_functor.ir_transform(func.body, None, annotate, ["tir.Block"])
    if body.same_as(func.body):
        return func
    return func.with_body(body)


def default_converter() -> tvm.runtime.PackedFunc:
    """TVM's own converter, ``relay.backend.tir_converter.default``."""
    return tvm.get_global_func(converter_global_name(DEFAULT_CONVERTER_NAME))


def inline_constants_converter(
    args: Sequence[te.Tensor], constants: Sequence[tvm.nd.NDArray]
) -> Optional[tir.PrimFunc]:
    """The ``inline_constants`` converter: TVM's default, with scalar constants annotated.

    Returns None exactly when the default converter does (dynamic shapes, extern ops), so TVM
    falls back the same way it would without us.
    """
    func = default_converter()(args, constants)
    if func is None:
        return None
    return annotate_scalar_constants(func)


def register_inline_constants_converter() -> bool:
    """Register :func:`inline_constants_converter` under its TVM name; return whether it was now.

    A name already registered (by us earlier, or by someone else) is left alone, so importing
    twice is harmless and nobody's function is replaced.
    """
    name = converter_global_name(CONVERTER_NAME)
    if tvm.get_global_func(name, allow_missing=True) is not None:
        logger.debug("%s is already registered; left as it is", name)
        return False
    tvm.register_func(name, inline_constants_converter)
    return True


register_inline_constants_converter()
