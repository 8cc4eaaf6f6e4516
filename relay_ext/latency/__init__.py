"""TVM's builds of a model against every peer runtime on this CPU, timed in interleaved rounds:
what ``quantfuse bench`` prints, as a library call.

    result = relay_ext.bench("tiny_resnet", records="work")    # a BenchResult
    print(relay_ext.latency.report.text_report(result))         # what 'quantfuse bench' prints
    result.to_dict()                                            # what 'quantfuse bench --json' prints

* :mod:`.run` -- :func:`~relay_ext.latency.run.bench` (load, open the records, build, prepare the
  peers, time, write the report) and :func:`~relay_ext.latency.run.measure_latency`;
* :mod:`.result` -- :class:`~relay_ext.latency.result.BenchResult` and the row labels;
* :mod:`.report` -- the printed text, ``report.md`` and the chart.
"""
