"""AMXConv (meta_rules/cpu/amx_conv.py) and the layout that feeds it (relay_ext/lowering/x86/amx_layout.py).

Design spaces, postprocs and the layout pass run on any host (they are TIR and Relay); the built
code runs only where the OS enables AMX int8 and the kernel grants this process tile data
(elsewhere those tests are skipped, saying why)."""

import re

import numpy as np
import pytest
import tvm
from tvm import meta_schedule as ms
from tvm import relay, tir

import meta_rules
from meta_rules.cpu.amx_conv import (L1_WEIGHT_BYTES, AMXConv, amx_conv_shape, banded,
                                     pair_weight_bytes, reduction_chunk, rows_outermost)
from meta_rules.cpu.amx_intrinsics import register_intrinsic_by_name, register_intrinsics_of
from meta_rules.cpu.amx_tensorize import marked_blocks
from meta_rules.cpu.amx_tiles import target_has_amx
from relay_ext.lowering.x86 import amx_layout, x86_codegen
from relay_ext.lowering.x86.amx import request_amx_tile_data
from amx_reference import AMX, conv_module, reference
from helpers import VNNI



def design_spaces(mod, target):
    target = tvm.target.Target(target)
    context = ms.TuneContext(mod=mod, target=target,
                             space_generator=meta_rules.space_generator(target, "ours"),
                             rand_state=3)
    return context, context.generate_design_space()


def amx_tensorizes(sch) -> list:
    """The AMX intrinsics a design space marks for TensorizeAMXConv."""
    return [intrinsic for _, intrinsic in marked_blocks(sch)]


def test_the_targets_that_have_amx_are_told_by_their_llvm_features():
    assert target_has_amx(tvm.target.Target(AMX))
    assert target_has_amx(tvm.target.Target("llvm -mcpu=sapphirerapids"))
    assert not target_has_amx(tvm.target.Target(VNNI))
    assert not target_has_amx(tvm.target.Target("llvm -mcpu=cascadelake -mattr=+amx-tile"))
    assert not target_has_amx(tvm.target.Target("cuda"))


@pytest.mark.parametrize("kwargs,eligible", [
    ({}, True),
    ({"channels": 128, "height": 7}, True),
    ({"ic_block": 16}, False),    # a 16-channel data block: a quarter of a tile row
    ({"stride": 2}, True),
    ({"stride": 3}, False),
    ({"kernel": 1}, True),
    ({"kernel": 1, "stride": 2}, True),
    # a 1x1 conv of 16-channel blocks: repacked inside the kernel (band by band where the rows go
    # in parallel, whole and first where the weights outweigh the input)
    ({"kernel": 1, "ic_block": 16}, True),
    ({"kernel": 1, "ic_block": 16, "stride": 2, "height": 16}, True),
    ({"channels": 256, "height": 7, "kernel": 1, "ic_block": 16}, True),
    ({"channels": 32, "kernel": 1, "ic_block": 16, "out_channels": 32}, False),  # half a tile row
    ({"kernel": 5}, False),
    # one narrow data block (the stem): the K taps of a pixel row fill a tile row
    ({"channels": 4, "ic_block": 4, "kernel": 7, "stride": 2, "out_channels": 64}, True),
    ({"channels": 16, "ic_block": 16, "kernel": 3, "out_channels": 32}, True),
    ({"channels": 16, "ic_block": 16, "kernel": 5, "out_channels": 32}, False),  # 80 bytes
    ({"channels": 16, "ic_block": 16, "kernel": 1, "out_channels": 32}, False),  # no taps to fold
    ({"channels": 32, "ic_block": 16, "kernel": 3, "out_channels": 32}, False),  # two narrow blocks
])
def test_only_a_3x3_or_1x1_stride_1_or_2_conv_with_64_channel_blocks_is_taken(kwargs, eligible):
    sch = tir.Schedule(conv_module(**kwargs))
    assert (amx_conv_shape(sch, sch.get_block("conv2d_NCHWc_int8")) is not None) == eligible


