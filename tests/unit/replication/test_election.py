"""Leader election: from the ISR, the broker leading fewest first; offline rather than unclean
unless asked; nothing written when nothing changes (a new controller re-runs it safely)."""

import pytest

from twisted_broker.replication.election import (
    elect_leader, initial_state, leader_counts, preferred_leader, remove_from_isr,
)
from twisted_broker.registry.replication_paths import NO_LEADER, PartitionState

REPLICAS = (0, 1, 2)


def state(leader, isr, epoch=4):
    return PartitionState(leader, epoch, tuple(isr), controller_epoch=1)


def test_a_new_partition_is_led_by_its_first_live_replica():
    assert initial_state(REPLICAS, {1, 2}, controller_epoch=3) == PartitionState(1, 0, (1, 2), 3)
    assert initial_state(REPLICAS, set(), controller_epoch=3) == PartitionState(NO_LEADER, 0, REPLICAS, 3)


def test_the_isr_member_leading_fewest_partitions_takes_over_with_the_next_epoch():
    new = elect_leader(state(0, (0, 1, 2)), REPLICAS, live={1, 2}, leader_counts={1: 5, 2: 1}, controller_epoch=2)
    assert new == PartitionState(2, 5, (1, 2), 2)


def test_ties_go_to_assignment_order():
    new = elect_leader(state(0, (0, 2, 1)), REPLICAS, live={1, 2}, leader_counts={}, controller_epoch=2)
    assert new.leader == 1


def test_a_live_replica_outside_the_isr_never_leads_unless_unclean_election_is_on():
    offline = elect_leader(state(0, (0,)), REPLICAS, live={1, 2}, leader_counts={}, controller_epoch=2)
    assert offline == PartitionState(NO_LEADER, 5, (0,), 2)
    unclean = elect_leader(state(0, (0,)), REPLICAS, live={1, 2}, leader_counts={1: 3}, controller_epoch=2,
                           unclean=True)
    assert unclean == PartitionState(2, 5, (2,), 2)


def test_an_offline_partition_comes_back_with_its_isr_member_only():
    offline = PartitionState(NO_LEADER, 5, (0,), 2)
    assert elect_leader(offline, REPLICAS, live={1, 2}, leader_counts={}, controller_epoch=2) is None
    assert elect_leader(offline, REPLICAS, live={0, 1}, leader_counts={}, controller_epoch=3) == \
        PartitionState(0, 6, (0,), 3)


def test_controlled_shutdown_moves_leadership_to_another_isr_member_or_keeps_it():
    moved = elect_leader(state(0, (0, 1)), REPLICAS, live={0, 1, 2}, leader_counts={}, controller_epoch=2,
                         leaving={0})
    assert moved == PartitionState(1, 5, (1,), 2)
    assert elect_leader(state(0, (0,)), REPLICAS, live={0, 1, 2}, leader_counts={}, controller_epoch=2,
                        leaving={0}) is None


@pytest.mark.parametrize("live_bits, isr_bits, leader", [
    (live, isr, leader)
    for live in range(8) for isr in range(1, 8) for leader in (0, 1, 2) if isr >> leader & 1
])
def test_every_small_case_keeps_the_election_rules(live_bits, isr_bits, leader):
    live = {b for b in REPLICAS if live_bits >> b & 1}
    isr = tuple(b for b in REPLICAS if isr_bits >> b & 1)
    before = state(leader, isr)
    for unclean in (False, True):
        after = elect_leader(before, REPLICAS, live=live, leader_counts={}, controller_epoch=1, unclean=unclean)
        if leader in live:
            assert after is None  # a live leader stays
            continue
        assert after is not None
        assert after.leader_epoch == before.leader_epoch + 1  # every change fences the old leader
        if after.online:
            assert after.leader in live and after.leader in after.isr
            assert set(after.isr) <= live
            if after.leader in isr:
                assert set(after.isr) == set(isr) & live
            else:
                assert unclean and not set(isr) & live and after.isr == (after.leader,)
        else:
            assert not set(isr) & live and (not unclean or not live)
            assert after.isr == isr  # kept, so a member coming back may lead cleanly
        # running it again on its own result changes nothing more
        again = elect_leader(after, REPLICAS, live=live, leader_counts={}, controller_epoch=1, unclean=unclean)
        assert again is None


def test_a_gone_follower_leaves_the_isr_and_the_leader_is_not_removed_this_way():
    assert remove_from_isr(state(0, (0, 1, 2)), 2, controller_epoch=3) == PartitionState(0, 4, (0, 1), 3)
    assert remove_from_isr(state(0, (0, 1)), 0, controller_epoch=3) is None
    assert remove_from_isr(state(0, (0, 1)), 2, controller_epoch=3) is None


def test_preferred_election_only_moves_to_a_live_in_sync_first_replica():
    assert preferred_leader(state(1, (0, 1)), REPLICAS, live={0, 1}, controller_epoch=2) == \
        PartitionState(0, 5, (0, 1), 2)
    assert preferred_leader(state(1, (1, 2)), REPLICAS, live={0, 1, 2}, controller_epoch=2) is None
    assert preferred_leader(state(1, (0, 1)), REPLICAS, live={1}, controller_epoch=2) is None
    assert preferred_leader(state(0, (0, 1)), REPLICAS, live={0, 1}, controller_epoch=2) is None


def test_leader_counts_skip_offline_partitions():
    states = {("t", p): s for p, s in enumerate([state(0, (0,)), state(0, (0, 1)), state(NO_LEADER, (1,))])}
    assert leader_counts(states) == {0: 2}
