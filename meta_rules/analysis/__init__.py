"""Reading TIR, never changing a schedule: block relations, constant blocks, statement walks.
Imports only :mod:`meta_rules.base`.
"""
