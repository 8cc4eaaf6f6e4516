"""benchmarks/cpu_vs_peers.py writes one section of docs/BENCHMARKS.md per host class; a run on
one host must leave the other classes' sections as their own runs wrote them (their header names
the machine, date and command of that run)."""

from benchmarks import cpu_vs_peers, markdown_report


def _result(klass: str, model: str) -> dict:
    return {"host_class": klass, "model": model}


def test_a_run_rewrites_only_its_own_host_class_section(tmp_path, monkeypatch):
    doc = tmp_path / "BENCHMARKS.md"
    monkeypatch.setattr(markdown_report, "BENCHMARKS_MD", doc)
    monkeypatch.setattr(cpu_vs_peers, "model_table", lambda r: f"table of {r['model']}\n")
    amx_section = ("<!-- begin: cpu_vs_peers_amx -->\n## old title\n\n- machine: Intel Xeon\n\n"
                   "table of resnet18\n<!-- end: cpu_vs_peers_amx -->\n")
    doc.write_text("# Benchmarks\n\n" + amx_section)
    stored = {"amx/resnet18/224": _result("amx", "resnet18"),
              "avx512_vnni/resnet18/224": _result("avx512_vnni", "resnet18"),
              "avx512_vnni/resnet50/224": _result("avx512_vnni", "resnet50")}

    cpu_vs_peers.render(stored, ["avx512_vnni"])

    text = doc.read_text()
    assert amx_section in text  # untouched, header and all
    vnni = text[text.index("<!-- begin: cpu_vs_peers_avx512_vnni -->"):]
    assert "table of resnet18" in vnni and "table of resnet50" in vnni
    assert "AVX-512 VNNI hosts" in vnni


def test_a_class_without_results_gets_no_empty_section(tmp_path, monkeypatch):
    doc = tmp_path / "BENCHMARKS.md"
    monkeypatch.setattr(markdown_report, "BENCHMARKS_MD", doc)
    monkeypatch.setattr(cpu_vs_peers, "model_table", lambda r: f"table of {r['model']}\n")
    doc.write_text("# Benchmarks\n")
    cpu_vs_peers.render({"amx/resnet18/224": _result("amx", "resnet18")}, ["avx2"])
    assert doc.read_text() == "# Benchmarks\n"


def test_the_whole_model_check_is_said_and_which_build_the_tuned_row_is():
    kept = cpu_vs_peers.whole_model_sentence(
        {"tuned_ms": 4.77, "no_search_ms": 4.82, "ratio": 0.988, "uses_no_search": False})
    replaced = cpu_vs_peers.whole_model_sentence(
        {"tuned_ms": 1.81, "no_search_ms": 1.68, "ratio": 1.075, "uses_no_search": True})
    assert "4.770 ms" in kept and "0.988x" in kept and "tuned build was kept" in kept
    assert "1.075x" in replaced and "the tuned row is the no-search build" in replaced
    assert cpu_vs_peers.whole_model_sentence(None) == ""


def test_a_rerun_replaces_its_cpus_result_and_another_cpu_of_the_class_is_kept_beside_it(tmp_path):
    path = tmp_path / "cpu_vs_peers.json"
    amd_old = {**_result("avx512_vnni", "resnet18"), "machine": "AMD EPYC, 2 logical CPUs", "ms": 1}
    cpu_vs_peers.keep_result(path, amd_old, 224)
    intel = {**_result("avx512_vnni", "resnet18"),
             "machine": "Intel(R) Xeon(R) Processor (family 6 model 207), 2 logical CPUs", "ms": 2}
    intel_key = cpu_vs_peers.keep_result(path, intel, 224)
    other_size = {**amd_old, "ms": 3}
    cpu_vs_peers.keep_result(path, other_size, 128)
    amd_new = {**_result("avx512_vnni", "resnet18"),
               "machine": "AMD EPYC (family 25 model 17), 2 logical CPUs", "ms": 4}
    amd_key = cpu_vs_peers.keep_result(path, amd_new, 224)  # the description without the
    # family and model number (stored before it had one) is the same CPU: replaced

    stored = markdown_report.load_results(path)
    assert sorted(stored) == sorted([intel_key, amd_key, "avx512_vnni/resnet18/128/AMD EPYC"])
    assert stored[amd_key]["ms"] == 4 and stored[intel_key]["ms"] == 2
    assert amd_key == "avx512_vnni/resnet18/224/AMD EPYC (family 25 model 17)"
    # two CPUs with one name but other family/model numbers are two CPUs
    assert not cpu_vs_peers.same_cpu("Intel Xeon (family 6 model 143)", "Intel Xeon (family 6 model 207)")
