"""The leader-epoch cache and truncation by epoch: after truncating, a follower's log is a
prefix of its leader's, whatever history of leaders and partial fetches came before."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twisted_broker.replication.epochs import (
    UNDEFINED_EPOCH, EpochEntry, LeaderEpochCache, Truncation, first_question, follower_truncation,
)


def cache(*pairs):
    return LeaderEpochCache([EpochEntry(e, o) for e, o in pairs])


def test_end_offset_of_an_epoch_is_the_next_epochs_start_or_the_log_end():
    c = cache((0, 0), (2, 100), (5, 180))
    assert c.end_offset_for(0, 250) == (0, 100)
    assert c.end_offset_for(1, 250) == (0, 100)  # epoch 1 never wrote here: the largest below it
    assert c.end_offset_for(2, 250) == (2, 180)
    assert c.end_offset_for(9, 250) == (5, 250)
    # Every known epoch newer than the asked one: that epoch, ending where the first starts
    # (Kafka's answer); nothing known, or the undefined epoch asked: undefined.
    assert cache((3, 40)).end_offset_for(2, 90) == (2, 40)
    assert LeaderEpochCache().end_offset_for(2, 90) == (UNDEFINED_EPOCH, -1)
    assert c.end_offset_for(UNDEFINED_EPOCH, 250) == (UNDEFINED_EPOCH, -1)


def test_an_epoch_that_wrote_nothing_is_replaced_by_the_next_at_the_same_offset():
    c = cache((0, 0), (1, 50))
    c.assign(2, 50)
    assert c.entries == (EpochEntry(0, 0), EpochEntry(2, 50))
    assert c.assign(2, 70) is False  # the current epoch again: kept as it is


@pytest.mark.parametrize("epoch, offset, kept", [
    (1, 120, [(0, 0), (1, 120)]),  # an older epoch than the latest: the newer entries go
    (3, 90, [(0, 0), (3, 90)]),  # a start before the latest's: the entries from there go
    (2, 60, [(0, 0), (2, 60)]),  # the latest epoch, starting earlier: Kafka moves its start
])
def test_an_entry_that_conflicts_with_the_latest_replaces_what_it_contradicts(epoch, offset, kept):
    # Kafka's cache does so: raising instead wedged become_leader for good after a crash left
    # the epoch file ahead of the log (issue 22, defect 2).
    c = cache((0, 0), (2, 100))
    assert c.assign(epoch, offset) is True
    assert c.entries == tuple(EpochEntry(*e) for e in kept)


def test_negative_epochs_and_offsets_are_refused():
    for epoch, offset in ((-1, 0), (0, -1)):
        with pytest.raises(ValueError):
            cache((0, 0)).assign(epoch, offset)


def test_a_cache_ahead_of_the_recovered_log_is_cut_to_its_end():
    c = cache((0, 0), (2, 100), (5, 180))
    assert c.cut_to_log_end(150) is True
    assert c.entries == (EpochEntry(0, 0), EpochEntry(2, 100))
    assert c.cut_to_log_end(150) is False  # an epoch that starts at the end may still write


def test_truncation_from_either_end():
    c = cache((0, 0), (2, 100), (5, 180))
    c.truncate_from_end(180)
    assert c.entries == (EpochEntry(0, 0), EpochEntry(2, 100))
    c.truncate_from_start(130)
    assert c.entries == (EpochEntry(2, 130),)


def test_a_fetched_range_carries_the_covering_epoch_and_those_starting_inside_it():
    c = cache((0, 0), (2, 100), (5, 180))
    assert c.entries_in(50, 190) == [EpochEntry(0, 0), EpochEntry(2, 100), EpochEntry(5, 180)]
    assert c.entries_in(100, 150) == [EpochEntry(2, 100)]


def test_checkpoint_file_round_trips_and_refuses_damage():
    c = cache((0, 0), (2, 100))
    assert c.encode() == b"0\n2\n0 0\n2 100\n"
    assert LeaderEpochCache.decode(c.encode()).entries == c.entries
    for damaged in (b"1\n0\n", b"0\n3\n0 0\n", b"0\n1\n0 x\n", b"0\n2\n3 10\n1 20\n"):
        with pytest.raises(ValueError):
            LeaderEpochCache.decode(damaged)


def test_kip_279_case_a_follower_that_led_an_epoch_the_leader_never_saw_cuts_where_they_agree():
    # follower: epoch 0 to 100 (it was leader for epoch 0 longer than the leader saw), epoch 2 to 150
    # leader: epoch 0 to 80, epoch 1 to 120, epoch 3 after
    follower, leader = cache((0, 0), (2, 100)), cache((0, 0), (1, 80), (3, 120))
    step = first_question(follower, log_end=150, high_watermark=60)
    assert step == Truncation(ask_epoch=2)
    answer = leader.end_offset_for(step.ask_epoch, 200)
    assert answer == (1, 120)
    step = follower_truncation(follower, log_end=150, high_watermark=60, leader_epoch=1, leader_end_offset=120)
    assert step == Truncation(ask_epoch=0)
    step = follower_truncation(follower, log_end=150, high_watermark=60, leader_epoch=0, leader_end_offset=80)
    assert step == Truncation(offset=80)  # not 60 (its stale high watermark) and not 100


def test_a_follower_with_no_epoch_or_an_unknown_one_falls_back_to_its_high_watermark():
    assert first_question(LeaderEpochCache(), log_end=90, high_watermark=40) == Truncation(offset=40)
    follower = cache((4, 0))
    assert follower_truncation(follower, log_end=90, high_watermark=40, leader_epoch=UNDEFINED_EPOCH,
                               leader_end_offset=-1) == Truncation(offset=40)


def test_a_follower_of_a_leader_that_lost_its_whole_log_cuts_everything():
    # The simulation's seed 604715011: every ISR member lost power; the one elected had lost
    # its whole log (its fsyncs failed) and leads epoch 5 from offset 0. The other holds epoch
    # 1 to 13369 and epoch 3 after, its high watermark at 13369. Told "no such epoch", it cut
    # at its high watermark and kept, as committed, 13369 bytes its leader never had.
    leader, follower = cache((5, 0)), cache((1, 0), (3, 13369))
    step = first_question(follower, log_end=23754, high_watermark=13369)
    assert step == Truncation(ask_epoch=3)
    epoch, end = leader.end_offset_for(step.ask_epoch, 0)
    step = follower_truncation(follower, log_end=23754, high_watermark=13369, leader_epoch=epoch,
                               leader_end_offset=end)
    assert step == Truncation(offset=0)


# -- a model of replicas: logs are lists of epoch-tagged entries, one byte each ----------------

class Replica:
    def __init__(self):
        self.log, self.cache, self.hw, self.must_truncate = [], LeaderEpochCache(), 0, True

    def truncate_against(self, leader):
        step = first_question(self.cache, log_end=len(self.log), high_watermark=self.hw)
        while step.offset is None:
            epoch, end = leader.cache.end_offset_for(step.ask_epoch, len(leader.log))
            step = follower_truncation(self.cache, log_end=len(self.log), high_watermark=self.hw,
                                       leader_epoch=epoch, leader_end_offset=end)
        del self.log[step.offset:]
        self.cache.truncate_from_end(step.offset)
        self.hw = min(self.hw, len(self.log))
        self.must_truncate = False

    def fetch_from(self, leader, count):
        start = len(self.log)
        end = min(len(leader.log), start + count)
        self.log += leader.log[start:end]
        for entry in leader.cache.entries_in(start, end):
            self.cache.assign(entry.epoch, max(entry.start_offset, 0))


actions = st.lists(st.one_of(
    st.tuples(st.just("elect"), st.integers(0, 2)),
    st.tuples(st.just("append"), st.integers(1, 5)),
    st.tuples(st.just("fetch"), st.integers(0, 2), st.integers(1, 6)),
    st.tuples(st.just("commit"), st.integers(0, 0)),
), max_size=60)


@settings(max_examples=400, deadline=None)
@given(actions)
def test_after_truncating_by_epoch_every_follower_log_is_a_prefix_of_its_leaders(history):
    replicas = [Replica() for _ in range(3)]
    leader, epoch, isr = 0, 0, {0, 1, 2}
    replicas[0].cache.assign(0, 0)
    replicas[0].must_truncate = False
    committed = []  # what every ISR member held when the high watermark passed it
    for action in history:
        if action[0] == "elect":
            # a clean election: only a replica that holds everything committed may lead
            candidate = action[1]
            if replicas[candidate].log[:len(committed)] != committed or candidate == leader:
                continue
            leader, epoch = candidate, epoch + 1
            new = replicas[leader]
            new.cache.assign(epoch, len(new.log))
            new.must_truncate = False
            for i, r in enumerate(replicas):
                if i != leader:
                    r.must_truncate = True
            isr = {leader}
        elif action[0] == "append":
            replicas[leader].log += [(epoch, len(replicas[leader].log) + i) for i in range(action[1])]
        elif action[0] == "fetch":
            follower = replicas[action[1]]
            if action[1] == leader:
                continue
            if follower.must_truncate:
                follower.truncate_against(replicas[leader])
                assert follower.log == replicas[leader].log[:len(follower.log)]
                assert follower.log[:len(committed)] == committed[:len(follower.log)]
            follower.fetch_from(replicas[leader], action[2])
            if len(follower.log) == len(replicas[leader].log):
                isr.add(action[1])
            assert follower.log == replicas[leader].log[:len(follower.log)]
        elif action[0] == "commit":
            hw = min(len(replicas[i].log) for i in isr)
            if hw > len(committed):
                committed = replicas[leader].log[:hw]
                for i in isr:
                    replicas[i].hw = max(replicas[i].hw, hw)
    assert replicas[leader].log[:len(committed)] == committed
