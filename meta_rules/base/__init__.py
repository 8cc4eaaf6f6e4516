"""What quantfuse's rules share: custom-rule registration and the ``schedule_rule`` annotation
(:mod:`.custom_rules`), TVM errors as one line (:mod:`.tvm_errors`), the structural rules' base
class and schedule calls without type checks.
"""