def test_with_amx_every_design_space_tensorizes_the_conv_and_passes_the_postprocs():
    context, spaces = design_spaces(conv_module(), AMX)
    assert spaces
    for sch in spaces:
        assert amx_tensorizes(sch) == ["quantfuse_amx_conv3x3_m2_r8_k1z"]
        sch = sch.copy()
        for postproc in context.space_generator.postprocs:
            assert postproc.apply(sch), str(postproc)
        tvm.build(sch.mod, target=AMX)  # LLVM selects the tile instructions


def test_a_deep_conv_also_gets_a_design_that_runs_every_row_per_chunk_of_input_channels():
    context, spaces = design_spaces(conv_module(channels=256, height=7), AMX)
    assert [amx_tensorizes(sch) for sch in spaces] == [["quantfuse_amx_conv3x3_m1_r7_k4z"],
                                                       ["quantfuse_amx_conv3x3_m1_r7_k2"]]
    chunked = spaces[1].copy()
    for postproc in context.space_generator.postprocs:
        assert postproc.apply(chunked), str(postproc)
    # the accumulators are zeroed once, outside the loop over the two chunks of 128 channels
    # (a zeroing inside it would drop the first chunk's sums: the numpy test below would fail)
    text = chunked.mod.script()
    assert text.index("_o_init") < text.index("for ic_outer_0") < text.index("_o_update")
    tvm.build(chunked.mod, target=AMX)


@pytest.mark.parametrize("channels,kernel,chunk", [
    (64, 3, None), (128, 3, 1), (256, 3, 2), (128, 1, None), (1024, 1, None), (1152, 1, 2)])
def test_only_a_conv_whose_weights_outgrow_l1_gets_the_chunked_design(channels, kernel, chunk):
    sch = tir.Schedule(conv_module(channels=channels, height=7, kernel=kernel))
    shape = amx_conv_shape(sch, sch.get_block("conv2d_NCHWc_int8"))
    assert (pair_weight_bytes(shape) > L1_WEIGHT_BYTES) == (chunk is not None)
    assert reduction_chunk(shape) == chunk


@pytest.mark.parametrize("channels,height,stride,kernel,rows_first", [
    (64, 56, 1, 1, True),     # input 196 KiB, weights 4 KiB
    (64, 56, 1, 3, True),     # 196 KiB, 36 KiB
    (256, 14, 1, 1, False),   # 49 KiB, 64 KiB
    (512, 7, 1, 3, False),    # 24.5 KiB, 2.25 MiB
    (128, 14, 2, 1, True)])   # 24.5 KiB (14x14, read at stride 2), 16 KiB
def test_the_parallel_loop_takes_bands_of_rows_where_the_input_outweighs_the_weights(
        channels, height, stride, kernel, rows_first):
    mod = conv_module(channels, height, stride=stride, kernel=kernel)
    sch = tir.Schedule(mod)
    shape = amx_conv_shape(sch, sch.get_block("conv2d_NCHWc_int8"))
    assert rows_outermost(shape) == rows_first
    _, spaces = design_spaces(mod, AMX)
    (name, _), *_ = marked_blocks(spaces[0])
    found = []
    tir.stmt_functor.post_order_visit(spaces[0].mod["main"].body, lambda node: found.append(
        node) if isinstance(node, tir.BlockRealize) and node.block.name_hint == name else None)
    _, oc_pair, oh_block = (re.sub(r"T\.int64\((\d+)\)", r"\1", str(value))
                            for value in found[0].iter_values[:3])
    # the fused parallel loop: rows first makes the pair its fastest part, the row block the
    # slowest (fused // pairs); channels first the other way round
    pairs, row_blocks = shape.oc_chunks // 2, shape.height // shape.row_block
    inner, outer, extent = ((oc_pair, oh_block, pairs) if rows_first
                            else (oh_block, oc_pair, row_blocks))
    assert inner.endswith(f"% {extent}") and outer.endswith(f"// {extent}"), (oc_pair, oh_block)


