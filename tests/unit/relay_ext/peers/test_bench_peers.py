"""bench's peer rows: OpenVINO int8 on the same QDQ ONNX file as ONNX Runtime, PyTorch
Inductor int8 on a PT2E program compiled with freezing; each output checked against its own
reference; a peer that cannot run is one line saying why, and bench goes on; the summary names the
fastest peer. One bench with the peers on tiny_resnet 32x32 (one Inductor compile) serves the
tests of the rows, the JSON and report.md."""

import json
import re
import shutil
import sys

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("openvino", reason="the OpenVINO row needs openvino: pip install 'quantfuse[peers]'")
pytest.importorskip("torchao", reason="the Inductor row needs torchao: pip install 'quantfuse[pt2e]'")

from conftest import AVX2, TINY_32
import relay_ext
from relay_ext import cli
from relay_ext.latency.run import peer_timers
from relay_ext.lowering.targets import host_cpu_flags
from relay_ext.peers import inductor as pt2e_inductor
from relay_ext.peers.base import VNNI_FLAGS, PeerModel
from relay_ext.peers.inductor import INDUCTOR, InductorUnavailable
from relay_ext.peers.openvino import OPENVINO, OpenVINOPeer
from relay_ext.peers.pytorch import run_torch_module
from relay_ext.report.accuracy import step_error
from relay_ext.workdir.files import REPORT_FILE

MAX_PEER_STEPS = 3  # whole output steps from the peer's own reference
MAX_INDUCTOR_STEPS = 1  # Inductor vs the same program run eagerly: the same int8 sums, rounded
# Without VNNI, oneDNN's uint8 x int8 kernels (OpenVINO's, Inductor's) add pairs of products in
# saturating 16-bit lanes (vpmaddubsw): the outputs stray by what the saturated pairs lost, no
# rounding bound holds. This bound only catches a broken run; that the stray is the saturation is
# checked on the same network with weights quantized to 7 bits, which cannot saturate a pair.
SATURATED_MAX_STEPS = 32


def _has_vnni() -> bool:
    return bool(VNNI_FLAGS & (host_cpu_flags() or frozenset()))


def _no_vnni_known() -> bool:
    """This CPU's flags are known and show no VNNI: where bench notes the saturation."""
    flags = host_cpu_flags()
    return flags is not None and not VNNI_FLAGS & flags


class TorchvisionStyleResNet(nn.Module):
    """A torchvision BasicBlock (conv-bn-relu, conv-bn, in-place add, shared ReLU) between a stem and
    a linear: torchao 0.18's X86InductorQuantizer raises "Input partition has more than one
    output node" on it under torch 2.13, as on torchvision's ResNets."""

    def __init__(self, channels: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = self.relu(self.stem(x))
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(identity)))))
        out += identity
        out = self.relu(out)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(out, 1), 1))


def _bench(work_dir, *extra):
    # --keep-slower-records: the never-slower rule's builds are tested in test_cli_bench.py
    return cli.main(["bench", *TINY_32, "--target", AVX2, "--work-dir", str(work_dir),
                     "--repeats", "2", "--number", "2", "--threads", "1",
                     "--keep-slower-records", *extra])


@pytest.fixture(scope="module")
def peers_bench(tiny_tuned_once, tmp_path_factory):
    """bench --json with the peers on a copy of the shared tuned tiny_resnet: (JSON, report.md)."""
    work_dir = tmp_path_factory.mktemp("peers") / "work"
    shutil.copytree(tiny_tuned_once[0], work_dir)
    with pytest.MonkeyPatch.context() as patch:
        out = []
        patch.setattr(sys, "stdout", _Collect(out))
        assert _bench(work_dir, "--json") == 0
    return json.loads("".join(out)), (work_dir / REPORT_FILE).read_text()


class _Collect:
    def __init__(self, parts):
        self.parts = parts

    def write(self, text):
        self.parts.append(text)

    def flush(self):
        pass


def test_json_has_both_peer_rows_with_versions_and_checks(peers_bench):
    result, _ = peers_bench
    rows = {row["configuration"]: row for row in result["rows"]}
    for label in (OPENVINO, INDUCTOR):
        assert label in rows, list(rows)
        assert 0 < rows[label]["min_ms"] <= rows[label]["median_ms"] <= rows[label]["max_ms"]
    assert re.fullmatch(r"\d{4}\.\d+\.\d+", rows[OPENVINO]["version"]), rows[OPENVINO]
    assert rows[INDUCTOR]["version"].startswith(f"torch {torch.__version__}, torchao ")
    checked = {row["label"]: row for row in result["peers"]}
    assert set(checked) == {OPENVINO, INDUCTOR}
    assert checked[OPENVINO]["reference"] == "ONNX Runtime (QDQ as written)"
    assert checked[INDUCTOR]["reference"] == "the same PT2E program run eagerly"
    bound = MAX_PEER_STEPS if _has_vnni() else SATURATED_MAX_STEPS
    for row in checked.values():
        assert row["reason"] is None and 0 <= row["max_steps"] <= bound, row


