"""benchmarks/where_time_goes.py's table (benchmarks/layer_table.py) on made-up rows, and its peer
choice without the openvino package: no model is built here."""

import sys

import pytest

from benchmarks.layer_table import table, tvm_channels
from benchmarks.where_time_goes import peers_of

A = (64, 64, 3, 1, 56, 56)
B = (4, 64, 7, 2, 112, 112)


def tvm_row(task, signature, calls, ms, default=None):
    return {"task": task, "signature": signature, "calls": calls, "used_ms": ms,
            "default_ms": ms if default is None else default, "kind": "VNNI x14"}


def test_rows_sum_per_shape_sort_by_gap_to_the_fastest_peer_and_keep_unmatched_convs_apart():
    tvm = [tvm_row("conv_a", A, 3, 0.4), tvm_row("conv_a_add", A, 1, 0.4), tvm_row("stem", B, 1, 1.0),
           tvm_row("pad", None, 2, 0.05)]
    slow = {"name": "PyTorch", "total": 4.0, "rows": [
        {"signature": A, "ms": 0.3, "kind": "Conv2d"} for _ in range(4)] + [
        {"signature": B, "ms": 0.4, "kind": "ConvReLU2d"},
        {"signature": None, "ms": 0.2, "kind": "MaxPool2d"}]}
    fast = {"name": "OpenVINO", "total": 3.0, "rows": [
        {"signature": A, "ms": 0.15, "kind": "brgconv"} for _ in range(4)] + [
        {"signature": B, "ms": 0.25, "kind": "brgconv"},
        {"signature": (8, 16, 1, 1, 5, 5), "ms": 0.07, "kind": "brgconv_1x1"},  # no TVM task
        {"signature": None, "ms": 0.01, "kind": "Reorder"}]}
    header, rows = table(tvm, 6.0, [slow, fast], "no-search")
    assert header[:6] == ["layer", "calls (TVM / PyTorch / OpenVINO)", "TVM no-search ms",
                          "TVM default ms", "PyTorch ms", "OpenVINO ms"]
    first, second = rows[0], rows[1]
    # A: TVM 4 x 0.4 = 1.6, PyTorch 1.2, OpenVINO 0.6: gap +1.0 to the fastest, before B's +0.75
    assert first[0] == "conv 3x3/1 64->64, out 56x56" and first[1] == "4 / 4 / 4"
    assert first[2:6] == ["1.600", "1.600", "1.200", "0.600"]
    assert first[header.index("gap to fastest peer ms")] == "+1.000"
    assert first[header.index("TVM / OpenVINO")] == "2.67x"
    assert second[0] == "conv 7x7/2 4->64, out 112x112"
    by_name = {row[0]: row for row in rows}
    assert by_name["convs with no TVM task of their shape"][5] == "0.070"
    other = by_name["everything else"]
    assert other[2] == "0.100" and other[4] == "0.200" and other[5] == "0.010"
    assert by_name["sum of the layers"][5] == "0.930"
    assert by_name["whole model (one run, median)"][2:6] == ["6.000", "", "4.000", "3.000"]


def test_channels_padded_as_topi_pads_them():
    assert tvm_channels(3, 8, 1) == (4, 16)
    assert tvm_channels(4, 16, 1) == (4, 16)  # idempotent: TVM's own padded counts stay
    assert tvm_channels(32, 32, 32) == (32, 32)  # depthwise: not padded


def test_peer_convs_counted_as_tvm_builds_run_them():
    """A peer's conv (the network's channels) gets the signature of TVM's task: channels padded
    as TOPI pads its int8 convs (and the int16 convs of a target without VNNI) alike."""
    from benchmarks.layer_timing import peer_signature

    assert peer_signature(3, 8, 1, 3, 1, 32, 32) == (4, 16, 3, 1, 32, 32)
    assert peer_signature(32, 32, 32, 3, 1, 8, 8)[:2] == (32, 32)  # depthwise


def test_without_openvino_both_means_pytorch_and_openvino_alone_is_refused(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "openvino", None)
    assert peers_of("both") == ["pytorch"]
    assert "OpenVINO column left out" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--peer openvino: .*quantfuse\\[peers\\]"):
        peers_of("openvino")
