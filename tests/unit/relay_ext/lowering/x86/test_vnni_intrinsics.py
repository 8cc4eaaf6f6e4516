"""TVM's VNNI int8 dot products, registered again for LLVM 22 (relay_ext.lowering.x86.vnni_intrinsics).

Without them, building any int8 conv for a VNNI ``-mcpu`` aborts the whole process in LLVM's IR
verifier, so each build here runs in a child process: a regression shows as a failed test, not a
dead test run.
"""


import pytest
import tvm
from relay_ext.lowering.x86 import vnni_intrinsics
from conftest import needs_c_compiler
from helpers import VNNI, host_has_vnni, run_child

HOST_HAS_VNNI = host_has_vnni()


def test_this_wheel_needs_byte_operands_and_install_registers_them():
    assert tvm.target.codegen.llvm_version_major() >= 22
    assert vnni_intrinsics.install()
    from tvm.tir import TensorIntrin
    from tvm.tir.tensor_intrin.x86 import VNNI_DOT_16x4_INTRIN

    assert vnni_intrinsics.install()  # idempotent
    assert TensorIntrin.get(VNNI_DOT_16x4_INTRIN) is not None


def test_untuned_int8_model_builds_for_vnni_and_uses_vpdpbusd():
    # TVM's default x86 int8 conv schedule tensorizes with TOPI's Cascade Lake intrinsic.
    out = run_child(f"""
        import tvm
        from relay_ext.frontend import models
        from relay_ext.build import compile
        from relay_ext.measure.run import run_module
        from relay_ext.report.accuracy import run_torchscript, step_error
        m = models.load("tiny_resnet", image_size=16)
        lib = compile(m, target="{VNNI}", schedule="default").lib
        print("vpdpbusd" in lib.get_lib().get_source("asm"))
        if {HOST_HAS_VNNI}:
            out = run_module(lib, m.inputs)[0]
            expected = run_torchscript(m.torchscript, m.example_input)
            print(step_error(out, expected, m.output_scale).max_steps)
    """).split()
    assert out[0] == "True"
    if not HOST_HAS_VNNI:  # the build half passed; the accuracy half needs VNNI to run
        pytest.skip("built with vpdpbusd; not run against PyTorch: this CPU has no AVX-512 VNNI")
    assert float(out[1]) <= 3, f"{out[1]} steps from PyTorch"


@needs_c_compiler  # a tune
@pytest.mark.skipif(not HOST_HAS_VNNI, reason="runs VNNI code: this CPU has no AVX-512 VNNI")
def test_tuned_int8_model_tensorizes_with_vnni_and_matches_pytorch(tmp_path):
    out = run_child(f"""
        import sys
        sys.path.insert(0, "tests")
        from helpers import small_search
        from relay_ext.frontend import models
        from relay_ext.report.accuracy import run_torchscript, step_error
        from relay_ext.build import compile
        from relay_ext.measure.run import run_module
        from relay_ext.tuning import tune
        m = models.load("tiny_resnet", image_size=16)
        db = tune(m.mod, m.params, "{VNNI}", r"{tmp_path}", max_trials=16,
                  num_trials_per_iter=2, seed=0, strategy=small_search())
        records = db.get_all_tuning_records()
        print(sum("dot_16x4_vnni" in str(r.trace) for r in records))
        lib = compile(m, target="{VNNI}", records=db, choose_per_task=False)
        out = run_module(lib, m.inputs)[0]
        print(step_error(out, run_torchscript(m.torchscript, m.example_input),
                         m.output_scale).max_steps)
    """).split()
    assert int(out[0]) > 0, "no measured candidate was tensorized with dot_16x4_vnni"
    assert float(out[1]) <= 3, f"{out[1]} steps from PyTorch"
