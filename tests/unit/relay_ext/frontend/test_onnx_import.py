"""relay_ext.frontend.onnx_import / onnx_runtime / onnx_export: QDQ ONNX models from ONNX Runtime's
quantize_static become integer Relay modules that agree with ONNX Runtime, tune and compile."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
import tvm

from quantized_test_nets import ResidualConvNet, SmallMLP, conv_block_reads, qdq_onnx, worst_steps
import relay_ext
from relay_ext import accuracy
from relay_ext.frontend import models
from relay_ext.frontend import onnx_export, onnx_import, optional_deps
from relay_ext.frontend import onnx_reference
from relay_ext.peers import onnx_runtime
from relay_ext.tuning import extract_tasks
from conftest import AVX2

LLVM = "llvm -num-cores 2"
# An AVX2 target: QNN lowers convs to uint8 x int8 there (plain llvm upcasts them to int16).
IMAGE_SHAPE = (1, 3, 16, 16)
MLP_SHAPE = (1, 64)
MAX_STEPS = 3  # whole output steps from the reference; the untuned builds stay well below
TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx")


@pytest.fixture(scope="module")
def residual_path(onnx_dir):
    return qdq_onnx(ResidualConvNet, IMAGE_SHAPE, onnx_dir / "residual.onnx", per_channel=True)


@pytest.fixture(scope="module")
def mlp_path(onnx_dir):
    return qdq_onnx(SmallMLP, MLP_SHAPE, onnx_dir / "mlp.onnx", per_channel=False)


@pytest.fixture(scope="module")
def residual(residual_path) -> models.LoadedModel:
    return onnx_import.from_onnx(residual_path)


@pytest.fixture(scope="module")
def mlp(mlp_path) -> models.LoadedModel:
    return onnx_import.from_onnx(mlp_path)


# --- import -------------------------------------------------------------------------------------


def test_input_name_shape_and_reference_come_from_the_model(residual, mlp, residual_path):
    assert (residual.input_name, residual.input_shape, residual.name) == ("input", IMAGE_SHAPE, "residual")
    assert (mlp.input_name, mlp.input_shape) == ("input", MLP_SHAPE)
    assert residual.torchscript is None and residual.reference_name == "ONNX Runtime (QDQ as written)"
    assert residual.reference.path == str(residual_path)
    assert residual.example_input.shape == IMAGE_SHAPE and residual.example_input.dtype == np.float32
    assert residual.mod["main"].params[0].name_hint == "input"


def test_output_scale_is_the_step_of_onnxruntime_output(residual, mlp):
    """ONNX Runtime's output is (q - zero_point) * scale: whole multiples of output_scale."""
    for model in (residual, mlp):
        assert model.output_scale is not None and model.output_scale > 0
        steps = model.run_reference() / model.output_scale
        np.testing.assert_allclose(steps, np.round(steps), atol=1e-3)


def test_conv_dense_and_add_become_qnn_ops(residual, mlp):
    counts = onnx_import.op_counts(residual.mod)
    assert counts.get("qnn.conv2d") == 3 and counts.get("qnn.dense") == 1, counts
    # the residual add: an int32 sum requantized once (fq2i_prepare.single_rounding_adds), not qnn.add
    assert not counts.get("qnn.add") and counts.get("add") == 2, counts
    assert not any(counts.get(op) for op in onnx_import.FLOAT_COMPUTE_OPS), counts
    mlp_counts = onnx_import.op_counts(mlp.mod)
    assert mlp_counts.get("qnn.dense") == 3 and not mlp_counts.get("nn.dense"), mlp_counts


def test_tvm_frontend_alone_leaves_convs_float(residual_path):
    """Why integer_ops exists: TVM 0.19's ONNX frontend keeps each QDQ conv in float32."""
    mod, _ = tvm.relay.frontend.from_onnx(onnx.load(residual_path), shape={"input": IMAGE_SHAPE})
    counts = onnx_import.op_counts(mod)
    assert counts.get("nn.conv2d") == 3 and not counts.get("qnn.conv2d"), counts


def test_conv_tasks_compute_in_int8(residual, residual_path):
    reads = conv_block_reads(extract_tasks(residual.mod, residual.params, AVX2))
    assert reads, "no conv task extracted"
    for task_name, dtypes in reads:
        # int16: the int8 operands widened, as convs are on a target without VNNI (int16_pair_conv)
        assert dtypes <= {"uint8", "int8", "int16", "int32"} and dtypes & {"uint8", "int8", "int16"}, \
            (task_name, dtypes)
    # The same check fails on the frontend's own module: its conv tasks read float32.
    float_mod, float_params = tvm.relay.frontend.from_onnx(onnx.load(residual_path), shape={"input": IMAGE_SHAPE})
    float_reads = conv_block_reads(extract_tasks(float_mod, float_params, AVX2))
    assert float_reads and all("float32" in dtypes for _, dtypes in float_reads), float_reads


