"""relay_ext.profile on tiny_resnet at 16x16 (one build, profiled once for the module): a row per
fused op of the build, times that add up to the debug executor's run, the JSON form, the PNG
chart, OpenVINO's paired layers where it reads the model and the reason where it does not."""

import dataclasses
import importlib.util
import json
import sys
import types

import pytest

from relay_ext.latency import layer_pairing, profile as profile_module
from relay_ext.latency.profile_report import profile_text, short_name
from relay_ext.latency.profile_result import Profile, ProfileRow
from relay_ext.measure.in_model import kernel_name

from conftest import AVX2
from helpers import cannot_run_here, host_has_vnni, VNNI

OPENVINO_HERE = all(importlib.util.find_spec(name) is not None
                    for name in ("openvino", "onnx", "onnxruntime"))


EXTRACTIONS = []  # the profile's own task extractions (the build's are not counted)
EVENTS = []  # the profile's pauses and each side's timed runs, in order


@pytest.fixture(scope="module")
def profiled(tiny, tmp_path_factory):
    """(the profile, the graph's kernel names of the build it profiled, the work dir)."""
    if cannot_run_here(AVX2):
        pytest.skip(cannot_run_here(AVX2))
    work_dir = tmp_path_factory.mktemp("profile")
    built = []
    compile_, extract = profile_module.compile, profile_module.lowered_tasks
    settle, runs, openvino = (profile_module.settle, profile_module.profiled_runs,
                              profile_module._openvino_side)  # pylint: disable=protected-access
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(profile_module, "settle", lambda: EVENTS.append("pause") or settle())
        patch.setattr(profile_module, "profiled_runs",
                      lambda *args: EVENTS.append("TVM counters") or runs(*args))
        patch.setattr(profile_module, "_openvino_side",
                      lambda *args: EVENTS.append("OpenVINO") or openvino(*args))
        patch.setattr(profile_module, "compile",
                      lambda *args, **kwargs: built.append(compile_(*args, **kwargs)) or built[-1])
        patch.setattr(profile_module, "lowered_tasks",
                      lambda *args, **kwargs: EXTRACTIONS.append(1) or extract(*args, **kwargs))
        result = profile_module.profile(tiny, target=AVX2, work_dir=work_dir, threads=1,
                                        rounds=3, choose_per_task=False)
    graph = json.loads(built[0].lib.get_graph_json())
    kernels = {kernel_name(node["attrs"]["func_name"]) for node in graph["nodes"]
               if node["op"] == "tvm_op" and node["attrs"]["func_name"] != "__nop"}
    return result, kernels, work_dir


def test_every_fused_op_of_the_build_has_a_row_with_its_calls(profiled):
    result, kernels, _ = profiled
    assert {row.name for row in result.rows} == kernels
    assert result.schedule == "no-search" and result.threads == 1 and result.rounds == 3
    # tiny_resnet calls its 16->16 conv twice (conv1, conv2 with the shortcut)
    assert sum(row.calls for row in result.rows) > len(result.rows)
    assert all(row.kernel for row in result.rows), result.rows  # read from each one's code
    assert {row.schedule for row in result.rows} <= {"no-search", "default"}
    assert [row.ms for row in result.rows] == sorted((row.ms for row in result.rows), reverse=True)


def test_the_rows_take_their_layers_from_the_builds_own_tasks_not_a_second_extraction(profiled):
    result, _, _ = profiled
    assert EXTRACTIONS == []
    assert any(row.layer and row.layer.startswith("conv 3x3") for row in result.rows)


def test_times_are_positive_and_add_up_to_the_profiled_run(profiled):
    result, _, _ = profiled
    assert all(row.ms > 0 for row in result.rows), result.rows
    assert result.layers_ms == pytest.approx(sum(row.ms for row in result.rows))
    # the kernels run inside the run the debug executor times; the rest is the executor's
    assert 0.1 * result.run_ms < result.layers_ms <= result.run_ms
    assert result.between_kernels_ms == pytest.approx(result.run_ms - result.layers_ms)
    assert sum(row.share for row in result.rows) == pytest.approx(result.layers_ms / result.run_ms)
    assert result.model_ms > 0


