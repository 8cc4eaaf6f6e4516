"""The two tensor intrinsics of :mod:`.seven_bit_conv` (AVX2: ``vpmaddubsw`` + ``vpmaddwd``).

* :func:`low_bits_intrinsic` -- 8 int32 lanes += 4 uint8 inputs at most 127 x 8 x 4 int8 weights:
  one ``vpmaddubsw`` (pairs of products in int16: no pair of 7-bit inputs can saturate), one
  ``vpmaddwd`` by 1 (the pairs summed in int32) and one ``vpaddd``; the low term's step.
* :func:`high_bit_intrinsic` -- a register tile's share of one channel block of the high term:
  nothing where the tile's flags are all 0, else the products of the inputs' high bits (bytes of 0
  or 1, on the same two instructions) added to the tile.

Both declare their compute with :func:`dot`, the body the conv's stages declare, so that TE's
tensorize matches them.
"""

from __future__ import annotations

from typing import Any

import tvm
from tvm import te

HIGH_SHIFT = 7
QUAD = 4  # uint8 x int8 products vpmaddubsw + vpmaddwd sum into one int32 lane
LANES = 8  # int32 lanes of an AVX2 vector
ONES = 0x01010101  # the high bit of each of four bytes, shifted down to bit 0


def dot(data: Any, weights: Any, flag: Any = None) -> Any:  # the stages' and intrinsics' body
    product = data.astype("int32") * weights.astype("int32")
    return product if flag is None else product * flag.astype("int32")


def _madd(four_bytes: Any, weights: Any) -> Any:
    """``vpmaddubsw`` of four uint8 (an int32, broadcast) by 8 x 4 int8, then ``vpmaddwd`` by 1:
    8 int32 sums of four products."""
    broadcast = tvm.tir.call_intrin("int8x32", "tir.reinterpret", four_bytes.astype("int32x8"))
    pairs = tvm.tir.call_llvm_pure_intrin("int16x16", "llvm.x86.avx2.pmadd.ub.sw",
                                          tvm.tir.const(2, "uint32"), broadcast, weights)
    return tvm.tir.call_llvm_pure_intrin("int32x8", "llvm.x86.avx2.pmadd.wd",
                                         tvm.tir.const(2, "uint32"), pairs,
                                         tvm.tir.const(1, "int16x16"))


def low_bits_intrinsic() -> te.TensorIntrin:
    """``out[i] += sum_k data[k] * w[i, k]`` for 8 int32 lanes and 4 uint8 inputs at most 127:
    one ``vpmaddubsw``, one ``vpmaddwd`` and one ``vpaddd`` (exact: no pair can saturate)."""
    data = te.placeholder((QUAD,), dtype="uint8", name="data")
    weights = te.placeholder((LANES, QUAD), dtype="int8", name="weights")
    k = te.reduce_axis((0, QUAD), name="k")
    out = te.compute((LANES,), lambda i: te.sum(dot(data[k], weights[i, k]), axis=k), name="out")
    data_buffer = tvm.tir.decl_buffer(data.shape, "uint8", name="data_buffer", offset_factor=1,
                                      strides=[1])
    weights_buffer = tvm.tir.decl_buffer(weights.shape, "int8", name="weights_buffer",
                                         offset_factor=1, strides=[te.var("ldw"), 1])

    def body(ins, outs):
        def emit(kind: str):
            builder = tvm.tir.ir_builder.create()
            if kind == "reset":
                builder.emit(outs[0].vstore(0, tvm.tir.const(0, "int32x8")))
                return builder.get()
            four = tvm.tir.call_intrin("int32", "tir.reinterpret", ins[0].vload([0], "uint8x4"))
            total = _madd(four, ins[1].vload([0, 0], "int8x32"))
            if kind == "update":
                total = total + outs[0].vload([0], "int32x8")
            builder.emit(outs[0].vstore(0, total))
            return builder.get()

        return emit("body"), emit("reset"), emit("update")

    return te.decl_tensor_intrin(out.op, body, binds={data: data_buffer, weights: weights_buffer},
                                 default_buffer_params={"offset_factor": 1})


