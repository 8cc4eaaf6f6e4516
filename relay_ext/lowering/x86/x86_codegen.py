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
* :mod:`.int16_pair_conv` and :mod:`.seven_bit_conv` -- the exact convs it hands them to (int16
  pairs on ``vpmaddwd``; on AVX2, ``vpmaddubsw`` on the low 7 bits of 7-bit activations);
* :mod:`.dense_units_padding` -- int8 dense layers padded to a multiple of 16 output units, so
  that they get TOPI's VNNI dense (QNN's x86 legalization, around the one above).

Each of those modules only installs itself; this is the one place that installs them all.
:func:`with_llvm_options` gives a target the LLVM options its code is built with
(:func:`relay_ext.lowering.targets.normalize_target` calls it).
"""

from __future__ import annotations

from tvm.target import Target

from relay_ext.lowering.x86 import (amx_layout, blocked_layout, dense_units_padding,
                                   int16_pair_conv, saturation_free_int8, seven_bit_conv, vnni_conv_schedule,
                                   vnni_intrinsics)

# LLVM's x86 machine combiner re-associates chains of vector adds to shorten them: in the int16
# convs' register tiles (acc + m1) + m2 becomes acc + (m1 + m2), and with 8 to 12 accumulators
# those partial sums no longer fit the 16 ymm registers and spill to the stack (docs/cpu.md). The
# VNNI and AMX dot products add inside the instruction: nothing there to re-associate.
INT16_LLVM_OPTIONS = ("-x86-machine-combiner=0",)


def install() -> bool:
    """Install them all (idempotent); True when the VNNI byte-operand intrinsics are in force
    (LLVM 22 or newer, :func:`.vnni_intrinsics.install`)."""
    vnni_conv_schedule.install()  # every build that may use VNNI comes through here
    amx_layout.install()  # and every one that may use AMX: the layout it needs
    blocked_layout.install()  # and every quantized depthwise conv: the int8 convs' block
    saturation_free_int8.install()  # and every one that may multiply with vpmaddubsw
    int16_pair_conv.install()  # and the int16 convs it hands the ones that could saturate
    seven_bit_conv.install()  # after it: the uint8 convs of 7-bit activations, the others to it
    dense_units_padding.install()  # after it: it wraps the dense legalization just installed
    return vnni_intrinsics.install()


def with_llvm_options(target: Target) -> Target:
    """``target`` with :data:`INT16_LLVM_OPTIONS` in its ``-cl-opt`` where its uint8 x int8 convs
    become int16 pairs (an x86 target with AVX2 or AVX-512BW and no VNNI); any other target, or
    one whose ``-cl-opt`` already sets the option, as it is."""
    if not (saturation_free_int8.multiplies_with_pmaddubsw(target)
            and int16_pair_conv.serves(target)):
        return target

    def name(option: str) -> str:  # "-name[:type]=value"
        return option.split("=", 1)[0].split(":", 1)[0]

    given = [str(option) for option in target.attrs.get("cl-opt", [])]
    named = {name(option) for option in given}
    missing = [option for option in INT16_LLVM_OPTIONS if name(option) not in named]
    if not missing:
        return target
    config = dict(target.export())
    config["cl-opt"] = given + missing
    return Target(config, host=target.host)