def test_the_json_round_trips(profiled):
    result, _, _ = profiled
    text = result.to_json()
    assert Profile.from_json(text) == result
    data = json.loads(text)
    assert {"name", "calls", "ms", "share", "layer", "schedule", "kernel",
            "openvino_ms"} <= set(data["rows"][0])


def test_the_chart_is_a_png_in_the_work_dir(profiled):
    from PIL import Image

    result, _, work_dir = profiled
    assert result.chart == str(work_dir / "profile.png") and result.chart_note is None
    with Image.open(result.chart) as image:
        assert image.format == "PNG" and image.size[0] > 0 and image.size[1] > 0


@pytest.mark.skipif(not OPENVINO_HERE, reason="OpenVINO's column needs openvino, onnx and "
                    "onnxruntime: pip install 'quantfuse[peers,onnx]'")
def test_each_conv_call_is_paired_with_an_openvino_layer(profiled):
    result, _, _ = profiled
    assert result.openvino is not None, result.openvino_note
    assert result.openvino.onnx_file.endswith(".onnx") and result.openvino.model_ms > 0
    convs = [row for row in result.rows if row.layer is not None]
    assert convs and all(row.layer.startswith("conv ") for row in convs)
    for row in convs:
        assert len(row.openvino_layers) == row.calls, row
        assert row.openvino_ms > 0 and row.openvino_kernel, row
    assert all(not row.openvino_layers for row in result.rows if row.layer is None)
    paired = sum(len(row.openvino_layers) for row in result.rows)
    assert paired + len(result.openvino.unpaired) > paired  # the FC, pooling, reorders are left
    assert "OpenVINO ms" in profile_text(result)


def test_each_side_is_timed_after_a_pause_for_the_threads_before_it_to_go_idle(profiled):
    """TVM's pool workers spin a while after a run (and the build times candidates): a side timed
    at once would share the cores with them."""
    assert EVENTS[:2] == ["pause", "TVM counters"]
    assert EVENTS[-2:] == ["pause", "OpenVINO"] and EVENTS.count("pause") == 3


@pytest.mark.skipif(OPENVINO_HERE, reason="checks the reason given where openvino is missing")
def test_without_openvino_its_column_is_absent_with_the_reason(profiled):
    result, _, _ = profiled
    assert result.openvino is None and "openvino" in result.openvino_note.lower()
    assert f"no OpenVINO column: {result.openvino_note}" in profile_text(result)


def test_a_model_openvino_cannot_read_gets_the_reason(tiny, tmp_path):
    """A TorchScript model (no ONNX file, no built-in export): no file for OpenVINO, and why."""
    path, why = profile_module.openvino_source(dataclasses.replace(tiny, builtin=None), tmp_path)
    assert path is None and "ONNX" in why and tiny.name in why


def test_the_text_names_every_op_and_the_totals(profiled):
    result, _, _ = profiled
    text = profile_text(result)
    for row in result.rows:
        assert short_name(row.name) in text
    assert short_name("a" * 50 + "_conv_1", 20) == "aaaaaaaaa...a_conv_1"
    for line in ("executor, between kernels", "sum of the fused ops",
                 "one profiled run (debug executor)", "whole model, no profiler (as bench)"):
        assert line in text


def test_without_matplotlib_the_chart_note_says_so_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    result = Profile("m", [1, 3, 8, 8], "llvm", "no-search", "ours", 1, 1,
                     [ProfileRow("fused_nn_conv2d", 0.2, 0.5, 1)], 0.2, 0.4, 0.3)
    profile_module.attach_chart(result, tmp_path / "p.png")
    assert result.chart is None and "matplotlib is not installed" in result.chart_note
    assert "\n" not in result.chart_note and result.chart_note in profile_text(result)
    assert not (tmp_path / "p.png").exists()


