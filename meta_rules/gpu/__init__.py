"""GPU rules and the GPU verifier: ReverseInlineAfterInlining, ComputeReductionAtConsumer,
VerifyLoweredGPUCode and its checks (:mod:`.verifier`). Imports only :mod:`meta_rules.base` and
:mod:`meta_rules.analysis`.
"""
