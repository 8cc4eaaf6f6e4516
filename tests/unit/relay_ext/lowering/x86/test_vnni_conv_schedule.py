"""TVM's default int8 conv2d schedule on AVX-512 VNNI targets (relay_ext.lowering.x86.vnni_conv_schedule).

TOPI's own schedule leaves one accumulator per k x k conv output vector; ours blocks output columns
into independent accumulators, only where the target has VNNI. Building VNNI code runs in a child
process (as in test_vnni_intrinsics.py); running it needs a host whose OS enables AVX-512 VNNI.
"""


import pytest
import tvm
from tvm import te, topi
from tvm.topi.x86 import conv2d_avx_common

from relay_ext.lowering.x86 import vnni_conv_schedule
from helpers import VNNI, host_has_vnni, run_child

HOST_HAS_VNNI = host_has_vnni()


def _lowered_conv(target: str, fused: bool = True) -> str:
    """The lowered TIR of TOPI's NCHWc int8 conv (3x3, 28x28 output, 32 -> 32 channels, fallback
    configuration) with a fused ReLU (or alone), as TOPI's schedule_conv2d_NCHWc_int8 schedules
    it now."""
    with tvm.target.Target(target):
        data = te.placeholder((1, 2, 30, 30, 16), "uint8", name="data")
        kernel = te.placeholder((2, 2, 3, 3, 4, 16, 4), "int8", name="kernel")
        conv = topi.x86.conv2d_NCHWc_int8(data, kernel, (1, 1), (0, 0), (1, 1), "NCHW16c",
                                          "NCHW16c", "int32")
        out = topi.nn.relu(conv) if fused else conv
        sch = topi.x86.schedule_conv2d_NCHWc_int8([out])
        return str(tvm.lower(sch, [data, kernel, out], simple_mode=True))


def _lowered_with(monkeypatch, target: str, schedule) -> str:
    """:func:`_lowered_conv` with ``schedule`` in the place of TOPI's k x k conv schedule."""
    with monkeypatch.context() as patch:
        patch.setattr(conv2d_avx_common, "_schedule_conv_NCHWc_int8", schedule)
        return _lowered_conv(target)


@pytest.mark.parametrize("target", ["llvm -mcpu=skylake-avx512", "llvm -mcpu=core-avx2",
                                    "llvm -mcpu=znver3"])
def test_targets_without_vnni_keep_topis_schedule(monkeypatch, target):
    vnni_conv_schedule.install()
    assert not vnni_conv_schedule.target_uses_vnni(tvm.target.Target(target))
    assert _lowered_conv(target) == _lowered_with(monkeypatch, target,
                                                  vnni_conv_schedule.topi_schedule())


def test_vnni_targets_get_the_blocked_schedule(monkeypatch):
    vnni_conv_schedule.install()
    assert vnni_conv_schedule.install()  # idempotent: TOPI's function is kept once
    assert vnni_conv_schedule.target_uses_vnni(tvm.target.Target(VNNI))
    ours = _lowered_conv(VNNI)
    assert ours == _lowered_with(monkeypatch, VNNI,
                                 vnni_conv_schedule.schedule_conv_NCHWc_int8_vnni)
    topis = _lowered_with(monkeypatch, VNNI, vnni_conv_schedule.topi_schedule())
    # one dot product per accumulator in the unrolled block: 14 columns (of 28), against TOPI's 1
    call = "llvm.x86.avx512.vpdpbusd.512"
    assert (topis.count(call), ours.count(call)) == (1, 14)
    # the conv as the output (nothing fused after it): blocked the same way, rows in parallel
    alone = _lowered_conv(VNNI, fused=False)
    assert alone.count(call) == 14 and "T.parallel" in alone


@pytest.mark.parametrize("width, oc_bn, expected", [(56, 16, 14), (28, 16, 14), (14, 16, 14),
                                                    (7, 16, 7), (112, 16, 14), (17, 16, 1),
                                                    (28, 32, 7), (56, 64, 2)])
def test_block_width_divides_the_row_within_the_register_budget(width, oc_bn, expected):
    columns = vnni_conv_schedule.block_width(width, oc_bn)
    assert columns == expected
    assert width % columns == 0
    assert columns * oc_bn // 16 <= vnni_conv_schedule.MAX_ACCUMULATORS


def test_vnni_conv_has_independent_accumulators_and_exact_outputs():
    """The conv's hot loop: how many registers vpdpbusd accumulates into, TOPI's schedule against
    ours; on a VNNI host, both builds run on the same random inputs and must agree exactly."""
    out = run_child(f"""
        import numpy as np, tvm
        from tvm import relay
        from tvm.topi.x86 import conv2d_avx_common
        from relay_ext.lowering.x86 import vnni_conv_schedule
        from relay_ext.lowering.config import BUILD_OPTIONS
        from relay_ext.lowering import relay_build  # installs the VNNI intrinsics and our schedule
        from relay_ext.measure.run import run_module
        rng = np.random.default_rng(0)

        def qconv(stride):  # uint8 NCHW 3x3 conv -> requantize -> uint8, full-range int8 weights
            data = relay.var("data", shape=(1, 64, 28, 28), dtype="uint8")
            weight = rng.integers(-128, 128, (64, 64, 3, 3)).astype("int8")
            conv = relay.qnn.op.conv2d(data, relay.const(weight), relay.const(7), relay.const(0),
                                       relay.const(0.05), relay.const(0.02), kernel_size=(3, 3),
                                       channels=64, padding=(1, 1), strides=(stride, stride),
                                       out_dtype="int32")
            out = relay.qnn.op.requantize(conv, relay.const(0.0004), relay.const(0),
                                          relay.const(2.0), relay.const(128), out_dtype="uint8")
            return tvm.IRModule.from_expr(relay.Function([data], out))

        def build(mod):
            with tvm.transform.PassContext(opt_level=3, config=BUILD_OPTIONS):
                return relay.build(mod, target="{VNNI}")

        installed = conv2d_avx_common._schedule_conv_NCHWc_int8
        for stride in (1, 2):
            mod = qconv(stride)
            conv2d_avx_common._schedule_conv_NCHWc_int8 = installed
            ours = build(mod)
            conv2d_avx_common._schedule_conv_NCHWc_int8 = vnni_conv_schedule.topi_schedule()
            topi = build(mod)
            equal = "skipped"
            if {HOST_HAS_VNNI}:
                x = {{"data": rng.integers(0, 256, (1, 64, 28, 28)).astype("uint8")}}
                a, b = (run_module(lib, x)[0] for lib in (topi, ours))
                equal = bool(np.array_equal(a, b)) and len(np.unique(a)) > 16
            print(stride, vnni_conv_schedule.vpdpbusd_accumulators(topi),
                  vnni_conv_schedule.vpdpbusd_accumulators(ours), equal)
    """)
    for line in out.strip().splitlines():
        stride, topi_count, our_count, equal = line.split()
        assert int(topi_count) == 1, f"stride {stride}: TOPI's schedule accumulated in {topi_count}"
        # 28 output columns (14 with stride 2): blocks of 14, one accumulator per column
        assert int(our_count) == 14, line
        assert equal in (("True",) if HOST_HAS_VNNI else ("skipped",)), line
    if not HOST_HAS_VNNI:
        pytest.skip("built and checked the assembly only: this CPU has no AVX-512 VNNI to run it")