def test_fastest_peer_is_the_fastest_row_and_its_ratio_tvm_tuned_over_it(peers_bench):
    result, _ = peers_bench
    medians = {row["configuration"]: row["median_ms"] for row in result["rows"]
               if not row["configuration"].startswith("TVM")}
    assert {"PyTorch int8", "ONNX Runtime int8", OPENVINO, INDUCTOR} <= set(medians)
    best = result["fastest_peer"]
    assert best["median_ms"] == min(medians.values()) == medians[best["configuration"]]
    tuned = next(row["median_ms"] for row in result["rows"]
                 if row["configuration"] == "TVM tuned (ours)")
    assert best["tvm_tuned_ratio"] == pytest.approx(tuned / best["median_ms"])


def test_report_has_the_peer_rows_their_checks_and_the_summary(peers_bench):
    """Each peer's check, with the saturation note where this CPU has no VNNI and the peer is
    further from its reference than rounding."""
    result, report = peers_bench
    steps = {row["label"]: row["max_steps"] for row in result["peers"]}
    for label, peer in ((OPENVINO, OpenVINOPeer), (INDUCTOR, pt2e_inductor.InductorPeer)):
        assert f"| {label} |" in report
        line = re.search(rf"^- {label} \([^)]+\) vs .*: max [\d.]+ output quantization steps.*$",
                         report, re.M)
        assert line, report
        noted = _no_vnni_known() and steps[label] > peer.saturation.rounding_steps
        assert ("this CPU has no VNNI" in line.group(0)) == noted, line.group(0)
    assert f"Fastest peer: {result['fastest_peer']['configuration']} (" in report


def test_without_openvino_and_with_a_network_torchao_cannot_quantize_bench_says_why(
        tiny_tuned, capsys, monkeypatch):
    """The extra missing (openvino's import fails) and torchao's quantizer failing on the network:
    one line each, and the table and summary with the other runtimes."""
    monkeypatch.setitem(sys.modules, "openvino", None)
    monkeypatch.setattr(pt2e_inductor, "float_network",
                        lambda name, seed=0: TorchvisionStyleResNet().eval())
    work_dir, _ = tiny_tuned
    assert _bench(work_dir) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert (f"{OPENVINO}: not run: the OpenVINO row needs the openvino package: "
            "pip install 'quantfuse[peers]' (openvino==2026.4.1)") in lines, out
    assert any(line.startswith(f"{INDUCTOR}: not run: torchao's X86InductorQuantizer fails on "
                               "this network: Input partition has more than one output node")
               for line in lines), out
    assert not re.search(rf"^({OPENVINO}|{INDUCTOR})\s+[\d.]+", out, re.M), out  # no timed row
    assert re.search(r"^PyTorch int8\s+[\d.]+", out, re.M), out
    assert re.search(r"^fastest peer: (PyTorch int8|ONNX Runtime int8) \([\d.]+ ms\); TVM tuned is "
                     r"[\d.]+x its time", out, re.M), out


def _rows(found):
    return {row.label: row for row in found.rows}


def test_inductor_without_torchao_or_a_cpp_compiler_is_one_line(monkeypatch):
    loaded = relay_ext.load_model("mlp")
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "torchao.quantization.pt2e.quantize_pt2e", None)
        found = peer_timers(PeerModel(loaded), 2, 1)
    row = _rows(found)[INDUCTOR]
    assert INDUCTOR not in found.timers and "pip install 'quantfuse[pt2e]'" in row.reason, row
    assert list(found.timers) == ["PyTorch int8"]  # no ONNX file: neither ONNX Runtime nor OpenVINO
    from torch._inductor import cpp_builder

    # Inductor's own search, over a compiler that is not there (as on a host without g++)
    monkeypatch.setattr(cpp_builder, "get_cpp_compiler",
                        lambda: cpp_builder.cpp_compiler_search(("/nonexistent/c++",)))
    with pytest.raises(InductorUnavailable, match=r"^no C\+\+ compiler for Inductor .*install g\+\+"):
        pt2e_inductor.compile_inductor(nn.Linear(4, 2).eval(), np.zeros((1, 4), np.float32))
    ok, reason = pt2e_inductor.InductorPeer().available()
    assert not ok and reason.startswith("no C++ compiler for Inductor"), reason