def high_bit_intrinsic(columns: int, stride: int, kernel_h: int, kernel_w: int, ic_bn: int,
                       oc_bn: int) -> te.TensorIntrin:
    """One channel block's share of the high-bit term for a tile of ``columns`` output pixels x
    ``oc_bn`` channels: nothing where the tile's flags are all 0, else every product of the
    block's high bits (``vpmaddubsw`` on bytes of 0 or 1) added to the tile."""
    width = (columns - 1) * stride + kernel_w
    data = te.placeholder((kernel_h, width, ic_bn), dtype="uint8", name="data")
    weights = te.placeholder((kernel_h, kernel_w, ic_bn // QUAD, oc_bn, QUAD), dtype="int8",
                             name="weights")
    flag = te.placeholder((columns,), dtype="uint8", name="flag")
    kh = te.reduce_axis((0, kernel_h), name="kh")
    kw = te.reduce_axis((0, kernel_w), name="kw")
    icf = te.reduce_axis((0, ic_bn // QUAD), name="icf")
    ics = te.reduce_axis((0, QUAD), name="ics")
    out = te.compute((columns, oc_bn), lambda c, o: te.sum(dot(
        data[kh, c * stride + kw, icf * QUAD + ics] >> HIGH_SHIFT, weights[kh, kw, icf, o, ics],
        flag[c]), axis=[kh, kw, icf, ics]), name="out")
    binds = {
        data: tvm.tir.decl_buffer(data.shape, "uint8", name="data_buffer", offset_factor=1,
                                  strides=[te.var("dh"), te.var("dw"), 1]),
        weights: tvm.tir.decl_buffer(weights.shape, "int8", name="weights_buffer",
                                     offset_factor=1, strides=[te.var("wh"), te.var("ww"),
                                                               te.var("wf"), QUAD, 1]),
        flag: tvm.tir.decl_buffer(flag.shape, "uint8", name="flag_buffer", offset_factor=1,
                                  strides=[1]),
    }

    def reset(outs) -> tvm.tir.Stmt:
        builder = tvm.tir.ir_builder.create()
        for column in range(columns):
            for lane in range(0, oc_bn, LANES):
                builder.emit(outs[0].vstore([column, lane], tvm.tir.const(0, "int32x8")))
        return builder.get()

    def update(ins, outs) -> tvm.tir.Stmt:
        data_in, weights_in, flags = ins
        builder = tvm.tir.ir_builder.create()
        any_flag = flags.vload([0], "uint8")
        for column in range(1, columns):
            any_flag = any_flag | flags.vload([column], "uint8")
        with builder.if_scope(any_flag != tvm.tir.const(0, "uint8")):
            with builder.for_range(0, kernel_h, name="kh") as row:
                with builder.for_range(0, kernel_w, name="kw") as tap:
                    with builder.for_range(0, ic_bn // QUAD, name="icf") as quad:
                        for column in range(columns):
                            four = tvm.tir.call_intrin("int32", "tir.reinterpret", data_in.vload(
                                [row, column * stride + tap, quad * QUAD], "uint8x4"))
                            high = (four >> HIGH_SHIFT) & tvm.tir.const(ONES, "int32")
                            for lane in range(0, oc_bn, LANES):
                                total = _madd(high, weights_in.vload([row, tap, quad, lane, 0],
                                                                     "int8x32"))
                                builder.emit(outs[0].vstore([column, lane], total + outs[0].vload(
                                    [column, lane], "int32x8")))
        return builder.get()

    def body(ins, outs):
        zeroed, added = reset(outs), update(ins, outs)
        return tvm.tir.SeqStmt([zeroed, added]), zeroed, added

    return te.decl_tensor_intrin(out.op, body, binds=binds,
                                 default_buffer_params={"offset_factor": 1})
