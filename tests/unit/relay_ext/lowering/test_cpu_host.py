"""``--target host``, the AMX guard (only the AMX quantfuse uses, only where the process
can run it; the kernel's tile-data permission) and the VNNI/AMX decisions over the flag sets of
each host class."""

import platform
import subprocess
import sys

import pytest
from tvm.target import codegen

from relay_ext import cli
from relay_ext.lowering import targets
from relay_ext.lowering.x86 import amx, amx_permission
from host_flags import AMD_AVX2_VM, SKYLAKE_SERVER, VNNI_SERVER

# An Intel Sapphire Rapids class host whose OS enables AMX.
AMX_SERVER = VNNI_SERVER | {"avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16"}
AMX_MCPUS = ["sapphirerapids", "graniterapids"]


@pytest.mark.parametrize("flags, mcpu", [
    (AMX_SERVER, "cascadelake"),
    (VNNI_SERVER, "cascadelake"),
    (SKYLAKE_SERVER, "skylake-avx512"),
    (AMD_AVX2_VM, "core-avx2"),
])
@pytest.mark.parametrize("granted", [True, False])
def test_the_host_target_uses_vnni_and_amx_only_where_enabled(flags, mcpu, granted, monkeypatch):
    # granted: whether the kernel gives this process AMX tile data when asked (never asked
    # where the flags lack AMX int8)
    monkeypatch.setattr(amx_permission, "request_tile_data",
                        lambda flags: granted and set(amx_permission.AMX_INT8_FLAGS) <= set(flags))
    target = targets.host_llvm_target(2, flags=flags)
    assert target.attrs.get("mcpu") == mcpu
    with_amx = granted and flags == AMX_SERVER
    assert targets.amx_features(target) == (["amx-int8", "amx-tile"] if with_amx else [])
    targets.check_runs_here(target, flags)  # runs on the host class it was chosen for
    vnni = "avx512vnni" in {str(f) for f in codegen.llvm_get_cpu_features(target)}
    assert vnni == ("avx512_vnni" in flags)


def can_run_amx(monkeypatch, can_run: bool) -> None:
    """This process can (or cannot) run AMX code, as on an AMX host (or any other)."""
    monkeypatch.setattr(amx_permission, "request_tile_data", lambda flags: can_run)