def test_a_strided_conv_gets_the_amx_design_and_the_others_and_each_passes_the_postprocs():
    context, spaces = design_spaces(conv_module(channels=128, height=14, stride=2), AMX)
    marks = [amx_tensorizes(sch) for sch in spaces]
    assert marks.count(["quantfuse_amx_conv3x3s2_m1_r7_k2z"]) == 1  # output 7x7, 2 blocks of 64
    assert marks.count(["quantfuse_amx_conv3x3s2_m1_r7_k1"]) == 1  # the chunked design
    assert marks.count([]) == len(spaces) - 2 >= 1  # what the other rules make of it
    for sch in spaces:
        sch = sch.copy()
        for postproc in context.space_generator.postprocs:
            assert postproc.apply(sch), str(postproc)
    assert register_intrinsic_by_name("quantfuse_amx_conv3x3s2_m2_r14_k1")
    assert not register_intrinsic_by_name("quantfuse_amx_conv3x3s3_m2_r14_k1")
    assert register_intrinsic_by_name("quantfuse_amx_conv7x7s2c4_m2_r16_k1")  # the stem
    assert not register_intrinsic_by_name("quantfuse_amx_conv7x7s2c16_m2_r16_k1")  # 112 bytes


def test_a_1x1_conv_gets_its_own_intrinsics_and_each_design_passes_the_postprocs():
    # 1x1 of 128 channels: the pair's weights (4 KiB) stay in L1, so there is no chunked design
    context, spaces = design_spaces(conv_module(channels=128, height=14, kernel=1), AMX)
    assert [amx_tensorizes(sch) for sch in spaces] == [["quantfuse_amx_conv1x1_m2_r14_k2z"]]
    for sch in spaces:
        sch = sch.copy()
        for postproc in context.space_generator.postprocs:
            assert postproc.apply(sch), str(postproc)
        tvm.build(sch.mod, target=AMX)
    context, spaces = design_spaces(conv_module(channels=64, height=14, stride=2, kernel=1), AMX)
    marks = [amx_tensorizes(sch) for sch in spaces]
    assert marks.count(["quantfuse_amx_conv1x1s2_m1_r7_k1z"]) == 1  # output 7x7
    assert register_intrinsic_by_name("quantfuse_amx_conv1x1s2_m2_r14_k4")
    assert not register_intrinsic_by_name("quantfuse_amx_conv5x5_m2_r14_k4")
    assert not register_intrinsic_by_name("quantfuse_amx_conv1x3_m2_r14_k4")


def test_without_amx_the_rule_leaves_the_conv_to_the_other_rules():
    _, spaces = design_spaces(conv_module(), VNNI)
    assert spaces and not any(amx_tensorizes(sch) for sch in spaces)
    rules = meta_rules.schedule_rules(VNNI, "ours")
    assert not any(isinstance(rule, AMXConv) for rule in rules)
    assert any(isinstance(rule, AMXConv) for rule in meta_rules.schedule_rules(AMX, "ours"))
    assert not any(isinstance(rule, AMXConv) for rule in meta_rules.schedule_rules(AMX, "upstream"))


def test_a_record_names_its_intrinsic_and_a_fresh_process_can_register_it():
    context, spaces = design_spaces(conv_module(channels=128, height=7), AMX)
    sch = spaces[0].copy()
    for postproc in context.space_generator.postprocs:  # TensorizeAMXConv tensorizes
        assert postproc.apply(sch)
    assert register_intrinsics_of(sch.trace) == ["quantfuse_amx_conv3x3_m1_r7_k2z"]
    replayed = tir.Schedule(conv_module(channels=128, height=7))
    sch.trace.apply_to_schedule(replayed, remove_postproc=False)  # as Relay builds a record
    assert tvm.ir.structural_equal(replayed.mod, sch.mod)
    assert register_intrinsic_by_name("quantfuse_amx_conv3x3_m2_r14_k4")
    assert tir.TensorIntrin.get("quantfuse_amx_conv3x3_m2_r14_k4") is not None
    assert not register_intrinsic_by_name("dot_16x4_vnni")
    assert not register_intrinsic_by_name("quantfuse_amx_conv3x3_bad")


