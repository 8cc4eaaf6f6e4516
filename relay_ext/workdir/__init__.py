"""The work dir a tune writes and bench, export and the build read: its files and lock, what it was
tuned for, its database repaired and opened (:mod:`.files`), record writes checked
(:mod:`.record_writes`), records grouped per workload (:mod:`.records`) and the per-task timings
the schedule choice keeps (:mod:`.timing_cache`)."""
