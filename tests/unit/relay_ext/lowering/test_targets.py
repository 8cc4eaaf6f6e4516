"""Host targets from the CPU flags the OS enables; targets this machine cannot run are refused."""

import platform

import pytest
from tvm.target import Target

from relay_ext import cli
from relay_ext.cli.inputs import warn_if_generic_llvm
from relay_ext.lowering import targets
from helpers import one_error_line
from host_flags import AMD_AVX2_VM, BASE, SKYLAKE_SERVER, SSE_ONLY, VNNI_SERVER


@pytest.mark.parametrize("flags, mcpu", [
    (VNNI_SERVER, "cascadelake"),
    (SKYLAKE_SERVER, "skylake-avx512"),
    (AMD_AVX2_VM, "core-avx2"),
    (frozenset(BASE + ["avx2"]), None),  # AVX2 without FMA: not core-avx2
    (frozenset(BASE + ["avx512f", "avx512_vnni", "avx2", "fma"]), "core-avx2"),  # no avx512bw
    (SSE_ONLY, None),
    # A VM that hides AVX-512 CD: LLVM's skylake-avx512 and cascadelake use it, so neither runs.
    (VNNI_SERVER - {"avx512cd"}, "core-avx2"),
    (AMD_AVX2_VM - {"movbe"}, None),  # core-avx2 implies MOVBE
    (None, None),  # an OS that does not list its flags: the conservative choice
])
def test_best_mcpu_from_the_flags_the_os_enables(flags, mcpu):
    assert targets.best_mcpu(flags) == mcpu
    if flags is not None:  # None asks host_llvm_target for this host's own flags
        target = targets.host_llvm_target(2, flags=flags)
        assert target.attrs.get("mcpu") == mcpu and int(target.attrs["num-cores"]) == 2


def test_an_os_that_does_not_list_its_flags_gets_plain_llvm(monkeypatch):
    monkeypatch.setattr(targets, "host_cpu_flags", lambda: None)
    assert "mcpu" not in targets.host_llvm_target(2).attrs
    targets.check_runs_here("llvm -mcpu=cascadelake")  # unknown flags: nothing to refuse on


def test_parse_cpu_flags_reads_the_first_flags_line():
    text = ("processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 fma\n\n"
            "processor\t: 1\nflags\t\t: fpu sse\n")
    assert targets.parse_cpu_flags(text) == {"fpu", "avx2", "fma"}
    assert targets.parse_cpu_flags("processor\t: 0\n") is None


def test_llvm_names_the_cpu_znver4_but_the_os_exposes_only_avx2():
    # LLVM's feature list for znver4 includes AVX-512 VNNI; the OS's flags decide.
    znver4 = Target("llvm -mcpu=znver4 -num-cores 2")
    missing = targets.missing_features(znver4, AMD_AVX2_VM)
    assert {"avx512f", "avx512bw", "avx512vnni"} <= set(missing)
    with pytest.raises(targets.TargetNotRunnable, match="avx512f") as refused:
        targets.check_runs_here(znver4, AMD_AVX2_VM)
    assert "-mcpu=core-avx2 -num-cores 2" in str(refused.value)
    assert targets.host_llvm_target(2, flags=AMD_AVX2_VM).attrs["mcpu"] == "core-avx2"
    targets.check_runs_here("llvm -mcpu=core-avx2 -num-cores 2", AMD_AVX2_VM)  # no error


def test_mattr_features_count_and_other_architectures_are_refused():
    with pytest.raises(targets.TargetNotRunnable, match="avx512f"):
        targets.check_runs_here("llvm -mcpu=core-avx2 -mattr=+avx512f", AMD_AVX2_VM)
    with pytest.raises(targets.TargetNotRunnable, match="aarch64"):
        targets.check_runs_here("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72")
    with pytest.raises(targets.TargetNotRunnable, match="not a CPU target"):
        targets.check_runs_here("nvidia/nvidia-a100")


@pytest.mark.skipif(targets.host_cpu_flags() is None
                    or platform.machine() not in ("x86_64", "AMD64"),
                    reason="this OS does not list its CPU flags (or this is not x86): the host "
                           "target is plain llvm, with no feature to check against the flags")
