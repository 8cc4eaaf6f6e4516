"""Workloads and candidate sampling for tests and benchmarks (as TVM keeps its own under
``meta_schedule/testing``): nothing in the library imports this package.

* :mod:`.te_workloads` -- small int8 TE workloads (conv2d NHWC + requantize, dense + requantize);
* :mod:`.fusion_workloads` -- the epilogues the GPU fusion rules act on (residual add, pool + cast);
* :mod:`.candidate_sampling` -- GPU candidates drawn the way MetaSchedule's search draws them.
"""
