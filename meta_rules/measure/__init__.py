"""What the rule sets do to a model: the fusion measure (global-memory intermediates per design
space).
"""
