"""relay_ext.frontend.qnn_passes: FakeQuantizationToInteger's constants folded with numpy make the
same module as TVM's own folding, and the handlers' TVM functions are restored afterwards."""

import contextlib

import pytest
import tvm

pytest.importorskip("torchao", reason="the PT2E program of this test needs torchao")

from quantized_test_nets import MobileNetV2Style, pt2e_program
from relay_ext.frontend import pt2e_import, qnn_passes


def test_numpy_constant_folding_makes_the_module_tvm_folding_makes(monkeypatch):
    from tvm.relay.transform import fake_quantization_to_integer as fq2i

    mod, *_ = pt2e_import.to_relay(pt2e_program(MobileNetV2Style, (1, 3, 8, 8)), "mobilenet_v2_style")
    folded_by_tvm = fq2i.fold_constant
    fast = qnn_passes.integer_ops(mod, use_qat=True)
    assert fq2i.fold_constant is folded_by_tvm  # restored
    calls = []
    monkeypatch.setattr(qnn_passes, "numpy_constant_folding", contextlib.nullcontext)
    monkeypatch.setattr(fq2i, "fold_constant", lambda expr: calls.append(expr) or folded_by_tvm(expr))
    slow = qnn_passes.integer_ops(mod, use_qat=True)
    assert calls  # TVM's folding ran this time
    assert tvm.ir.structural_equal(fast, slow)
    counts = qnn_passes.op_counts(fast)
    assert counts.get("qnn.conv2d") == MobileNetV2Style.CONVS and counts.get("qnn.dense") == 1, counts
