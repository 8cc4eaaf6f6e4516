"""bench says why a peer's int8 output strays beyond rounding on a CPU without VNNI (its uint8 x
int8 kernels saturate 16-bit pair sums, relay_ext.peers.base.Saturation): on ONNX Runtime's,
OpenVINO's and PyTorch Inductor's lines, printed and in report.md, from the host's flags (faked
here); never with VNNI, never within rounding, and --json keeps its keys."""

import pytest
from host_flags import AMD_AVX2_VM, SKYLAKE_SERVER, VNNI_SERVER

from relay_ext.latency import result as bench_result
from relay_ext.latency.report import report_markdown, text_report
from relay_ext.latency.result import BenchResult, PeerRow
from relay_ext.measure.timing import Timing
from relay_ext.peers.inductor import INDUCTOR
from relay_ext.peers.onnx_runtime import ONNX_RUNTIME
from relay_ext.peers.openvino import OPENVINO
from relay_ext.peers.registry import saturation_note

NO_VNNI = "this CPU has no VNNI"


def _result(ort_steps: float, openvino_steps: float, inductor_steps: float) -> BenchResult:
    def timing(ms):
        return Timing([ms / 1e3, 1.1 * ms / 1e3, 0.9 * ms / 1e3])

    return BenchResult(
        model="mlp", input_shape=(1, 256), target="llvm", variant="ours", threads=1, repeats=3,
        number=1, timings={"TVM no-search": timing(1.0), "TVM untuned": timing(2.0),
                           ONNX_RUNTIME: timing(1.5), OPENVINO: timing(1.2), INDUCTOR: timing(1.3)},
        reference="ONNX Runtime (QDQ as written)", max_steps=0.0, mean_steps=0.0,
        fraction_equal=1.0, untuned_max_steps=0.0, machine="test", date="today",
        runtime_steps={ONNX_RUNTIME: ort_steps},
        peers=[PeerRow(OPENVINO, "2026.4.1", reference="ONNX Runtime (QDQ as written)",
                       max_steps=openvino_steps),
               PeerRow(INDUCTOR, "torch 2.13.0", reference="the same PT2E program run eagerly",
                       max_steps=inductor_steps)])


def _lines(text: str) -> dict:
    """The output-check line of each runtime in bench's text."""
    return {label: next(line for line in text.splitlines() if line.lstrip("- ").startswith(label))
            for label in (ONNX_RUNTIME, OPENVINO, INDUCTOR)}


@pytest.mark.parametrize("flags", [AMD_AVX2_VM, SKYLAKE_SERVER], ids=["avx2", "avx512-no-vnni"])
def test_without_vnni_each_peer_beyond_rounding_says_its_kernels_saturate(monkeypatch, flags):
    monkeypatch.setattr(bench_result, "host_cpu_flags", lambda: flags)
    result = _result(ort_steps=31, openvino_steps=10, inductor_steps=2.34)
    for text in (text_report(result), report_markdown(result)):
        lines = _lines(text)
        assert "ONNX Runtime's uint8 x int8 kernels then saturate" in lines[ONNX_RUNTIME]
        assert "reduce_range=True" in lines[ONNX_RUNTIME]
        assert "max 10.00 output quantization steps (this CPU has no VNNI, and OpenVINO's" \
            in lines[OPENVINO], lines[OPENVINO]
        assert "max 2.34 output quantization steps (this CPU has no VNNI, and the compiled " \
            "program's oneDNN uint8 x int8 kernels then saturate 16-bit sums" in lines[INDUCTOR]
    # the note is for people: --json keeps the peers' keys
    assert set(result.to_dict()["peers"][0]) == {"label", "version", "reason", "reference",
                                                 "max_steps"}


@pytest.mark.parametrize("flags, steps", [
    (VNNI_SERVER, (31, 10, 2.34)),                   # AVX-512 VNNI: 32-bit sums, no saturation
    (AMD_AVX2_VM | {"avx_vnni"}, (31, 10, 2.34)),    # AVX-VNNI
    (AMD_AVX2_VM, (3, 3, 1)),                        # no VNNI, but within rounding
    (None, (31, 10, 2.34)),                          # flags unknown: say nothing
], ids=["avx512-vnni", "avx-vnni", "rounding", "unknown"])
def test_with_vnni_or_within_rounding_or_flags_unknown_no_note(monkeypatch, flags, steps):
    monkeypatch.setattr(bench_result, "host_cpu_flags", lambda: flags)
    text = text_report(_result(*steps))
    assert NO_VNNI not in text, text


def test_only_the_peers_with_int8_kernels_have_a_note():
    assert saturation_note(INDUCTOR, 1.5, AMD_AVX2_VM)  # Inductor's rounding: 1 step
    assert saturation_note(OPENVINO, 1.5, AMD_AVX2_VM) is None  # OpenVINO's: 3
    assert saturation_note("PyTorch int8", 50, AMD_AVX2_VM) is None  # the model's reference
    assert saturation_note("TVM tuned", 50, AMD_AVX2_VM) is None
