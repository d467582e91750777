"""Leader election: from the ISR, the broker leading fewest first; offline rather than unclean
unless asked; nothing written when nothing changes (a new controller re-runs it safely)."""

from dataclasses import replace

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


# -- broker epochs (KIP-380): a replica registered anew since the state was written --------

from twisted_broker.replication.election import next_state  # noqa: E402


def test_a_restarted_in_sync_follower_is_not_a_candidate_while_an_unrestarted_one_lives():
    # Broker 1 leads nothing and comes first in the assignment: without the rule it would win.
    new = elect_leader(state(2, (2, 1, 0)), (2, 1, 0), live={0, 1}, leader_counts={0: 3}, controller_epoch=2,
                       restarted={1})
    assert new == PartitionState(0, 5, (0,), 2)


def test_with_only_restarted_followers_left_the_partition_goes_offline_without_them():
    new = elect_leader(state(2, (2, 1)), (2, 1, 0), live={0, 1}, leader_counts={}, controller_epoch=2,
                       restarted={1})
    assert new == PartitionState(NO_LEADER, 5, (2,), 2)  # 1's creatorId is not recorded: dropped
    # Once offline, its ISR holds those in sync when it went offline: one restarted since
    # leads once it published its log end (a cluster restarted whole comes back this way).
    assert elect_leader(PartitionState(NO_LEADER, 5, (2,), 1), (2, 1, 0), live={1, 2}, leader_counts={},
                        controller_epoch=2, restarted={2}, ends={2: (4, 0)}) == PartitionState(2, 6, (2,), 2)


def test_a_restarted_leader_is_re_elected_and_leads_on_only_when_no_other_isr_member_may_come_back():
    moved = elect_leader(state(0, (0, 1)), REPLICAS, live={0, 1}, leader_counts={}, controller_epoch=2, restarted={0})
    assert moved == PartitionState(1, 5, (1,), 2)
    alone = elect_leader(state(0, (0,)), REPLICAS, live={0, 1}, leader_counts={}, controller_epoch=2, restarted={0},
                         ends={0: (4, 100)})
    assert alone == PartitionState(0, 5, (0,), 2)  # a new epoch fences what its previous run answered
    both = elect_leader(state(0, (0, 1)), REPLICAS, live={0, 1}, leader_counts={}, controller_epoch=2,
                        restarted={0, 1}, ends={0: (4, 100), 1: (4, 100)})
    assert both == PartitionState(0, 5, (0, 1), 2)  # the follower restarted too; it is next_state's


def test_a_restarted_leader_waits_for_an_isr_member_that_did_not_restart_and_is_away():
    # Simulation seed 570033040: leader 2 lost power and came back before the controller
    # noticed; follower 1, which held what 2 lost, was away (its session expired, its process
    # lived on). Leading on would have lost acknowledged writes: offline until 1 is back.
    waiting = next_state(state(2, (2, 1)), REPLICAS, live={2}, leader_counts={}, controller_epoch=2, restarted={2})
    assert waiting == PartitionState(NO_LEADER, 5, (1,), 2)
    assert next_state(waiting, REPLICAS, live={1, 2}, leader_counts={}, controller_epoch=2) == \
        PartitionState(1, 6, (1,), 2)
    # One whose log failed there is not waited for: the restarted leader leads on, once it
    # published its log end.
    assert next_state(state(2, (2, 1)), REPLICAS, live={1, 2}, leader_counts={}, controller_epoch=2,
                      restarted={2}, failed={1}, ends={1: (4, 900), 2: (4, 50)}) == PartitionState(2, 5, (2,), 2)


def test_next_state_drops_restarted_and_leaving_followers_and_keeps_the_leader_and_epoch():
    new = next_state(state(0, (0, 1, 2)), REPLICAS, live={0, 1, 2}, leader_counts={}, controller_epoch=2,
                     restarted={1})
    assert new == PartitionState(0, 4, (0, 2), 2)
    assert next_state(state(0, (0, 1, 2)), REPLICAS, live={0, 1}, leader_counts={}, controller_epoch=2,
                      leaving={2}) == PartitionState(0, 4, (0, 1), 2)
    assert next_state(state(0, (0, 1, 2)), REPLICAS, live={0, 1, 2}, leader_counts={}, controller_epoch=2) is None


