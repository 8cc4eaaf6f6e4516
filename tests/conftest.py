import os

import pytest

os.environ.setdefault("TOPHUB_LOCATION", "NONE")

# The target of the shared tuned work dir: AVX2 + FMA, which every machine this project runs on
# (AVX-512 VNNI Intel, AVX2-only AMD) executes; a host without them skips what uses it.
AVX2 = "llvm -mcpu=core-avx2 -num-cores 2"
TINY_32 = ["--model", "tiny_resnet", "--image-size", "32"]
TUNED_TRIALS = 16
A100 = "nvidia/nvidia-a100"
FUSION_VARIANTS = ["legacy", "upstream", "ours"]


@pytest.fixture(scope="session")
def tiny():
    """tiny_resnet at 16x16, loaded once for every test that only reads it."""
    from relay_ext import models

    return models.load("tiny_resnet", image_size=16)


@pytest.fixture(scope="session")
def tiny32():
    """tiny_resnet at 32x32: the model of the shared tuned work dir."""
    from relay_ext import models

    return models.load("tiny_resnet", image_size=32)


@pytest.fixture(scope="session")
def a100_fusion(tiny):
    """The fusion report of tiny_resnet 16x16 on nvidia-a100 under all three variants, computed
    once for the tests that check it (the CLI's and the tuning flow's)."""
    from relay_ext.report.fusion import fusion_report

    return fusion_report(tiny.mod, tiny.params, A100, FUSION_VARIANTS)


@pytest.fixture(scope="session")
def tiny_tuned(tmp_path_factory):
    """tiny_resnet 32x32 tuned once through ``quantfuse tune`` (16 trials over its 10 tasks, seed
    0, a small search) for the tests that need a tuned work dir: bench, the budget spread, the
    closing line. Returns (work_dir, what the command printed)."""
    from relay_ext import cli
    from relay_ext.lowering import targets
    from relay_ext.cli import commands as cli_commands
    from helpers import small_search

    if targets.missing_features(AVX2):
        pytest.skip(f"this host's OS does not enable {targets.missing_features(AVX2)} ({AVX2})")
    work_dir = tmp_path_factory.mktemp("tiny_tuned")
    with pytest.MonkeyPatch.context() as patch, _captured_stdout() as out:
        patch.setattr(cli_commands, "search_strategy", small_search)
        code = cli.main(["tune", *TINY_32, "--target", AVX2, "--work-dir", str(work_dir),
                         "--trials", str(TUNED_TRIALS), "--seed", "0"])
    assert code == 0, out.getvalue()
    return work_dir, out.getvalue()


def _captured_stdout():
    import contextlib
    import io

    return contextlib.redirect_stdout(io.StringIO())
