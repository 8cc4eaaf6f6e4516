"""A Relay module compiled for a target: the one build entry point, ``relay_ext.compile``
(:mod:`.entry`), with the schedules bench's rows are made of -- TVM's default (:mod:`.default`),
the rules' designs without search, and tuned records with the per-task choice and the whole-model
check (:mod:`.whole_model`)."""

from relay_ext.build.entry import SCHEDULES, Compiled, compile  # pylint: disable=redefined-builtin

__all__ = ["SCHEDULES", "Compiled", "compile"]
