"""The statement tree of a TIR function, for walks that carry their own context down it.

TVM's ``post_order_visit`` cannot say what encloses a node (inside a loop? under which thread
bindings?). The fusion measure and the GPU verifier both need that, so both walk with
:func:`child_stmts` and pass their context to the children themselves::

    def visit(stmt, in_loop):
        if isinstance(stmt, tir.Block) and not in_loop:
            roots.extend(stmt.alloc_buffers)
        for child in child_stmts(stmt):
            visit(child, in_loop or isinstance(stmt, tir.For))
"""

from __future__ import annotations

from typing import List

from tvm import tir

# Statements with exactly one nested statement, their ``body``.
_WITH_BODY = (tir.For, tir.While, tir.LetStmt, tir.AttrStmt, tir.AssertStmt, tir.Allocate,
              tir.DeclBuffer, tir.AllocateConst)


def child_stmts(stmt: tir.Stmt) -> List[tir.Stmt]:
    """The statements directly inside ``stmt``, in program order (a block's ``init`` before its
    body); none for a leaf statement (a store, an evaluate)."""
    if isinstance(stmt, tir.BlockRealize):
        return [stmt.block]
    if isinstance(stmt, tir.Block):
        return ([stmt.init] if stmt.init is not None else []) + [stmt.body]
    if isinstance(stmt, tir.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, tir.IfThenElse):
        return [stmt.then_case] + ([stmt.else_case] if stmt.else_case is not None else [])
    if isinstance(stmt, _WITH_BODY):
        return [stmt.body]
    return []
