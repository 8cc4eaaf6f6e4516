"""AVX-512 VNNI int8 dot products that build with the LLVM this TVM wheel links (LLVM 22).

TVM 0.19 has two VNNI dot products, the TIR tensor intrinsic ``dot_16x4_vnni`` (MetaSchedule's
x86 "vnni" rules tensorize with it) and TOPI's ``dot_16x1x16_uint8_int8_int32_cascadelake``
(TVM's default int8 conv2d/dense schedules). Both call ``llvm.x86.avx512.vpdpbusd.512`` with
``(<16 x i32> acc, <16 x i32> a, <16 x i32> b)``. LLVM 22 declares it
``(<16 x i32> acc, <64 x i8> a, <64 x i8> b)`` (llvm-project PR #155194), so the IR fails LLVM's
verifier and the process aborts while building any int8 conv/dense for a VNNI ``-mcpu``
(cascadelake, icelake, sapphirerapids...). The computation is unchanged: 16 lanes, each the sum
over 4 byte pairs ``a[k] (u8) * b[i, k] (s8)`` added to ``acc[i]``::

    for i in range(16):            # C: int32x16
        for k in range(4):         # A: uint8x4 (broadcast to 64 bytes), B: int8 16x4 (64 bytes)
            C[i] += int32(A[k]) * int32(B[i, k])

:func:`install` registers both again with byte-vector operands (only when LLVM is 22 or newer;
older LLVMs take TVM's own). It is idempotent and installs only that;
:func:`relay_ext.lowering.x86.x86_codegen.install` installs it with quantfuse's other x86 code
generation changes (the VNNI conv schedule, the AMX layout), and :mod:`relay_ext.tuning` calls
that on import.
"""

from __future__ import annotations

import logging

import tvm
from tvm import te
from tvm.script import tir as T
from tvm.tir import TensorIntrin

logger = logging.getLogger(__name__)

VPDPBUSD = "llvm.x86.avx512.vpdpbusd.512"
# The LLVM release whose vpdpbusd takes byte vectors (llvm-project PR #155194).
FIRST_LLVM_WITH_BYTE_OPERANDS = 22

_installed = False


def llvm_takes_byte_operands() -> bool:
    """True when the LLVM that TVM links declares vpdpbusd with ``<64 x i8>`` operands."""
    return tvm.target.codegen.llvm_version_major() >= FIRST_LLVM_WITH_BYTE_OPERANDS


@T.prim_func
def dot_16x4_vnni_byte_operands(
    A: T.Buffer((4,), "uint8", offset_factor=1),
    B: T.Buffer((16, 4), "int8", offset_factor=1),
    C: T.Buffer((16,), "int32", offset_factor=1),
) -> None:
    with T.block("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        a_word = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
        C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id(VPDPBUSD),
            T.uint32(3),
            C.vload([0], dtype="int32x16"),
            T.reinterpret(T.broadcast(a_word, 16), dtype="int8x64"),
            B.vload([0, 0], dtype="int8x64"),
            dtype="int32x16",
        )


def topi_dot_16x1x16_cascadelake_byte_operands() -> te.TensorIntrin:
    """TOPI's Cascade Lake tensor intrinsic (same declaration, same reset/update protocol), with
    vpdpbusd called on byte vectors."""
    lanes, group = 16, 4
    data = te.placeholder((group,), dtype="uint8", name="data")
    kernel = te.placeholder((lanes, group), dtype="int8", name="kernel")
    k = te.reduce_axis((0, group), name="k")
    out = te.compute(
        (lanes,),
        lambda i: te.sum(data[k].astype("int32") * kernel[i, k].astype("int32"), axis=k),
        name="C")
    data_buffer = tvm.tir.decl_buffer(data.shape, dtype="uint8", name="a_buffer",
                                      offset_factor=1, strides=[1])
    kernel_buffer = tvm.tir.decl_buffer(kernel.shape, dtype="int8", name="b_buffer",
                                        offset_factor=1, strides=[te.var("ldw"), 1])

    def body(ins, outs):
        def instruction(index):  # 0: body, 1: reset, 2: update (body on a running sum)
            builder = tvm.tir.ir_builder.create()
            if index == 1:
                builder.emit(outs[0].vstore(0, tvm.tir.const(0, "int32x16")))
                return builder.get()
            a_word = tvm.tir.call_intrin("int32", "tir.reinterpret", ins[0].vload([0], "uint8x4"))
            a_bytes = tvm.tir.call_intrin("int8x64", "tir.reinterpret",
                                          a_word.astype("int32x16"))
            accumulator = (tvm.tir.const(0, "int32x16") if index == 0
                           else outs[0].vload([0], "int32x16"))
            builder.emit(outs[0].vstore(0, tvm.tir.call_llvm_pure_intrin(
                "int32x16", VPDPBUSD, tvm.tir.const(3, "uint32"),
                accumulator, a_bytes, ins[1].vload([0, 0], "int8x64"))))
            return builder.get()

        return instruction(0), instruction(1), instruction(2)

    return te.decl_tensor_intrin(out.op, body, binds={data: data_buffer, kernel: kernel_buffer},
                                 default_buffer_params={"offset_factor": 1})


def install() -> bool:
    """Register the byte-operand versions when LLVM needs them; True when they are in force."""
    global _installed  # pylint: disable=global-statement
    if _installed:
        return True
    if not llvm_takes_byte_operands():
        return False
    from meta_rules.generic.tensor_intrinsics import family_module  # pylint: disable=import-outside-toplevel

    x86 = family_module("x86")
    from tvm.topi.x86 import tensor_intrin  # pylint: disable=import-outside-toplevel

    TensorIntrin.register(x86.VNNI_DOT_16x4_INTRIN, x86.dot_product_16x4_u8i8i32_desc,
                          dot_16x4_vnni_byte_operands, override=True)
    # TOPI's dispatcher looks this name up in its module when a schedule asks for the intrinsic.
    tensor_intrin.dot_16x1x16_uint8_int8_int32_cascadelake = (
        topi_dot_16x1x16_cascadelake_byte_operands)
    _installed = True
    logger.debug("VNNI intrinsics registered with byte operands for LLVM %d",
                 tvm.target.codegen.llvm_version_major())
    return True