def test_this_hosts_own_target_runs_here():
    flags = targets.host_cpu_flags()
    target = targets.host_llvm_target(2)
    assert target.attrs.get("mcpu") == targets.best_mcpu(flags)
    assert targets.missing_features(target, flags) == []  # every feature its -mcpu implies
    targets.check_runs_here(target, flags)


def test_a_target_metaschedule_cannot_tune_is_refused_once_at_the_edge():
    with pytest.raises(ValueError, match="no default rules for target 'ext_dev"):
        targets.tunable_target("ext_dev")
    with pytest.raises(ValueError, match="unknown variant 'best'"):
        targets.tunable_target("llvm -num-cores 2", "best")
    tunable = targets.tunable_target("llvm -mcpu=core-avx2")
    assert tunable.attrs["mcpu"] == "core-avx2" and int(tunable.attrs["num-cores"]) >= 1


def test_an_mcpu_llvm_does_not_know_is_refused():
    with pytest.raises(ValueError, match="does not know -mcpu=bogus"):
        targets.normalize_target("llvm -mcpu=bogus")
    assert targets.normalize_target("llvm -mcpu=core-avx2").attrs["mcpu"] == "core-avx2"


# --- the command line -------------------------------------------------------------------------

TINY = ["--model", "tiny_resnet", "--image-size", "16"]


@pytest.fixture
def avx2_host(monkeypatch):
    """This process believes its OS enables the flags of an AVX2-only AMD virtual machine."""
    monkeypatch.setattr(targets, "host_cpu_flags", lambda: AMD_AVX2_VM)


@pytest.mark.parametrize("command", ["tune", "bench"])
def test_tune_and_bench_refuse_a_target_this_host_cannot_run(avx2_host, command, tmp_path, capsys):
    args = [command, *TINY, "--target", "llvm -mcpu=cascadelake -num-cores 2",
            "--work-dir", str(tmp_path)]
    if command == "tune":
        args += ["--trials", "4"]
    else:
        (tmp_path / "database_tuning_record.json").write_text("")
    assert cli.main(args) == cli.EXIT_BAD_INPUT
    line = one_error_line(capsys, "avx512f", "avx512vnni", "--target 'llvm -mcpu=core-avx2")
    assert "cannot run" in line
    assert not (tmp_path / "logs").exists()  # refused before anything was built


def test_unknown_mcpu_is_bad_input_not_log_lines(capsys):
    assert cli.main(["fusion", *TINY, "--target", "llvm -mcpu=bogus"]) == cli.EXIT_BAD_INPUT
    one_error_line(capsys, "-mcpu=bogus", "for this machine")


def test_generic_llvm_warning_names_this_hosts_target(avx2_host, caplog):
    with caplog.at_level("WARNING", logger="quantfuse"):
        warn_if_generic_llvm("llvm", Target("llvm -num-cores 2"))
        warn_if_generic_llvm("llvm -mcpu=core-avx2", Target("llvm -mcpu=core-avx2"))
    assert len(caplog.records) == 1, caplog.records
    assert "no -mcpu" in caplog.records[0].getMessage()
    assert "llvm -mcpu=core-avx2" in caplog.records[0].getMessage()


def test_missing_here_does_not_vouch_for_a_host_whose_flags_it_cannot_read(monkeypatch):
    """missing_features treats unknown flags as nothing missing (a build may go on); missing_here,
    for callers about to run the code, names the unreadable flags instead."""
    monkeypatch.setattr(targets, "host_cpu_flags", lambda: None)
    assert targets.missing_features("llvm -mcpu=cascadelake") == []
    assert targets.missing_here("llvm -mcpu=cascadelake") == [targets.UNREADABLE_FLAGS]
    monkeypatch.setattr(targets, "host_cpu_flags", lambda: AMD_AVX2_VM)
    assert "avx512vnni" in targets.missing_here("llvm -mcpu=cascadelake")
    assert targets.missing_here("llvm -mcpu=core-avx2") == []
