"""Relay's TE compiler reads TVM's build settings once per process (relay_ext.lowering.cached_libinfo)."""

import tvm
from tvm.relay.backend import te_compiler

import relay_ext.tuning  # noqa: F401  # installs it, as before any extraction or build
from relay_ext.lowering import cached_libinfo


def test_te_compiler_reads_the_settings_once_and_gets_the_same_values(monkeypatch):
    assert te_compiler.libinfo is cached_libinfo.libinfo
    assert cached_libinfo.libinfo() == tvm.support.libinfo()

    calls = []
    real = tvm.support.libinfo
    monkeypatch.setattr(tvm.support, "libinfo", lambda: calls.append(1) or real())
    cached_libinfo._settings.cache_clear()  # pylint: disable=protected-access
    try:
        shape = [tvm.tir.IntImm("int64", n) for n in (1, 3, 16, 16)] * 50
        te_compiler.get_shape(shape)
        te_compiler.get_shape(shape)
        assert len(calls) == 1
        copy = cached_libinfo.libinfo()
        copy["INDEX_DEFAULT_I64"] = "changed"
        assert cached_libinfo.libinfo()["INDEX_DEFAULT_I64"] != "changed"  # callers get copies
    finally:
        cached_libinfo._settings.cache_clear()  # pylint: disable=protected-access
    assert cached_libinfo.install()  # idempotent
