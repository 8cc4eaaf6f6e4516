"""Everything quantfuse changes in TVM's x86 code generation, installed in one explicit call.

    from relay_ext.lowering.x86 import x86_codegen
    x86_codegen.install()   # idempotent; relay_ext.lowering.relay_build calls it on import

* :mod:`.vnni_intrinsics` -- TVM's VNNI dot products re-registered with byte operands for the
  LLVM 22 this wheel links (else any int8 build for a VNNI ``-mcpu`` aborts the process);
* :mod:`.vnni_conv_schedule` -- TOPI's default VNNI int8 conv with independent accumulators;
* :mod:`.amx_layout` -- the 64-channel conv layout the AMX rule needs, where the target has AMX
  (and TOPI's own AMX dense/batch_matmul kept out);
* :mod:`.blocked_layout` -- quantized depthwise convs in the channel block of the int8 convs
  around them (no layout copies between them);
* :mod:`.saturation_free_int8` -- uint8 x int8 convs split so that ``vpmaddubsw`` cannot saturate
  where the target has no VNNI (QNN's x86 legalization);
* :mod:`.dense_units_padding` -- int8 dense layers padded to a multiple of 16 output units, so
  that they get TOPI's VNNI dense (QNN's x86 legalization, around the one above).

Each of those modules only installs itself; this is the one place that installs them all.
"""

from __future__ import annotations

from relay_ext.lowering.x86 import (amx_layout, blocked_layout, dense_units_padding,
                                   int16_pair_conv, saturation_free_int8, vnni_conv_schedule, vnni_intrinsics)


def install() -> bool:
    """Install the six (idempotent); True when the VNNI byte-operand intrinsics are in force
    (LLVM 22 or newer, :func:`.vnni_intrinsics.install`)."""
    vnni_conv_schedule.install()  # every build that may use VNNI comes through here
    amx_layout.install()  # and every one that may use AMX: the layout it needs
    blocked_layout.install()  # and every quantized depthwise conv: the int8 convs' block
    saturation_free_int8.install()  # and every one that may multiply with vpmaddubsw
    int16_pair_conv.install()  # and the int16 convs it hands the ones that could saturate
    dense_units_padding.install()  # after it: it wraps the dense legalization just installed
    return vnni_intrinsics.install()