@pytest.mark.parametrize("mcpu", AMX_MCPUS)
def test_an_amx_mcpu_keeps_only_the_amx_quantfuse_uses_where_it_can_run(mcpu, caplog,
                                                                         monkeypatch):
    # decided by LLVM's feature set of the -mcpu: these have amx-int8, amx-tile and more
    assert {"amx-int8", "amx-tile"} < set(targets.amx_features(f"llvm -mcpu={mcpu}"))
    can_run_amx(monkeypatch, True)
    with caplog.at_level("WARNING"):
        mapped = targets.normalize_target(f"llvm -mcpu={mcpu} -num-cores 3")
    assert mapped.attrs["mcpu"] == "cascadelake" and int(mapped.attrs["num-cores"]) == 3
    assert targets.amx_features(mapped) == ["amx-int8", "amx-tile"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "quantfuse uses AMX for int8 3x3 convs" in warnings[0], warnings
    assert "llvm -mcpu=cascadelake -mattr=+amx-tile,+amx-int8 -num-cores 3" in warnings[0]
    assert "amx-bf16" in warnings[0]  # what was dropped


@pytest.mark.parametrize("mcpu", AMX_MCPUS)
def test_an_amx_mcpu_is_mapped_to_the_best_target_without_amx_where_amx_cannot_run(
        mcpu, caplog, monkeypatch):
    can_run_amx(monkeypatch, False)
    with caplog.at_level("WARNING"):
        mapped = targets.normalize_target(f"llvm -mcpu={mcpu} -num-cores 3")
    assert mapped.attrs["mcpu"] == "cascadelake" and int(mapped.attrs["num-cores"]) == 3
    assert targets.amx_features(mapped) == []
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "cannot run AMX code" in warnings[0], warnings
    assert "llvm -mcpu=cascadelake -num-cores 3" in warnings[0]


def test_amx_in_mattr_is_kept_where_it_can_run_and_dropped_where_not(monkeypatch, caplog):
    text = "llvm -mcpu=cascadelake -mattr=+amx-tile,+amx-int8,+avx512f"
    can_run_amx(monkeypatch, True)
    with caplog.at_level("WARNING"):
        kept = targets.normalize_target("llvm -mcpu=cascadelake -mattr=+amx-tile,+amx-int8")
    assert [str(a) for a in kept.attrs["mattr"]] == ["+amx-tile", "+amx-int8"]
    assert not [r for r in caplog.records if r.levelname == "WARNING"]  # nothing to say
    assert [str(a) for a in targets.normalize_target(text).attrs["mattr"]] == \
        ["+avx512f", "+amx-tile", "+amx-int8"]
    # amx-tile alone: no int8 tile product, nothing of ours uses it
    caplog.clear()
    with caplog.at_level("WARNING"):
        alone = targets.normalize_target("llvm -mcpu=cascadelake -mattr=+amx-tile")
    assert targets.amx_features(alone) == []
    assert "needs both amx-tile and amx-int8" in caplog.records[-1].getMessage()
    can_run_amx(monkeypatch, False)
    mapped = targets.normalize_target(text)
    assert mapped.attrs["mcpu"] == "cascadelake"
    assert [str(a) for a in mapped.attrs["mattr"]] == ["+avx512f"]
    assert targets.amx_features(mapped) == []
    plain = targets.normalize_target("llvm -mcpu=core-avx2 -num-cores 2")
    assert plain.attrs["mcpu"] == "core-avx2" and "mattr" not in plain.attrs  # no AMX: unchanged


def test_a_mapped_amx_target_still_needs_its_vnni_and_amx_on_the_host(monkeypatch):
    can_run_amx(monkeypatch, True)
    mapped = targets.normalize_target("llvm -mcpu=sapphirerapids -num-cores 2")
    targets.check_runs_here(mapped, AMX_SERVER)
    with pytest.raises(targets.TargetNotRunnable, match="amx"):
        targets.check_runs_here(mapped, VNNI_SERVER)
    can_run_amx(monkeypatch, False)
    mapped = targets.normalize_target("llvm -mcpu=sapphirerapids -num-cores 2")
    targets.check_runs_here(mapped, AMX_SERVER)
    targets.check_runs_here(mapped, VNNI_SERVER)
    for flags in (SKYLAKE_SERVER, AMD_AVX2_VM):
        with pytest.raises(targets.TargetNotRunnable, match="avx512vnni"):
            targets.check_runs_here(mapped, flags)


def test_the_host_target_text_of_a_message_asks_the_kernel_for_nothing(monkeypatch):
    """host_target_text() formats error messages: it reports AMX where this process holds tile
    data already, and never asks the kernel for it (host_llvm_target() does)."""
    def refuse(flags):
        raise AssertionError("asked the kernel for AMX tile data while formatting a message")

    monkeypatch.setattr(amx_permission, "request_tile_data", refuse)
    for granted in (True, False):
        monkeypatch.setattr(amx_permission, "amx_tile_data_granted", lambda: granted)
        text = targets.host_target_text(2, AMX_SERVER)
        assert text == ("llvm -mcpu=cascadelake -mattr=+amx-tile,+amx-int8 -num-cores 2" if granted
                        else "llvm -mcpu=cascadelake -num-cores 2")
        assert targets.host_target_text(2, VNNI_SERVER) == "llvm -mcpu=cascadelake -num-cores 2"
    with pytest.raises(targets.TargetNotRunnable, match="core-avx2 -num-cores 4"):
        targets.check_runs_here("llvm -mcpu=sapphirerapids -num-cores 4", AMD_AVX2_VM)


def test_amx_tile_data_is_not_asked_for_where_the_os_does_not_enable_amx():
    for flags in (VNNI_SERVER, SKYLAKE_SERVER, AMD_AVX2_VM, frozenset({"amx_tile"})):
        assert amx.request_amx_tile_data(flags) is False


def test_the_kernel_grants_amx_tile_data_where_the_os_enables_amx():
    """In a child process (the permission is per process): not held before asking; held after
    asking exactly where this host's flags have AMX int8 and the kernel is 5.16 or newer."""
    flags = targets.host_cpu_flags()
    if flags is None or platform.machine() != "x86_64":
        pytest.skip("not a Linux x86-64 host")
    code = ("from relay_ext.lowering.x86 import amx, amx_permission; "
            "print(amx_permission.amx_tile_data_granted(), amx.request_amx_tile_data(), "
            "amx_permission.amx_tile_data_granted())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    release = tuple(int(x) for x in platform.release().split("-")[0].split(".")[:2])
    expected = set(amx_permission.AMX_INT8_FLAGS) <= flags and release >= (5, 16)
    assert out == ["False", str(expected), str(expected)], out


# --- the command line ---------------------------------------------------------------------------

TINY = ["--model", "tiny_resnet", "--image-size", "16"]


@pytest.mark.parametrize("command", ["tune", "bench"])
def test_target_host_prints_the_resolved_target(command, tmp_path, capsys):
    # cheap: stopped by bad input (a work dir with no database / a file as work dir) right after
    (tmp_path / "file").write_text("")
    work_dir = tmp_path / ("file" if command == "tune" else "empty")
    work_dir.mkdir(exist_ok=True) if command == "bench" else None
    args = [command, *TINY, "--target", "host", "--work-dir", str(work_dir)]
    assert cli.main(args + (["--trials", "2"] if command == "tune" else [])) == cli.EXIT_BAD_INPUT
    out = capsys.readouterr().out
    assert f"--target host: {targets.short_text(targets.host_llvm_target())}" in out, out


def test_the_api_takes_host():
    assert str(targets.normalize_target("host")) == str(targets.host_llvm_target())
    assert str(targets.normalize_target(" HOST ")) == str(targets.host_llvm_target())


def test_tune_with_an_amx_target_on_a_host_without_vnni_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(targets, "host_cpu_flags", lambda: AMD_AVX2_VM)
    can_run_amx(monkeypatch, False)  # as on that host
    assert cli.main(["tune", *TINY, "--target", "llvm -mcpu=sapphirerapids", "--trials", "2",
                     "--work-dir", str(tmp_path)]) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    # the mapping's warning, then the refusal of the mapped target on this AVX2-only host
    assert len(lines) == 2 and "cannot run AMX code" in lines[0], err
    assert lines[1].startswith("quantfuse: error: ") and "avx512vnni" in lines[1], err
    assert "Traceback" not in err
