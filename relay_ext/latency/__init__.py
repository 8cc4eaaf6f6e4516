"""TVM's builds of a model against every peer runtime on this CPU, timed in interleaved rounds:
what ``quantfuse bench`` prints, as a library call; and where the time goes inside one build,
fused op by fused op (``quantfuse profile``).

    result = relay_ext.bench("tiny_resnet", records="work")    # a BenchResult
    print(relay_ext.latency.report.text_report(result))         # what 'quantfuse bench' prints
    result.to_dict()                                            # what 'quantfuse bench --json' prints

* :mod:`.run` -- :func:`~relay_ext.latency.run.bench` (load, open the records, build, prepare the
  peers, time, write the report) and :func:`~relay_ext.latency.run.measure_latency`;
* :mod:`.result` -- :class:`~relay_ext.latency.result.BenchResult` and the row labels;
* :mod:`.report` -- the printed text, ``report.md`` and the chart;
* :mod:`.profile` -- :func:`~relay_ext.latency.profile.profile`: each fused op's time inside the
  model, OpenVINO's per-layer counters beside (:mod:`.profile_result`, :mod:`.profile_report`,
  :mod:`.layer_pairing`).

    profile = relay_ext.profile("resnet18", target="llvm -mcpu=cascadelake", png="profile.png")
"""
