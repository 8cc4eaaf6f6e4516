"""``quantfuse bench`` as a library call: TVM's builds of a model against every peer runtime on
this host, interleaved rounds, one result object (:mod:`.run`), written as a table, a chart and a
markdown report (:mod:`.report`)."""
