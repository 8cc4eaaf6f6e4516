"""relay_ext.peers.openvino on a QOperator ONNX file OpenVINO cannot read: its row runs the file's
QDQ equivalent, says so in its label, and is checked against the model's reference."""

from __future__ import annotations

import pytest

from quantized_test_nets import ResidualConvNet, _calibration
import relay_ext
from relay_ext.frontend import eager_quantization, onnx_export, optional_deps
from relay_ext.peers import openvino
from relay_ext.peers.base import PeerModel
from relay_ext.peers.registry import saturation_note

pytest.importorskip("openvino")


@pytest.fixture(scope="module")
def qoperator_model(tmp_path_factory):
    """ResidualConvNet quantized by ONNX Runtime in QOperator format, 7-bit weights."""
    root = tmp_path_factory.mktemp("openvino")
    model = eager_quantization.seeded_float_model(ResidualConvNet, 0)
    calibration = _calibration((1, 3, 16, 16), 1)
    float_path = onnx_export.export_float_onnx(model, calibration[0], root / "residual.float.onnx")
    path = onnx_export.quantize_qdq(float_path, root / "residual_qop.onnx", calibration,
                                    quant_format=onnx_export.QOPERATOR, reduce_range=True)
    return relay_ext.load_model(path)


def test_unreadable_qoperator_file_runs_as_its_qdq_equivalent(qoperator_model):
    optional_deps.require_openvino()
    peer = openvino.OpenVINOPeer()
    model = PeerModel(qoperator_model)
    with pytest.raises(Exception) as raised:
        openvino.read_openvino_model(qoperator_model.reference.path)
    reason = openvino.read_failure(raised.value)
    assert "QGemm" in reason and "\n" not in reason
    assert peer.label(model) == openvino.QDQ_REWRITE
    prepared = peer.prepare(model, number=1, threads=1)
    assert prepared.reference == qoperator_model.reference_name
    assert prepared.max_steps is not None and prepared.max_steps <= 1 + 1e-3  # 7-bit weights: no saturation
    assert prepared.timer() > 0
    # the saturation note still finds the peer under its longer label
    assert saturation_note(openvino.QDQ_REWRITE, 30, frozenset({"avx2"})) is not None