def test_a_gone_follower_of_a_leader_that_stays_is_left_to_the_leader():
    # Seed 572942149: the leader's registration outlived its run (it restarted, losing its
    # unflushed tail, within its session timeout); the other member's session expired. Taken
    # out by the controller, it would have left the restarted leader alone in the ISR, and
    # electable once its registration went; kept, the partition waits for it.
    assert next_state(state(0, (0, 1)), REPLICAS, live={0}, leader_counts={}, controller_epoch=2) is None
    offline = next_state(state(0, (0, 1)), REPLICAS, live=set(), leader_counts={}, controller_epoch=2)
    assert offline.leader == -1 and offline.isr == (0, 1)
    back = next_state(offline, REPLICAS, live={0}, leader_counts={}, controller_epoch=2, restarted={0})
    assert back is None  # the restarted one does not lead while the other may come back whole
    # After an election, the gone ones are out of the new epoch's ISR.
    assert next_state(state(0, (0, 1, 2)), REPLICAS, live={1}, leader_counts={}, controller_epoch=2) == \
        PartitionState(1, 5, (1,), 2)


def test_next_state_of_a_restarted_lone_leader_bumps_the_epoch_and_drops_its_restarted_follower():
    # Both restarted (the whole rack lost power), with logs as long: the leader leads on.
    assert next_state(state(0, (0, 1)), REPLICAS, live={0, 1}, leader_counts={}, controller_epoch=2,
                      restarted={0, 1}, ends={0: (4, 10), 1: (4, 10)}) == PartitionState(0, 5, (0,), 2)


def test_a_new_partition_gets_its_first_state_from_next_state():
    first = next_state(None, REPLICAS, live={1, 2}, leader_counts={}, controller_epoch=3)
    assert first == PartitionState(1, 0, (1, 2), 3)


# -- a failed log (KIP-112): the controller passes ``live`` without the brokers listing it ----

def test_a_leader_whose_log_failed_is_replaced_and_leaves_the_isr():
    # Broker 0 is alive but lists this partition offline: it is not live *for this partition*.
    new = next_state(state(0, (0, 1, 2)), REPLICAS, live={1, 2}, leader_counts={1: 1}, controller_epoch=2)
    assert new == PartitionState(2, 5, (1, 2), 2)


def test_a_failed_log_alone_in_the_isr_takes_the_partition_offline_and_is_never_elected_unclean():
    offline = next_state(state(0, (0,)), REPLICAS, live={1}, leader_counts={}, controller_epoch=2)
    assert offline == PartitionState(NO_LEADER, 5, (0,), 2)
    unclean = next_state(state(0, (0,)), REPLICAS, live={1}, leader_counts={}, controller_epoch=2, unclean=True)
    assert unclean == PartitionState(1, 5, (1,), 2)


# -- ISR members' creatorIds: a restart is a new process, not a renewed session ------------

from twisted_broker.replication.election import with_isr_sessions  # noqa: E402


def test_isr_sessions_keep_each_members_creator_id_from_when_it_joined():
    old = PartitionState(0, 3, (0, 1), 1, "c0", ((0, "c0"), (1, "c1")))
    now = {0: "c0", 1: "c1-restarted", 2: "c2"}
    grown = with_isr_sessions(replace(old, isr=(0, 1, 2)), old, now)
    assert grown.isr_sessions == ((0, "c0"), (1, "c1"), (2, "c2"))  # 1's is kept: it joined as c1
    elected = with_isr_sessions(PartitionState(1, 4, (1, 2), 1), grown, now)
    assert elected.isr_sessions == ((1, "c1-restarted"), (2, "c2"))  # a new epoch's leader is the reference
    assert PartitionState.decode(elected.encode()) == elected


def test_an_offline_partition_waits_for_a_member_that_did_not_restart():
    offline = PartitionState(NO_LEADER, 5, (0, 1), 1)
    # 0 restarted (a new process); 1 did not and is away (its session expired): wait for 1.
    assert elect_leader(offline, (0, 1, 2), live={0, 2}, leader_counts={}, controller_epoch=2,
                        restarted={0}) is None
    assert elect_leader(offline, (0, 1, 2), live={0, 1, 2}, leader_counts={}, controller_epoch=2,
                        restarted={0}) == PartitionState(1, 6, (1,), 2)
    # Every member restarted (the cluster restarted whole): the longest published log leads.
    assert elect_leader(offline, (0, 1, 2), live={0, 1}, leader_counts={}, controller_epoch=2,
                        restarted={0, 1}, ends={0: (3, 10), 1: (3, 12)}) == PartitionState(1, 6, (0, 1), 2)


# -- every ISR member restarted: the longest published log leads (KIP-966 in spirit) ---------

