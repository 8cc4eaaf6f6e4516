"""CPU rules and intrinsics: AMX int8 3x3 convs (the rule, its intrinsics, its postproc, the
tile facts), the layout-transform custom rule, RejectFlatLayoutRewrite. Imports only
:mod:`meta_rules.base` and :mod:`meta_rules.analysis`.
"""