def _seven_bit_weights(module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``module`` (a PT2E program's module) with its int8 weights halved (``w >> 1``, in [-64, 63])
    and their scales doubled, in place: the same network quantized to 7-bit weights."""
    dequantize = torch.ops.quantized_decomposed.dequantize_per_channel.default
    halved = 0
    for node in module.graph.nodes:
        if node.target is dequantize and all(arg.op == "get_attr" for arg in node.args[:2]):
            weights, scales = (getattr(module, arg.target) for arg in node.args[:2])
            if weights.dtype == torch.int8:
                weights.copy_(torch.div(weights, 2, rounding_mode="floor"))
                scales.mul_(2)
                halved += 1
    assert halved, "no int8 weights found in the program"
    return module


def test_a_pt2e_model_runs_eager_and_its_program_compiled(tmp_path):
    """A .pt2 model: its eager row is labelled eager, Inductor compiles the program itself and
    agrees with it to a step where the CPU has VNNI; without VNNI oneDNN's kernels saturate
    16-bit pair sums, and the check's line says so. With 7-bit weights, which cannot saturate,
    Inductor agrees to a step on every CPU. OpenVINO has no ONNX file to read and says so."""
    from quantized_test_nets import MobileNetV2Style, pt2e_program
    from relay_ext.frontend.pt2e_import import from_exported_program

    program = pt2e_program(MobileNetV2Style, (1, 3, 16, 16))
    loaded = from_exported_program(program)
    found = peer_timers(PeerModel(loaded), 2, 1)
    assert list(found.timers) == ["PyTorch PT2E int8, eager", INDUCTOR]
    rows = _rows(found)
    row = rows[INDUCTOR]
    assert row.ran and found.timers[INDUCTOR]() > 0
    assert row.max_steps <= (MAX_INDUCTOR_STEPS if _has_vnni() else SATURATED_MAX_STEPS), row
    noted = _no_vnni_known() and row.max_steps > MAX_INDUCTOR_STEPS
    assert ("this CPU has no VNNI" in row.line()) == noted, row.line()
    assert rows[OPENVINO].reason.startswith("no ONNX file to read"), rows[OPENVINO]
    assert found.runtime_steps == {}  # PyTorch running the program is the reference itself

    seven_bit = _seven_bit_weights(program.module())
    compiled = pt2e_inductor.compile_inductor(seven_bit, loaded.example_input)
    steps = step_error(run_torch_module(compiled, loaded.example_input),
                       run_torch_module(seven_bit, loaded.example_input), loaded.output_scale)
    assert steps.max_steps <= MAX_INDUCTOR_STEPS, steps


def _reduce_range_export(name: str, path, image_size: int = 224):
    """The built-in model ``name`` quantized as export_quantized does, but with 7-bit weights
    (ONNX Runtime's ``reduce_range=True``), which cannot saturate a uint8 x int8 pair sum."""
    from onnxruntime import quantization

    from relay_ext.frontend import models
    from relay_ext.frontend.eager_quantization import random_batches, seeded_float_model
    from relay_ext.frontend.onnx_export import export_float_onnx

    spec = models._model_spec(name)  # pylint: disable=protected-access
    shape = spec.input_shape(1, image_size)
    samples = torch.cat(random_batches(shape, models.CALIBRATION_BATCHES, models.DEFAULT_SEED + 1))
    batches = [batch.numpy() for batch in samples.split(1)]
    float_path = export_float_onnx(seeded_float_model(spec.build, models.DEFAULT_SEED), batches[0],
                                   path.with_suffix(".float.onnx"))

    class Batches(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter({models.DEFAULT_INPUT_NAME: batch} for batch in batches)

        def get_next(self):
            return next(self.batches, None)

    quantization.quantize_static(str(float_path), str(path), Batches(),
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=True,
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8, reduce_range=True)
    return path


def test_openvino_on_a_users_onnx_model_is_checked_against_the_model(tmp_path):
    """Within rounding of the file as written where the CPU has VNNI. Without VNNI OpenVINO's
    uint8 x int8 kernels saturate 16-bit pair sums as ONNX Runtime's do, and the MLP's 8-bit
    weights take its outputs further; with 7-bit weights (reduce_range) it agrees on every CPU."""
    from relay_ext.frontend.onnx_export import export_quantized

    path = export_quantized("mlp", tmp_path / "mlp.onnx")
    loaded = relay_ext.load_model(path)
    prepared = OpenVINOPeer().prepare(PeerModel(loaded), 2, 1)
    assert prepared.timer() > 0 and prepared.reference == loaded.reference_name
    assert prepared.max_steps <= (MAX_PEER_STEPS if _has_vnni() else SATURATED_MAX_STEPS), prepared
    noted = OpenVINOPeer.saturation.note(prepared.max_steps, host_cpu_flags())
    assert (noted is not None) == (_no_vnni_known() and prepared.max_steps > MAX_PEER_STEPS)

    seven_bit = relay_ext.load_model(_reduce_range_export("mlp", tmp_path / "mlp_7bit.onnx"))
    assert OpenVINOPeer().prepare(PeerModel(seven_bit), 2, 1).max_steps <= MAX_PEER_STEPS