def test_the_nth_conv_of_a_shape_meets_the_peers_nth():
    a, b = (16, 16, 3, 1, 8, 8), (8, 16, 3, 1, 8, 8)
    calls = [("stem", b), ("pool", None), ("conv", a), ("conv_add", a), ("conv", a)]
    peer = [{"signature": b, "name": "p_stem"}, {"signature": None, "name": "p_reorder"},
            {"signature": a, "name": "p1"}, {"signature": a, "name": "p2"},
            {"signature": a, "name": "p3"}, {"signature": a, "name": "p4"}]
    paired, left = layer_pairing.pair_calls(calls, peer)
    assert {name: [row["name"] for row in rows] for name, rows in paired.items()} == \
        {"stem": ["p_stem"], "conv": ["p1", "p3"], "conv_add": ["p2"]}
    assert [row["name"] for row in left] == ["p_reorder", "p4"]  # in the peer's order


def test_kernel_times_sum_each_kernels_calls_per_run():
    def report(durations, total):
        duration = types.SimpleNamespace
        calls = [{"Name": name, "Duration (us)": duration(microseconds=us)}
                 for name, us in durations]
        return types.SimpleNamespace(calls=calls, device_metrics={
            "cpu0": {"Duration (us)": duration(microseconds=total)}})

    prefix = "tvmgen_default_"
    runs = [report([(prefix + "a", 100), (prefix + "b", 50), ("__nop", 1), (prefix + "a", 120)], 400),
            report([(prefix + "a", 90), (prefix + "b", 60), ("__nop", 1), (prefix + "a", 110)], 380)]
    per_run, calls, order, totals = profile_module.kernel_times(runs)
    assert per_run == {"a": pytest.approx([0.22, 0.2]), "b": pytest.approx([0.05, 0.06])}
    assert calls == {"a": 2, "b": 1} and order == ["a", "b", "a"]
    assert totals == pytest.approx([0.4, 0.38])


def test_a_no_search_builds_kept_designs_are_no_search_and_a_tuned_builds_records_tuned():
    """The per-task choice of a no-search build takes the rule designs as its records ("tuned"
    in its comparisons): the profile calls them what they are."""
    designs = types.SimpleNamespace(designs=[
        types.SimpleNamespace(task=name, has_record=True, design="amx") for name in "abc"])
    choices = [types.SimpleNamespace(task="a", choice="tuned"),
               types.SimpleNamespace(task="b", choice="default")]
    for schedule, kept in (("no-search", "no-search"), ("tuned", "tuned")):
        built = types.SimpleNamespace(designs=designs, choices=choices, schedule=schedule)
        chosen, kinds = profile_module._schedules(built)  # pylint: disable=protected-access
        assert chosen == {"a": kept, "b": "default", "c": "no-search"}
        assert kinds == {"a": "amx", "b": "amx", "c": "amx"}


def test_a_build_without_vnni_has_no_peak_and_each_conv_its_multiply_adds(profiled):
    import re

    result, _, _ = profiled
    assert result.vnni_peak_gmacs is None
    assert result.vnni_peak_note == "no conv of this build uses VNNI"
    assert f"no VNNI peak: {result.vnni_peak_note}" in profile_text(result)
    convs = [row for row in result.rows if row.layer]
    assert convs
    for row in convs:  # conv K x K/S CIN->COUT, out H x W: one call's products, times its calls
        k, _, cin, cout, height, width = map(int, re.match(
            r"conv (\d+)x\d+/(\d+) (\d+)->(\d+), out (\d+)x(\d+)", row.layer).groups())
        assert row.macs == row.calls * k * k * cin * cout * height * width, row
    assert all(row.macs is None for row in result.rows if not row.layer)