def recorded(leader, isr, epoch=4):
    """A state as this version writes it: every ISR member's creatorId recorded."""
    return PartitionState(leader, epoch, tuple(isr), 1, f"c{leader}-old" if leader >= 0 else "",
                          tuple((b, f"c{b}-old") for b in sorted(isr)))


def test_when_every_isr_member_restarted_the_longest_log_leads_not_the_first_back():
    # Simulation seed 606520049: both members of the offline ISR restarted; 0 leads fewer
    # partitions and comes first, but lost the unflushed tail that 1 kept on disk.
    offline = replace(recorded(1, (1, 0)), leader=NO_LEADER)
    waiting = next_state(offline, REPLICAS, live={0, 1, 2}, leader_counts={1: 1}, controller_epoch=2,
                         restarted={0, 1}, ends={1: (3, 14024)})
    assert waiting is None  # 0 is registered but has not published yet: wait for it
    elected = next_state(offline, REPLICAS, live={0, 1, 2}, leader_counts={1: 1}, controller_epoch=2,
                         restarted={0, 1}, ends={0: (3, 13903), 1: (3, 14024)})
    assert (elected.leader, elected.leader_epoch, elected.isr) == (1, 5, (1,))
    # The last leader epoch counts first: a longer log of an older epoch is not more complete.
    newer = next_state(offline, REPLICAS, live={0, 1}, leader_counts={}, controller_epoch=2, restarted={0, 1},
                       ends={0: (4, 100), 1: (3, 14024)})
    assert newer.leader == 0


def test_a_restarted_leader_with_an_isr_member_away_goes_offline_keeping_both():
    # Simulation seed 607391089: leader 1 restarted (whole); 0 was away, restarted too and not
    # registered yet (it had lost its tail). Dropping 1 left 0 alone in the ISR, and elected.
    offline = next_state(recorded(1, (1, 0)), REPLICAS, live={1, 2}, leader_counts={}, controller_epoch=2,
                         restarted={1}, ends={1: (4, 6566)})
    assert (offline.leader, offline.leader_epoch, offline.isr) == (NO_LEADER, 5, (1, 0))
    back = next_state(offline, REPLICAS, live={0, 1, 2}, leader_counts={}, controller_epoch=2, restarted={0, 1},
                      ends={0: (4, 5963), 1: (4, 6566)})
    assert (back.leader, back.leader_epoch, back.isr) == (1, 6, (1,))
    # Had 0 come back without restarting (its session only expired), it would lead.
    assert next_state(offline, REPLICAS, live={0, 1, 2}, leader_counts={}, controller_epoch=2,
                      restarted={1}).leader == 0


def test_a_restarted_leader_whose_isr_all_restarted_waits_offline_for_their_ends():
    waiting = next_state(recorded(0, (0, 1)), REPLICAS, live={0, 1}, leader_counts={}, controller_epoch=2,
                         restarted={0, 1}, ends={0: (4, 10)})
    assert (waiting.leader, waiting.leader_epoch, waiting.isr) == (NO_LEADER, 5, (0, 1))
    # A failed log is neither waited for nor elected; with every member failed, nobody leads.
    assert next_state(waiting, REPLICAS, live={0, 1}, leader_counts={}, controller_epoch=2, restarted={0},
                      failed={1}, ends={0: (4, 10), 1: (4, 99)}).leader == 0
    assert next_state(waiting, REPLICAS, live={0, 1}, leader_counts={}, controller_epoch=2, failed={0, 1},
                      ends={0: (4, 10), 1: (4, 99)}) is None


@pytest.mark.parametrize("ends_bits", range(16))
def test_every_restarted_case_elects_the_longest_member_or_waits(ends_bits):
    ends_choices = [(3, 5), (4, 1), (4, 7)]
    isr, live = (0, 1, 2), {0, 1, 2}
    published = {b: ends_choices[(ends_bits >> b) % 3] for b in isr if ends_bits >> b & 1 or ends_bits > 7}
    for base in (recorded(0, isr), replace(recorded(0, isr), leader=NO_LEADER)):
        after = next_state(base, REPLICAS, live=live, leader_counts={}, controller_epoch=2, restarted=set(isr),
                           ends=published)
        if len(published) < len(isr):
            assert after is None or (not after.online and set(after.isr) == set(isr))
            continue
        assert after.online and published[after.leader] == max(published.values())
        assert after.leader_epoch == base.leader_epoch + 1 and after.isr == (after.leader,)
