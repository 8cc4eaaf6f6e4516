"""Padding blocks recognised by their content: a padded copy of an input, nothing else."""

import tvm
from tvm import te, tir, topi

from meta_rules.analysis.padding_blocks import is_padding_block, padding_block_names


def _func(*tensors) -> tir.PrimFunc:
    return te.create_prim_func(list(tensors))


def _blocks(func: tir.PrimFunc) -> dict:
    found = {}
    tir.stmt_functor.post_order_visit(
        func.body, lambda node: found.setdefault(node.name_hint, node)
        if isinstance(node, tir.Block) else None)
    return found


def test_topis_pad_inside_a_conv_is_a_padding_block_and_the_conv_is_not():
    data = te.placeholder((1, 2, 8, 8, 16), "uint8", "data")
    weight = te.placeholder((2, 1, 3, 3, 1, 16), "int8", "weight")
    padded = topi.nn.pad(data, (0, 0, 1, 1, 0), (0, 0, 1, 1, 0), name="anything")
    kh, kw = te.reduce_axis((0, 3), "kh"), te.reduce_axis((0, 3), "kw")
    conv = te.compute((1, 2, 8, 8, 16), lambda n, c, h, w, b: te.sum(
        padded[n, c, h + kh, w + kw, b].astype("int32") * weight[c, 0, kh, kw, 0, b].astype("int32"),
        axis=[kh, kw]), name="conv")
    func = _func(data, weight, conv)
    blocks = _blocks(func)
    assert is_padding_block(blocks["anything"])  # by content: the name is not TOPI's
    assert not is_padding_block(blocks["conv"])
    assert padding_block_names(func) == {"anything"}


def test_a_pad_with_a_value_from_a_0d_buffer_is_one_too():
    data = te.placeholder((4, 4), "int8", "data")
    value = te.compute((), lambda: tvm.tir.const(3, "int8"), name="value")
    padded = te.compute((6, 6), lambda i, j: tvm.tir.if_then_else(
        tvm.tir.all(i >= 1, i < 5, j >= 1, j < 5), data[i - 1, j - 1], value[()]), name="padded")
    assert padding_block_names(_func(data, padded)) == {"padded"}


def test_a_select_between_two_inputs_or_of_a_computed_value_is_not_a_pad():
    a = te.placeholder((4, 4), "int8", "a")
    b = te.placeholder((4, 4), "int8", "b")
    two_inputs = te.compute((4, 4), lambda i, j: tvm.tir.if_then_else(i < 2, a[i, j], b[i, j]),
                            name="two_inputs")
    computed = te.compute((4, 4), lambda i, j: tvm.tir.if_then_else(
        i < 2, a[i, j] + tvm.tir.const(1, "int8"), tvm.tir.const(0, "int8")), name="computed")
    copy = te.compute((4, 4), lambda i, j: a[i, j], name="copy")
    assert padding_block_names(_func(a, b, two_inputs)) == set()
    assert padding_block_names(_func(a, computed)) == set()
    assert padding_block_names(_func(a, copy)) == set()
