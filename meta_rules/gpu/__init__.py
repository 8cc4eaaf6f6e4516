"""GPU rules and the GPU verifier: ReverseInlineAfterInlining, ComputeReductionAtConsumer,
VerifyLoweredGPUCode and its checks (:mod:`.verifier`).
"""
