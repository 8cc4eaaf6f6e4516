"""Rules for every target: the custom rule ``compute_inline``, InlineConstantBlocks, the
resilient space generator, and TVM's tensor intrinsics registered per target. Imports only
:mod:`meta_rules.base` and :mod:`meta_rules.analysis`.
"""
