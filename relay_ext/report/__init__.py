"""Step 5 of the data path: from compiled modules and design spaces to numbers people read.

* :mod:`.fusion` -- the static fusion report (global-memory intermediates per task and variant);
* :mod:`.accuracy` -- how far TVM's output is from the reference runtime's, in quantization steps;
* :mod:`.latency` -- TVM tuned vs untuned vs the reference runtime, timed in interleaved rounds,
  and :mod:`.latency_report` -- its ``report.md`` and chart;
* :mod:`.tables` -- the one text/Markdown table writer, and the machine description.
"""
