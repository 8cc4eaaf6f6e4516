"""A Relay module compiled for a target: the one build entry point, ``relay_ext.compile``, with the
schedules bench's rows are made of (TVM's default, the rules' designs without search, tuned
records with the per-task choice and the whole-model check)."""
