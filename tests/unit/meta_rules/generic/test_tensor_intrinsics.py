"""Each target registers its own TensorIntrin families: opening a CPU tuning database or starting
the CLI does not pay for CUDA's, and a later full import of TVM's package (which every
MetaSchedule TuneContext makes) still works. Child processes: this one has imported them all."""

import subprocess
import sys
import textwrap

import pytest

from meta_rules.generic.tensor_intrinsics import families_for


@pytest.mark.parametrize("target, families", [
    ("llvm -mcpu=cascadelake", ("x86",)),
    ("llvm -mtriple=aarch64-linux-gnu -mattr=+neon", ("arm_cpu",)),
    ("nvidia/nvidia-a100", ("cuda",)),
    ("rocm", ("rocm",)),
    ("metal", ("metal",)),
    ("vulkan", ()),
    (None, None),  # unknown: every family
])
def test_families_per_target(target, families):
    assert families_for(target) == families


def _in_child(code: str) -> str:
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                           text=True, timeout=300, check=False)
    assert child.returncode == 0, child.stderr[-3000:]
    return child.stdout


def test_cpu_work_registers_x86_alone_and_a_later_full_import_still_works():
    out = _in_child("""
        import sys
        import tvm
        import meta_rules
        from meta_rules.generic.tensor_intrinsics import register_tensor_intrinsics

        register_tensor_intrinsics("llvm -mcpu=cascadelake")
        loaded = sorted(m for m in sys.modules if m.startswith("tvm.tir.tensor_intrin"))
        print("after llvm:", loaded)
        assert tvm.tir.TensorIntrin.get("dot_16x4_vnni") is not None
        cuda = tvm.tir.TensorIntrin.get("wmma_sync_16x16x16_s8s8s32", allow_missing=True)
        print("cuda", "registered" if cuda is not None else "not registered")

        meta_rules.schedule_rules("nvidia/nvidia-a100")
        assert tvm.tir.TensorIntrin.get("wmma_sync_16x16x16_s8s8s32") is not None
        import tvm.tir.tensor_intrin as package  # TVM's __init__ runs and loads the rest
        print("full import:", package.x86.__name__, package.hexagon.__name__)
        register_tensor_intrinsics(None)
    """)
    assert "after llvm: ['tvm.tir.tensor_intrin.x86']" in out, out
    assert "cuda not registered" in out, out
    assert "full import: tvm.tir.tensor_intrin.x86 tvm.tir.tensor_intrin.hexagon" in out, out


def test_cli_help_does_not_load_every_intrinsic_family():
    out = _in_child("""
        import sys
        from relay_ext import cli
        code = cli.main(["--help"])
        print("code", code, "tvm.tir.tensor_intrin" in sys.modules,
              "tvm.tir.tensor_intrin.cuda" in sys.modules)
    """)
    assert out.splitlines()[-1] == "code 0 False False", out  # x86's alone (VNNI) may be loaded


_INTRINSIC_HASHES = """
    import sys
    import tvm
    {importer}
    names = sorted({{value for name, module in sys.modules.items()
                     if name.startswith("tvm.tir.tensor_intrin.")
                     for key, value in vars(module).items()
                     if key.endswith("_INTRIN") and isinstance(value, str)}})
    for name in names:
        intrin = tvm.tir.TensorIntrin.get(name)
        print(name, tvm.ir.structural_hash(intrin.desc), tvm.ir.structural_hash(intrin.impl))
    print("modules", sorted(m for m in sys.modules if m.startswith("tvm.tir.tensor_intrin")))
"""


def test_the_fast_import_registers_what_tvms_own_import_does():
    """register_tensor_intrinsics(None) parses the families with shallow TVMScript stacks (the
    times are in docs/BENCHMARKS.md); every intrinsic comes out the same."""
    ours = _in_child(_INTRINSIC_HASHES.format(
        importer="from meta_rules.generic.tensor_intrinsics import register_tensor_intrinsics; "
                 "register_tensor_intrinsics(None)"))
    tvms = _in_child(_INTRINSIC_HASHES.format(importer="import tvm.tir.tensor_intrin"))
    assert ours == tvms
    assert len(ours.splitlines()) > 50, ours  # 100 named intrinsics in TVM 0.19, every family
