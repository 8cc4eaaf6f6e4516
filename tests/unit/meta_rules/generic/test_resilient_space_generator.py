"""ResilientPostOrderApply survives MultiLevelTilingTensorCore's ScheduleError."""

import pytest
import tvm
from tvm import meta_schedule as ms

import meta_rules
from meta_rules.generic.resilient_space_generator import (
    DesignSpaceGenerationError,
    ResilientPostOrderApply,
    drop_candidates,
)
from meta_rules.testing.te_workloads import quantized_conv2d_nhwc

A100 = "nvidia/nvidia-a100"
# Found by searching rand_states 0..39 on TE int8 1x1 convs: with TVM's stock cuda-tensorcore rules
# this task's design-space generation raises "The scope tir.Block#0 is not a stage pipeline"
# (compute-at inside MultiLevelTilingTensorCore) for rand_state 35.
FAILING_RAND_STATE = 35


def _task():
    return quantized_conv2d_nhwc(1, 14, 14, 96, 576, 1)


def _resilient(variant="upstream", retry_seeds=8):
    return ResilientPostOrderApply(meta_rules.schedule_rules(A100, variant),
                                   meta_rules.postprocs(A100, variant),
                                   meta_rules.mutator_probs(A100), retry_seeds=retry_seeds)


@pytest.mark.parametrize("variant", ["upstream", "ours"])
def test_stock_post_order_apply_fails_for_this_rand_state(variant):
    context = ms.TuneContext(mod=_task(), target=A100,
                             space_generator=meta_rules.space_generator(A100, variant),
                             rand_state=FAILING_RAND_STATE)
    with pytest.raises(tvm.TVMError, match="not a stage pipeline"):
        context.generate_design_space()


def test_retries_with_another_rand_state():
    space = _resilient()
    context = ms.TuneContext(mod=_task(), target=A100, space_generator=space,
                             rand_state=FAILING_RAND_STATE)
    spaces = context.generate_design_space()
    assert len(spaces) >= 1
    assert space.outcome.status == "reseeded"
    assert space.outcome.rand_state != FAILING_RAND_STATE
    assert len(space.outcome.failures) >= 1
    assert "not a stage pipeline" in space.outcome.failures[0]
    # tensor-core tiling still made it into the spaces
    assert any("wmma" in str(s.trace) for s in spaces)


def test_drops_the_tensor_core_rule_when_no_retry_is_left():
    space = _resilient(retry_seeds=0)
    context = ms.TuneContext(mod=_task(), target=A100, space_generator=space,
                             rand_state=FAILING_RAND_STATE)
    spaces = context.generate_design_space()
    assert len(spaces) >= 1
    assert space.outcome.status == "rule dropped"
    assert space.outcome.dropped_rule == "MultiLevelTilingTensorCore"


def test_clone_reuses_the_configuration_that_worked():
    space = _resilient()
    context = ms.TuneContext(mod=_task(), target=A100, space_generator=space,
                             rand_state=FAILING_RAND_STATE)
    first = context.generate_design_space()
    clone = context.clone()  # clones the space generator, as MetaSchedule does
    again = clone.generate_design_space()
    assert [str(s.trace) for s in again] == [str(s.trace) for s in first]


def test_tensor_core_rules_are_dropped_first_and_inliners_never():
    rules = meta_rules.schedule_rules(A100, "ours")
    order = drop_candidates(rules)
    assert isinstance(rules[order[0]], ms.schedule_rule.MultiLevelTilingTensorCore)
    assert 0 not in order and 1 not in order  # ApplyCustomRule, InlineConstantBlocks


def test_gives_up_with_a_clear_error_when_nothing_works():
    # A rule that always raises inside generation: no seed and no single dropped rule helps
    # when two such rules are present.
    from tvm.meta_schedule.schedule_rule import PyScheduleRule
    from tvm.meta_schedule.utils import derived_object

    @derived_object
    class AlwaysFails(PyScheduleRule):
        def _initialize_with_tune_context(self, context):
            pass

        def apply(self, sch, block):
            sch.compute_inline(sch.get_block("no_such_block"))
            return [sch]

        def clone(self):
            return AlwaysFails()

    space = ResilientPostOrderApply([AlwaysFails(), AlwaysFails()], [], {}, retry_seeds=2)
    context = ms.TuneContext(mod=_task(), target="llvm -num-cores 2", space_generator=space,
                             rand_state=1)
    with pytest.raises(DesignSpaceGenerationError, match="no design space after"):
        context.generate_design_space()
    assert space.outcome.status == "failed"
    assert len(space.outcome.failures) == 3 + 2  # 3 random states, then each rule left out
