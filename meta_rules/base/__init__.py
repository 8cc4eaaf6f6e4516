"""What quantfuse's rules share: custom-rule registration and the ``schedule_rule`` annotation
(:mod:`.custom_rules`), TVM errors as one line (:mod:`.tvm_errors`), where a rule goes in a rule
set (:mod:`.placement`), the structural rules' base class and schedule calls without type checks.
Imports nothing else of :mod:`meta_rules`.
"""
