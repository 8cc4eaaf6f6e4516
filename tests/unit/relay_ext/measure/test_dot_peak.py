"""relay_ext.measure.dot_peak: the VNNI peak kernel computes the sums numpy predicts with 14
independent accumulators kept in registers, its timing gives a rate, a kernel that skips its
products is caught, and a host without VNNI gets the reason instead of a number."""

import math

import pytest
import tvm
from tvm.script import tir as T

from relay_ext.latency.layer_pairing import asm_kernel_kind
from relay_ext.lowering import targets
from relay_ext.measure import dot_peak

MISSING_HERE = targets.missing_here(dot_peak.TARGET)
needs_vnni = pytest.mark.skipif(bool(MISSING_HERE),
                                reason=f"this host's OS does not enable {MISSING_HERE}"
                                       " (AVX-512 VNNI runs the peak kernel)")


def test_the_kernel_keeps_every_accumulator_in_a_register_of_its_own():
    """Built (not run: any host): one vpdpbusd chain per accumulator, none reading memory."""
    lib = tvm.build(tvm.IRModule({dot_peak.FUNCTION: dot_peak.peak_kernel(2)}),
                    target=dot_peak.TARGET)
    asm = lib.get_source("asm")
    assert asm_kernel_kind(asm) == f"VNNI x{dot_peak.CHAINS}"
    dots = [line for line in asm.splitlines() if "vpdpbusd" in line]
    assert dots and not [line for line in dots if "(" in line], dots[:3]


@needs_vnni
def test_the_peak_is_measured_on_each_thread_and_checked_against_numpy():
    one = dot_peak.measure_vnni_peak(1, steps=200_000, repeats=3)
    two = dot_peak.measure_vnni_peak(2, steps=200_000, repeats=3)
    assert one.threads == 1 and two.threads == 2 and one.chains == dot_peak.CHAINS
    # the sums were checked inside (else RuntimeError); how fast it ran is no unit test's business
    for peak in (one, two):
        assert math.isfinite(peak.macs_per_s) and peak.macs_per_s > 0, peak
    assert two.gmacs == pytest.approx(two.macs_per_s / 1e9)


@needs_vnni
def test_a_kernel_that_skips_its_products_is_caught(monkeypatch):
    @T.prim_func
    def idle(a: T.Buffer((4,), "uint8"), b: T.Buffer((64,), "int8"),
             out: T.Buffer((1, 224), "int32"), steps: T.int32):
        for lane in range(224):
            out[0, lane] = T.int32(0)

    monkeypatch.setattr(dot_peak, "peak_kernel",
                        lambda threads, chains: idle.with_attr("global_symbol", dot_peak.FUNCTION))
    with pytest.raises(RuntimeError, match="accumulators are not -24000"):
        dot_peak.measure_vnni_peak(1, steps=1000, repeats=1)


def test_a_host_without_vnni_gets_the_reason(monkeypatch):
    monkeypatch.setattr(targets, "host_cpu_flags",
                        lambda: frozenset({"avx", "avx2", "fma", "sse4_2", "avx512f"}))
    with pytest.raises(dot_peak.PeakUnavailable, match="does not enable avx512bw.*avx512vnni"):
        dot_peak.measure_vnni_peak(2)
    peak, why = dot_peak.vnni_peak_or_reason(2)
    assert peak is None and "avx512vnni" in why and "\n" not in why


def test_counts_below_one_are_refused():
    with pytest.raises(ValueError, match="must be positive"):
        dot_peak.measure_vnni_peak(0)