def test_each_vnni_conv_is_set_against_the_measured_peak():
    """100 G multiply-adds/s: a VNNI conv of 10 M in 0.2 ms ran at 50 G, half of it; an AMX one
    is not rated (AMX is not bound by VNNI's peak)."""
    rows = [ProfileRow("fused_conv_vnni", 0.2, 0.4, 1, layer="conv", kernel="VNNI x14",
                       macs=10_000_000),
            ProfileRow("fused_conv_amx", 0.1, 0.2, 1, layer="conv", kernel="AMX", macs=10_000_000),
            ProfileRow("fused_nn_pad", 0.05, 0.1, 2, kernel="no int8 dot")]
    result = Profile("m", [1, 3, 8, 8], "llvm", "no-search", "ours", 2, 1, rows, 0.35, 0.5, 0.4,
                     vnni_peak_gmacs=100.0)
    assert result.peak_share(rows[0]) == pytest.approx(0.5)
    assert result.peak_share(rows[1]) is None and result.peak_share(rows[2]) is None
    assert result.vnni_convs() == [rows[0]] and result.vnni_floor_ms() == pytest.approx(0.1)
    text = profile_text(result)
    table = text.splitlines()[3:7]
    assert "of VNNI peak" in table[0]
    assert table[2].split()[-1] == "50%" and "VNNI x14" in table[2]
    assert table[3].split()[-2:] == ["AMX", "-"]
    assert ("the 1 VNNI convs' 0.010 G multiply-adds (channels as TVM pads them) take 0.100 ms "
            "at it, they took 0.200 ms (50% of the peak)") in text
    assert Profile.from_json(result.to_json()) == result
    assert "above the peak" not in text
    rows[0].ms = 0.05  # 200 G/s against a peak of 100: timed wrong
    assert "1 ran above the peak: timed while the host was busy" in profile_text(result)


@pytest.mark.skipif(not host_has_vnni(), reason="a VNNI build runs where the OS enables "
                    "AVX-512 VNNI")
def test_a_vnni_build_measures_the_peak_and_rates_its_convs(tiny):
    result = profile_module.profile(tiny, target=VNNI, threads=1, rounds=1, openvino=False,
                                    choose_per_task=False)
    assert result.vnni_peak_gmacs > 0 and result.vnni_peak_note is None
    rated = [row for row in result.rows if result.peak_share(row) is not None]
    assert rated and all(row.kernel.startswith("VNNI") and row.macs for row in rated)
    for row in rated:  # its products per second over the peak (tiny's convs take microseconds:
        # how close to the peak they come is no test here, timed among other work)
        assert result.peak_share(row) == pytest.approx(
            row.macs / (row.ms * 1e-3) / (result.vnni_peak_gmacs * 1e9))
    assert "of VNNI peak" in profile_text(result)


def test_profiled_runs_slower_than_the_model_are_named_in_one_line():
    """The fused ops inside the model add up to less than the model's latency; 1.5x it means the
    profiled runs were slowed, and the text says so (and stays silent at 1.2x)."""
    rows = [ProfileRow("fused_nn_conv2d", 1.5, 0.9, 1)]
    slowed = Profile("m", [1, 3, 8, 8], "llvm", "no-search", "ours", 2, 1, rows, 1.5, 1.6, 1.0)
    assert slowed.slowed_by() == pytest.approx(1.5)
    line = [text for text in profile_text(slowed).splitlines() if "slowed" in text]
    assert line == ["the fused ops' times add up to 1.50x the whole model's latency without the "
                    "profiler (1.500 against 1.000 ms): the profiled runs were slowed (another "
                    "process, or the host's noise); read the rows against each other, or profile "
                    "again on a quiet host"]
    level = dataclasses.replace(slowed, model_ms=1.25)
    assert level.slowed_by() is None and "slowed" not in profile_text(level)