@pytest.mark.parametrize("name", ["residual", "mlp"])
def test_untuned_tvm_matches_onnxruntime(request, name):
    model = request.getfixturevalue(name)
    hash_before = tvm.ir.structural_hash(model.mod)
    lib = relay_ext.compile(model, target="llvm", schedule="default", opt_level=2)
    assert worst_steps(model, lib) <= MAX_STEPS + TOLERANCE
    assert tvm.ir.structural_hash(model.mod) == hash_before


def test_accuracy_compares_with_the_models_reference(mlp):
    """compare_untuned_with_reference runs ONNX Runtime for an ONNX model (it has no TorchScript)."""
    error = accuracy.compare_untuned_with_reference(mlp)
    assert error.max_steps <= MAX_STEPS + TOLERANCE


def test_nhwc_layout(residual_path, residual):
    nhwc = onnx_import.from_onnx(residual_path, layout="NHWC")
    assert {data for _, data, _ in models.conv_layouts(nhwc.mod)} == {"NHWC"}
    assert nhwc.input_shape == residual.input_shape


def _random_batches(quantization, shape, count: int = 4):
    """An ONNX Runtime calibration reader over ``count`` seeded random normal batches of ``shape``."""
    batches = iter([{"input": np.random.default_rng(seed).standard_normal(shape, dtype=np.float32)}
                    for seed in range(count)])

    class Reader(quantization.CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    return Reader()


def test_qoperator_format_imports_too(residual_path, tmp_path):
    """ONNX Runtime's other format (QLinearConv, QGemm, QLinearAdd ...): TVM's frontend makes QNN ops of it."""
    quantization = optional_deps.require_onnxruntime_quantization()
    path = tmp_path / "qoperator.onnx"
    quantization.quantize_static(str(residual_path.with_suffix(".float.onnx")), str(path),
                                 _random_batches(quantization, IMAGE_SHAPE),
                                 quant_format=quantization.QuantFormat.QOperator)
    assert "QLinearConv" in {node.op_type for node in onnx.load(path).graph.node}
    loaded = onnx_import.from_onnx(path)
    assert onnx_import.op_counts(loaded.mod).get("qnn.conv2d") == 3
    assert accuracy.compare_untuned_with_reference(loaded).max_steps <= MAX_STEPS + TOLERANCE


# --- ONNX Runtime -------------------------------------------------------------------------------


def test_onnxruntime_timer_times_the_int8_session(residual):
    output, one_round = onnx_runtime.onnxruntime_timer(residual.reference, residual.inputs, number=2, threads=1)
    int8 = onnx_reference.onnxruntime_session(residual.reference.path, threads=1)
    np.testing.assert_array_equal(output, int8.run(None, residual.inputs)[0])
    seconds = one_round()
    assert 0 < seconds < 10
    session = onnx_reference.onnxruntime_session(residual.reference.path, threads=2)
    assert session.get_session_options().intra_op_num_threads == 2
    assert session.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(ValueError, match="number must be a positive"):
        onnx_runtime.onnxruntime_timer(residual.reference.path, residual.inputs, number=0, threads=1)


def test_reference_runs_the_qdq_graph_as_written(residual):
    import onnxruntime

    as_written = onnx_reference.onnxruntime_session(residual.reference.path, optimized=False)
    assert (as_written.get_session_options().graph_optimization_level
            == onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL)
    np.testing.assert_array_equal(residual.run_reference(), as_written.run(None, residual.inputs)[0])


def test_int8_kernels_agree_with_the_graph_as_written_when_weights_leave_room(tmp_path):
    """Why the reference is the graph as written: ONNX Runtime's int8 kernels saturate 16-bit sums
    on CPUs without VNNI (67 steps off on this MLP with 8-bit weights, AVX2-only AMD EPYC), which weights
    quantized to 7 bits (reduce_range) rule out on every CPU: then int8 and as written agree."""
    quantization = optional_deps.require_onnxruntime_quantization()
    from relay_ext.frontend.eager_quantization import seeded_float_model

    float_path = onnx_export.export_float_onnx(seeded_float_model(SmallMLP, 0), np.zeros(MLP_SHAPE, np.float32),
                                               tmp_path / "mlp.float.onnx")
    path = tmp_path / "mlp_reduce_range.onnx"
    quantization.quantize_static(str(float_path), str(path), _random_batches(quantization, MLP_SHAPE),
                                 quant_format=quantization.QuantFormat.QDQ,
                                 activation_type=quantization.QuantType.QUInt8,
                                 weight_type=quantization.QuantType.QInt8, reduce_range=True)
    loaded = onnx_import.from_onnx(path)
    int8 = onnx_reference.onnxruntime_session(path)
    for seed in range(5):
        data = np.random.default_rng(100 + seed).standard_normal(MLP_SHAPE, dtype=np.float32)
        steps = accuracy.step_error(int8.run(None, {"input": data})[0], loaded.run_reference(data),
                                    loaded.output_scale)
        assert steps.max_steps <= 1 + TOLERANCE


def test_saturation_note_only_for_large_errors_on_cpus_without_vnni():
    avx2 = frozenset({"sse4_2", "avx", "avx2", "fma"})
    saturation = onnx_runtime.OnnxRuntimePeer.saturation
    note = saturation.note(31, avx2)
    assert note and "no VNNI" in note and "reduce_range=True" in note
    assert saturation.note(2, avx2) is None  # rounding, not saturation
    assert saturation.note(31, avx2 | {"avx512_vnni"}) is None
    assert saturation.note(31, avx2 | {"avx_vnni"}) is None
    assert saturation.note(31, None) is None  # flags unknown: say nothing


def test_export_quantized_builtin_model(tmp_path):
    path = onnx_export.export_quantized("mlp", tmp_path / "mlp_int8.onnx")
    ops = {node.op_type for node in onnx.load(path).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    loaded = onnx_import.from_onnx(path)
    assert loaded.input_shape == models.MODELS["mlp"].input_shape(1, 224)
    assert onnx_import.op_counts(loaded.mod).get("qnn.dense") == 3
    # Same weights as relay_ext.load_model("mlp"): the float outputs of both quantized versions are close
    # (the export evaluated as written: ONNX Runtime's int8 kernels may saturate, see above).
    torch_model = relay_ext.load_model("mlp")
    torch_output = torch_model.run_reference()
    onnx_output = loaded.run_reference(torch_model.example_input)
    assert np.abs(torch_output - onnx_output).max() < 0.1 * np.abs(torch_output).max()


# --- bad input ----------------------------------------------------------------------------------


def test_float_model_is_refused(tmp_path):
    path = onnx_export.export_float_onnx(SmallMLP().eval(), np.zeros(MLP_SHAPE, np.float32), tmp_path / "float.onnx")
    with pytest.raises(ValueError, match="is a float ONNX model .*quantize_static") as raised:
        onnx_import.from_onnx(path)
    assert "\n" not in str(raised.value)


def _with_dynamic_batch(source, path):
    model = onnx.load(source)
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, path)
    return path


def test_dynamic_input_needs_a_shape(residual_path, tmp_path):
    path = _with_dynamic_batch(residual_path, tmp_path / "dynamic.onnx")
    with pytest.raises(ValueError, match=r"dynamic dimensions \(\?x3x16x16\); give its shape with --input-shape") as raised:
        onnx_import.from_onnx(path)
    assert "\n" not in str(raised.value)
    loaded = onnx_import.from_onnx(path, input_shape=(1, 3, 16, 16))
    assert loaded.input_shape == IMAGE_SHAPE
    assert tvm.relay.transform.InferType()(loaded.mod)["main"].checked_type.ret_type.shape[0] == 1
    with pytest.raises(ValueError, match=r"input shape 1x4x16x16 does not fit input 'input' of shape \?x3x16x16"):
        onnx_import.from_onnx(path, input_shape=(1, 4, 16, 16))
    with pytest.raises(ValueError, match="positive integers"):
        onnx_import.from_onnx(path, input_shape=(0, 3, 16, 16))


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="ONNX file not found"):
        onnx_import.from_onnx(tmp_path / "nowhere.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a protobuf")
    with pytest.raises(ValueError, match="is not a valid ONNX model"):
        onnx_import.from_onnx(junk)


@pytest.mark.parametrize("package", ["onnxruntime", "onnx"])
def test_missing_package_is_one_clear_error(monkeypatch, residual_path, package):
    monkeypatch.setitem(sys.modules, package, None)  # "import package" now raises ImportError
    with pytest.raises(optional_deps.MissingDependency, match=rf"needs the {package} package: pip install 'quantfuse\[onnx\]'") as raised:
        onnx_import.from_onnx(residual_path)
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, ImportError)
    assert "\n" not in str(raised.value)


def test_onnx_without_mapping_module_is_refused(monkeypatch, residual_path):
    """onnx >= 1.17 has no onnx.mapping, which TVM 0.19's frontend imports."""
    real_find_spec = optional_deps.importlib.util.find_spec
    monkeypatch.setattr(optional_deps.importlib.util, "find_spec",
                        lambda name, *args: None if name == "onnx.mapping" else real_find_spec(name, *args))
    with pytest.raises(optional_deps.MissingDependency, match=r"needs onnx < 1.17 \(it imports onnx.mapping\)"):
        onnx_import.from_onnx(residual_path)
