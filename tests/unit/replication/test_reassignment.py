"""Reassignment steps: copy to the new replicas before dropping any old one; never lead from
outside the ISR."""

from twisted_broker.registry.replication_paths import PartitionState
from twisted_broker.replication.reassignment import WAIT, ReassignmentStep, reassignment_step


def state(leader, isr, epoch=3):
    return PartitionState(leader, epoch, tuple(isr), controller_epoch=1)


def test_a_move_widens_waits_for_the_copy_then_narrows_with_a_new_leader():
    current, target = (0, 1), (1, 2)
    assert reassignment_step(current, target, state(0, (0, 1)), controller_epoch=2) == ReassignmentStep(assignment=(0, 1, 2))
    widened = (0, 1, 2)
    assert reassignment_step(widened, target, state(0, (0, 1)), controller_epoch=2) is WAIT
    step = reassignment_step(widened, target, state(0, (0, 1, 2)), controller_epoch=2)
    assert step == ReassignmentStep(assignment=(1, 2), state=PartitionState(1, 4, (1, 2), 2), done=True)


def test_a_leader_kept_by_the_move_keeps_its_epoch_and_only_the_isr_narrows():
    step = reassignment_step((0, 1, 2), (0, 2), state(0, (0, 1, 2)), controller_epoch=2)
    assert step == ReassignmentStep(assignment=(0, 2), state=PartitionState(0, 3, (0, 2), 2), done=True)


def test_a_reorder_needs_no_copy_and_no_new_state():
    assert reassignment_step((0, 1), (1, 0), state(0, (0, 1)), controller_epoch=2) == \
        ReassignmentStep(assignment=(1, 0), done=True)
    assert reassignment_step((1, 0), (1, 0), state(0, (0, 1)), controller_epoch=2) == ReassignmentStep(done=True)


def test_no_step_before_the_partition_has_a_state():
    assert reassignment_step((0, 1, 2), (1, 2), None, controller_epoch=2) is WAIT
