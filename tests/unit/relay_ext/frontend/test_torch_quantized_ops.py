"""relay_ext.frontend.torch_quantized_ops through relay_ext.frontend.models.from_torchscript: an FX-quantized
EfficientNet-style net (unfused batch norms, functional convs, depthwise conv, hardswish,
squeeze-excitation) imports, stays int8 where PyTorch's is, agrees with PyTorch, tunes and compiles."""

from __future__ import annotations

import pytest
import tvm

from quantized_test_nets import EfficientNetStyle, conv_block_reads, fx_quantized_torchscript, worst_steps
import relay_ext
from relay_ext.frontend import models
from relay_ext.frontend import torch_quantized_ops
from relay_ext.frontend.onnx_import import op_counts
from relay_ext.tuning import extract_tasks
from conftest import AVX2  # QNN convs lower to uint8 x int8 there

LLVM = "llvm -num-cores 2"
IMAGE_SIZE = 16
MAX_STEPS = 3  # the bound; measured: at most 2 steps over 10 inputs, untuned
TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def traced():
    return fx_quantized_torchscript(IMAGE_SIZE)


@pytest.fixture(scope="module")
def loaded(traced, tmp_path_factory) -> models.LoadedModel:
    torchscript, shape = traced
    path = tmp_path_factory.mktemp("fx") / "efficientnet_style.pt"
    torchscript.save(str(path))
    return models.from_torchscript(path, {"input": shape})


def test_the_fx_net_has_the_ops_tvm_lacks(traced):
    """The test model really is what FX makes of EfficientNet-style code."""
    kinds = {node.kind() for node in traced[0].inlined_graph.nodes()}
    assert {"quantized::batch_norm2d", "quantized::batch_norm2d_relu", "quantized::hardswish",
            "quantized::mul", "aten::sigmoid", "quantized::conv2d"} <= kinds, kinds
    packed = [node for node in traced[0].graph.findAllNodes("prim::GetAttr")
              if "_packed_weight_" in node.s("name")]
    assert packed, "no functional (top-level) packed conv weights"


def test_stock_tvm_frontend_cannot_import_it(traced, loaded):
    """TVM 0.19 alone stops at the batch norm; after our import (loaded) its functions are restored."""
    torchscript, shape = traced
    with pytest.raises(NotImplementedError, match=r"quantized::batch_norm2d"):
        tvm.relay.frontend.from_pytorch(torchscript, [("input", shape)])
    assert loaded.quantized


def test_every_conv_is_qnn_and_reads_uint8(loaded):
    counts = op_counts(loaded.mod)
    assert counts.get("qnn.conv2d") == EfficientNetStyle.CONVS and not counts.get("nn.conv2d"), counts
    assert counts.get("qnn.dense") == 1 and not counts.get("nn.batch_norm"), counts
    typed = tvm.relay.transform.InferType()(loaded.mod)
    convs = []

    def visit(node):
        if isinstance(node, tvm.relay.Call) and isinstance(node.op, tvm.ir.Op) and node.op.name == "qnn.conv2d":
            convs.append(node)

    tvm.relay.analysis.post_order_visit(typed["main"].body, visit)
    # Every conv, including those after a converted batch norm, gets uint8 data as in PyTorch.
    assert [conv.args[0].checked_type.dtype for conv in convs] == ["uint8"] * EfficientNetStyle.CONVS
    assert sorted(int(conv.attrs.groups) for conv in convs) == [1] * (EfficientNetStyle.CONVS - 1) + [16]


def test_conv_tasks_compute_in_int8(loaded):
    reads = conv_block_reads(extract_tasks(loaded.mod, loaded.params, AVX2))
    assert len(reads) >= EfficientNetStyle.CONVS - 1, reads  # tasks of equal shape are shared
    for task_name, dtypes in reads:
        # int16: the int8 operands widened, as convs are on a target without VNNI (int16_pair_conv)
        assert "float32" not in dtypes and dtypes & {"uint8", "int8", "int16"}, (task_name, dtypes)


def test_untuned_tvm_matches_pytorch(loaded):
    assert loaded.reference_name == "PyTorch int8" and loaded.output_scale
    hash_before = tvm.ir.structural_hash(loaded.mod)
    lib = relay_ext.compile(loaded, target="llvm", schedule="default", opt_level=2)
    assert worst_steps(loaded, lib) <= MAX_STEPS + TOLERANCE
    assert tvm.ir.structural_hash(loaded.mod) == hash_before


def test_batch_norm_converter_needs_the_input_quantization_parameters():
    """Called without the input scale and zero point our hooks append, it says so."""
    convert = torch_quantized_ops.CUSTOM_CONVERT_MAP["quantized::batch_norm2d"]
    with pytest.raises(ValueError, match="imported through relay_ext.frontend.torch_quantized_ops.from_pytorch"):
        convert([None] * 8, [])


def test_hooks_are_removed_after_the_import():
    from tvm.relay.frontend import pytorch as torch_frontend
    from tvm.relay.frontend import qnn_torch

    before = (qnn_torch._get_quant_param_for_input, qnn_torch.add_input_quant_params_to_op_inputs,
              qnn_torch.get_weight_quant_params, torch_frontend.convert_params)
    with pytest.raises(RuntimeError, match="boom"):
        with torch_quantized_ops.quantized_op_hooks():
            assert qnn_torch.get_weight_quant_params is not before[2]
            raise RuntimeError("boom")
    after = (qnn_torch._get_quant_param_for_input, qnn_torch.add_input_quant_params_to_op_inputs,
             qnn_torch.get_weight_quant_params, torch_frontend.convert_params)
    assert after == before