def assert_every_design_matches_numpy(context, spaces, data, weight, stride, kernel):
    """Every design space, its postprocs applied, built and run on ``data`` and ``weight``
    computes numpy's conv and requantize bit for bit."""
    expected = reference(data, weight, stride, kernel)
    x86_codegen.install()  # the VNNI designs beside a strided conv's AMX one, as tuning has it
    for sch in spaces:
        sch = sch.copy()
        for postproc in context.space_generator.postprocs:
            assert postproc.apply(sch)
        out = tvm.nd.empty(expected.shape, "int8")
        tvm.build(sch.mod, target=AMX)(tvm.nd.array(data), tvm.nd.array(weight), out)
        np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize("channels,height,stride,kernel", [
    (64, 8, 1, 3), (128, 7, 1, 3), (256, 8, 1, 3), (64, 16, 2, 3), (256, 14, 2, 3),
    (64, 8, 1, 1), (256, 14, 1, 1), (64, 16, 2, 1), (128, 14, 2, 1), (1152, 7, 1, 1)])
def test_the_tensorized_conv_matches_numpy_on_an_amx_host(channels, height, stride, kernel):
    if not request_amx_tile_data():
        pytest.skip("this host's OS does not enable AMX int8 or the kernel grants no tile data: "
                    "AMX code cannot run here")
    context, spaces = design_spaces(conv_module(channels, height, stride=stride, kernel=kernel),
                                    AMX)
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (1, channels // 64, height, height, 64), dtype=np.uint8)
    weight = rng.integers(-128, 128, (channels // 16, channels // 64, kernel, kernel, 16, 16, 4),
                          dtype=np.int8)
    assert any(amx_tensorizes(sch) for sch in spaces)
    assert_every_design_matches_numpy(context, spaces, data, weight, stride, kernel)


@pytest.mark.parametrize("channels,out_channels,height,stride,banded_copy,chunk", [
    (64, 64, 8, 1, True, None), (128, 256, 16, 1, True, None), (64, 64, 9, 1, True, None),
    (64, 128, 16, 2, True, None), (256, 64, 28, 1, True, None),
    (256, 256, 14, 1, False, None), (256, 512, 14, 2, False, None), (1152, 64, 7, 1, False, 2)])
def test_the_repacked_1x1_conv_matches_numpy_on_an_amx_host(channels, out_channels, height, stride,
                                                            banded_copy, chunk):
    """A 1x1 conv of 16-channel input blocks, copied into 64-channel blocks inside the kernel:
    band by band where the rows go in parallel (a height of 9: bands of one row; stride 2: the
    band's rows at stride 2), whole and first where the channel pairs do (the last three)."""
    mod = conv_module(channels, height, ic_block=16, stride=stride, kernel=1,
                      out_channels=out_channels)
    sch = tir.Schedule(mod)
    shape = amx_conv_shape(sch, sch.get_block("conv2d_NCHWc_int8"))
    assert shape.repacked and banded(shape) == banded_copy and reduction_chunk(shape) == chunk
    context, spaces = design_spaces(mod, AMX)
    marks = [amx_tensorizes(sch) for sch in spaces]
    strided = "s2" if stride == 2 else ""
    amx = [i for i, mark in enumerate(marks) if mark]  # a strided conv gets the others' designs too
    assert len(amx) == (1 if chunk is None else 2) and (len(marks) == len(amx)) == (stride == 1)
    blocks = {channels // 64} | ({chunk} if chunk else set())
    assert {re.fullmatch(rf"quantfuse_amx_conv1x1{strided}b16_m\d_r\d+_k(\d+)z?", marks[i][0])
            .group(1) for i in amx} == {str(k) for k in blocks}, marks
    sch = spaces[amx[0]].copy()
    for postproc in context.space_generator.postprocs:
        assert postproc.apply(sch), str(postproc)
    text = sch.mod["main"].script()
    assert "data_global" in text  # the copy into 64-channel blocks, inside the conv's kernel
    # banded: the copy in the conv's parallel loop; else first, in a parallel loop of its own
    copying = [part for part in text.split("T.parallel(") if "T.block(\"data_global\")" in part]
    assert len(copying) == 1 and ("conv2d_NCHWc_int8_o" in copying[0]) == banded_copy
    replayed = tir.Schedule(mod)  # a tuning record of it replays, as the database loads it
    tir.schedule.Trace.apply_json_to_schedule(sch.trace.as_json(), replayed)
    assert tvm.ir.structural_equal(replayed.mod, sch.mod)
    if not request_amx_tile_data():
        pytest.skip("this host's OS does not enable AMX int8 or the kernel grants no tile data: "
                    "AMX code cannot run here")
    rng = np.random.default_rng(2)
    data = rng.integers(0, 256, (1, channels // 16, height, height, 16), dtype=np.uint8)
    weight = rng.integers(-128, 128, (out_channels // 16, channels // 16, 1, 1, 4, 16, 4),
                          dtype=np.int8)
    assert_every_design_matches_numpy(context, spaces, data, weight, stride, 1)


def test_the_repacked_intrinsic_reads_four_16_channel_weight_blocks_as_one_tile():
    assert register_intrinsic_by_name("quantfuse_amx_conv1x1b16_m2_r14_k4")
    assert register_intrinsic_by_name("quantfuse_amx_conv1x1s2b16_m1_r7_k2")
    assert not register_intrinsic_by_name("quantfuse_amx_conv3x3b16_m2_r14_k4")  # 1x1 only
    assert not register_intrinsic_by_name("quantfuse_amx_conv1x1b32_m2_r14_k4")
    intrin = tir.TensorIntrin.get("quantfuse_amx_conv1x1b16_m2_r14_k4")
    weights = [buffer for buffer in intrin.desc.buffer_map.values() if buffer.dtype == "int8"]
    assert [int(d) for d in weights[0].shape] == [2, 16, 1, 1, 4, 16, 4]
    # per 64 channels: 2 data tiles and 2 weight tiles, the weights' 16 rows 64 bytes apart
    # across four 16-channel blocks; 4 accumulator tiles loaded once
    text = intrin.impl.script()
    assert text.count("tileloadd64") == 4 + 2 + 2


@pytest.mark.parametrize("channels,out_channels,height,stride,kernel", [
    (4, 64, 39, 2, 7), (4, 32, 16, 2, 3), (16, 32, 14, 1, 3), (8, 32, 9, 1, 5)])
def test_the_stems_folded_taps_match_numpy_on_an_amx_host(channels, out_channels, height, stride,
                                                          kernel):
    context, spaces = design_spaces(conv_module(channels, height, ic_block=channels,
                                                 stride=stride, kernel=kernel,
                                                 out_channels=out_channels), AMX)
    folded = f"{kernel}x{kernel}{'s2' if stride == 2 else ''}c{channels}_"
    assert any(folded in intrinsic for sch in spaces for intrinsic in amx_tensorizes(sch))
    if not request_amx_tile_data():
        pytest.skip("this host's OS does not enable AMX int8 or the kernel grants no tile data: "
                    "AMX code cannot run here")
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, (1, 1, height, height, channels), dtype=np.uint8)
    weight = rng.integers(-128, 128, (out_channels // 16, 1, kernel, kernel, channels // 4, 16, 4),
                          dtype=np.int8)
    assert_every_design_matches_numpy(context, spaces, data, weight, stride, kernel)


def relay_conv(in_channels, out_channels, kernel=3, stride=1, padding=None):
    data = relay.var("data", shape=(1, in_channels, 14, 14), dtype="uint8")
    weight = relay.var("weight", shape=(out_channels, in_channels, kernel, kernel), dtype="int8")
    padding = kernel // 2 if padding is None else padding
    conv = relay.nn.conv2d(data, weight, strides=(stride, stride), padding=(padding,) * 2,
                           channels=out_channels, kernel_size=(kernel, kernel), out_dtype="int32")
    return tvm.IRModule.from_expr(relay.Function([data, weight], conv))


def conv_layouts(mod, target):
    amx_layout.install()
    with tvm.target.Target(target), tvm.transform.PassContext(opt_level=3):
        mod = relay.transform.InferType()(mod)
        mod = relay.transform.AlterOpLayout()(mod)
    found = []
    relay.analysis.post_order_visit(mod["main"], lambda node: found.append(
        (str(node.attrs.data_layout), str(node.attrs.kernel_layout)))
        if isinstance(node, relay.Call) and getattr(node.op, "name", "") ==
        "nn.contrib_conv2d_NCHWc" else None)
    return found


def test_relay_gives_an_amx_target_64_channel_blocks_where_the_rule_can_take_the_conv():
    assert conv_layouts(relay_conv(64, 64), AMX) == [("NCHW64c", "OIHW16i16o4i")]
    assert conv_layouts(relay_conv(64, 64), VNNI) == [("NCHW16c", "OIHW4i16o4i")]
    assert conv_layouts(relay_conv(64, 64, stride=2), AMX) == [("NCHW64c", "OIHW16i16o4i")]
    # every 1x1 conv reads 16-channel blocks (repacked inside its kernel), whether its rows go
    # in parallel (the input outweighs the weights) or its channel pairs do (512 outputs)
    for out_channels, stride, padding in ((64, 1, 0), (64, 2, 0), (512, 1, 0), (224, 1, 1)):
        assert conv_layouts(relay_conv(64, out_channels, kernel=1, stride=stride,
                                       padding=padding), AMX) == [("NCHW16c", "OIHW4i16o4i")]
    assert conv_layouts(relay_conv(128, 64, kernel=1), AMX) == [("NCHW16c", "OIHW4i16o4i")]
    assert conv_layouts(relay_conv(64, 64, kernel=5), AMX) == [("NCHW16c", "OIHW4i16o4i")]
    assert conv_layouts(relay_conv(48, 64), AMX)[0][0] != "NCHW64c"


def test_topis_amx_dense_is_not_chosen_for_an_amx_target():
    import importlib

    amx_layout.install()
    dense = importlib.import_module("tvm.topi.x86.dense")
    with tvm.target.Target(AMX):
        assert not dense.target_has_features("amx-int8")
        assert dense.target_has_features(["avx512bw", "avx512f"])


@pytest.mark.parametrize("row_block, rows, blocks, stride, kernel, zeroed", [
    (2, 14, 1, 1, 3, False), (1, 7, 4, 2, 3, False), (2, 14, 4, 1, 1, False),
    (1, 7, 2, 2, 1, False), (2, 14, 1, 1, 3, True), (1, 7, 2, 2, 1, True)])
def test_the_intrinsic_keeps_its_accumulators_in_tiles_and_loads_its_configuration(
        row_block, rows, blocks, stride, kernel, zeroed):
    """Checked on the TIR, so on any host: per block 2 * MH accumulators loaded (zeroed: set to
    zero in the tiles) and stored outside the reduction loop, inside it MH data and 2 weight tile
    loads and 2 * MH tdpbusd; the configuration holds R-row accumulator and data tiles and 16-row
    weight tiles."""
    from meta_rules.cpu.amx_intrinsics import AMXConvShape, intrinsic_implementation
    from meta_rules.cpu.amx_tiles import config_words, tile_config

    shape = AMXConvShape(2, blocks, row_block * 2, rows, rows, row_block, stride, kernel,
                         zeroed=zeroed)
    script = intrinsic_implementation(shape).script()
    accumulators = 2 * row_block
    assert script.count("llvm.x86.tdpbusd") == accumulators
    assert script.count("llvm.x86.tilestored64") == accumulators
    assert script.count("llvm.x86.tilezero") == (accumulators if zeroed else 0)
    assert script.count("llvm.x86.tileloadd64") == (0 if zeroed else accumulators) + row_block + 2
    assert script.count("llvm.x86.ldtilecfg") == script.count("llvm.x86.sttilecfg") == 1
    assert "tilerelease" not in script
    config = tile_config({0: rows, 1: rows, 2: rows, 3: rows, 4: rows, 5: rows, 6: 16, 7: 16}
                         if row_block == 2 else {0: rows, 1: rows, 4: rows, 6: 16, 7: 16})
    for word in config_words(config):
        assert f"!= {word}" in script


def test_a_block_whose_reduction_is_one_call_zeroes_its_accumulators_and_writes_no_init():
    """The one-block design starts its accumulators at zero in the tiles: its init, tensorized
    with a no-op, stores nothing to the conv's int32 buffer, which only the tiles write; the
    chunked design, whose calls add to what the chunk before stored, loads them and keeps its
    init."""
    context, spaces = design_spaces(conv_module(channels=256, height=7), AMX)
    one_block, chunked = (space.copy() for space in spaces)
    for sch in (one_block, chunked):
        for postproc in context.space_generator.postprocs:
            assert postproc.apply(sch), str(postproc)
    for sch, zeroed in ((one_block, True), (chunked, False)):
        text = tvm.lower(sch.mod).script()
        assert ("llvm.x86.tilezero" in text) == zeroed
        assert bool(re.search(r"conv2d_NCHWc_int8\w*\[[^\]]*\] = 0\b", text)) != zeroed, text
    assert register_intrinsic_by_name("quantfuse_amx_conv3x3_m1_r7_k4z")
    assert tir.TensorIntrin.get("quantfuse_amx_zero_m1_r7") is not None


def test_the_tile_configuration_bytes():
    from meta_rules.cpu.amx_tiles import config_words, tile_config

    config = tile_config({0: 14, 6: 16})
    assert config[0] == 1 and config[16] == 64 and config[48] == 14
    assert config[16 + 12] == 64 and config[48 + 6] == 16
    assert sum(config) == 1 + 64 + 14 + 64 + 16
    assert config_words(config)[0] == 1 and len(config_words(config)) == 16
    with pytest.raises(ValueError, match="rows 1-16"):
        tile_config({0: 17})
    narrow = tile_config({4: 16, 6: 7}, {4: 28})  # the stem's data tile: 7 taps x 4 channels
    assert narrow[16 + 8] == 28 and narrow[48 + 4] == 16 and narrow[16 + 12] == 64
    with pytest.raises(ValueError, match="bytes 1-64"):
        tile_config({4: 16}, {4: 65})


def test_the_stems_intrinsic_loads_one_data_tile_per_kernel_row():
    """With folded taps the reduction loop runs over the K kernel rows only, and the tiles hold
    K x 4 bytes of data per row and K rows of weights."""
    from meta_rules.cpu.amx_intrinsics import AMXConvShape, intrinsic_implementation
    from meta_rules.cpu.amx_tiles import config_words, tile_config

    shape = AMXConvShape(2, 1, 2, 16, 16, 2, stride=2, kernel=7, ic_block=4)
    assert shape.intrinsic == "quantfuse_amx_conv7x7s2c4_m2_r16_k1"
    script = intrinsic_implementation(shape).script()
    assert "T.grid(7, 1, 1)" in script
    config = tile_config({0: 16, 1: 16, 2: 16, 3: 16, 4: 16, 5: 16, 6: 7, 7: 7}, {4: 28, 5: 28})
    for word in config_words(config):
        assert f"!= {word}" in script
