"""A TIR pass that rewrites every loop that does not start at 0 into one that does.

TVM 0.19's schedule primitive ``loop_partition`` leaves the loops after the first partition
starting where the previous one ended (``for w in range(3, 227)``), and nothing in the lowering
pipeline moves them back to 0, while the CPU code generator accepts only loops from 0 (an
``InternalError: Check failed: (is_zero(op->min))``). The rule
:mod:`meta_rules.cpu.padded_layout_rule` partitions the model input's copy at its padding::

    for w in range(3, 227):                  # before
        out[h, w, c] = f(x[c, h - 3, w - 3])

    for w in range(224):                     # after
        out[h, w + 3, c] = f(x[c, h - 3, w])

The same iterations in the same order, the loop variable shifted by the old start. Loops that
already start at 0 are left alone (every kernel without a partition comes out unchanged). It runs
as a phase-0 lowering pass (``tir.add_lower_pass``, before vectorization and code generation) in
every build quantfuse makes.
"""

from __future__ import annotations

from tvm import tir


def _starts_at_zero(loop: tir.For) -> bool:
    return isinstance(loop.min, tir.IntImm) and loop.min.value == 0


def _shift(node):
    if not isinstance(node, tir.For) or _starts_at_zero(node):
        return None  # unchanged
    old = node.loop_var
    new = tir.Var(old.name, old.dtype)
    body = tir.stmt_functor.substitute(node.body, {old: new + node.min})
    return tir.For(new, tir.const(0, old.dtype), node.extent, node.kind, body,
                   node.thread_binding, node.annotations)


@tir.transform.prim_func_pass(opt_level=0, name="quantfuse.ZeroBasedLoops")
def zero_based_loops(func: tir.PrimFunc, mod, ctx) -> tir.PrimFunc:  # pylint: disable=unused-argument
    """``func`` with every loop that starts elsewhere than 0 rewritten to start at 0."""
    body = tir.stmt_functor.ir_transform(func.body, None, _shift, ["tir.For"])
    return func if body.same_as(func.body) else func.with_body(body)
