"""Replica assignment of new topics: spread leaders and followers, refuse what cannot be placed."""

import re
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.replication.assignment import AssignmentError, assign_replicas, check_reassignment


def test_three_brokers_three_partitions_factor_three_lead_one_each_and_hold_all():
    result = assign_replicas([2, 0, 1], partitions=3, replication_factor=3)
    assert result == {0: (0, 1, 2), 1: (1, 2, 0), 2: (2, 0, 1)}


@given(brokers=st.sets(st.integers(0, 50), min_size=1, max_size=8), data=st.data())
def test_every_partition_gets_distinct_live_replicas_and_leaders_are_spread(brokers, data):
    factor = data.draw(st.integers(1, len(brokers)))
    partitions = data.draw(st.integers(1, 40))
    start = data.draw(st.integers(0, 100))
    result = assign_replicas(brokers, partitions=partitions, replication_factor=factor, start=start)
    assert sorted(result) == list(range(partitions))
    for replicas in result.values():
        assert len(replicas) == factor == len(set(replicas))
        assert set(replicas) <= brokers
    leaders = Counter(replicas[0] for replicas in result.values())
    # round robin: no broker leads more than one partition more than another
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1
    replicas_held = Counter(b for replicas in result.values() for b in replicas)
    held = [replicas_held.get(b, 0) for b in brokers]
    assert max(held) - min(held) <= 2 * factor


@given(n=st.integers(1, 6), rounds=st.integers(1, 3), data=st.data())
def test_whole_rounds_of_follower_shifts_give_every_broker_the_same_number_of_replicas(n, rounds, data):
    factor = data.draw(st.integers(1, n))
    result = assign_replicas(range(n), partitions=rounds * n * max(n - 1, 1), replication_factor=factor)
    held = Counter(b for replicas in result.values() for b in replicas)
    assert len(set(held.values())) == 1 and len(held) == n


@given(n=st.integers(2, 8), rounds=st.integers(1, 3), data=st.data())
def test_whole_rounds_of_partitions_balance_replicas_whatever_the_start_and_shift(n, rounds, data):
    # Issue 23: 100 topics of 10 partitions on 5 brokers, each at a random start, held 474 to
    # 686 replicas a broker (the shift changed in the middle of a round).
    factor = data.draw(st.integers(1, n))
    start, shift = data.draw(st.integers(0, 100)), data.draw(st.integers(0, 100))
    result = assign_replicas(range(n), partitions=rounds * n, replication_factor=factor, start=start, shift=shift)
    held = Counter(b for replicas in result.values() for b in replicas)
    assert set(held.values()) == {rounds * factor} and len(held) == n


def test_many_small_topics_at_random_starts_spread_replicas_evenly():
    import random
    rng = random.Random(23)
    held = Counter()
    for _ in range(100):
        result = assign_replicas(range(5), partitions=10, replication_factor=3, start=rng.randrange(5),
                                 shift=rng.randrange(5))
        held.update(b for replicas in result.values() for b in replicas)
    assert set(held.values()) == {600}


def test_followers_of_one_broker_vary_between_rounds_so_its_load_spreads_when_it_dies():
    result = assign_replicas([0, 1, 2, 3], partitions=8, replication_factor=2)
    followers_of_0 = {replicas[1] for replicas in result.values() if replicas[0] == 0}
    assert len(followers_of_0) == 2


@pytest.mark.parametrize("kwargs, message", [
    (dict(partitions=1, replication_factor=4), "larger than the 3 live broker(s) [0, 1, 2]"),
    (dict(partitions=1, replication_factor=0), "must be at least 1"),
    (dict(partitions=0, replication_factor=1), "at least 1 partition"),
])
def test_impossible_requests_are_refused_in_one_line(kwargs, message):
    with pytest.raises(AssignmentError, match=re.escape(message)):
        assign_replicas([0, 1, 2], **kwargs)


def test_a_reassignment_must_name_registered_distinct_brokers():
    assert check_reassignment([2, 0], [0, 1, 2]) == (2, 0)
    with pytest.raises(AssignmentError, match=r"broker\(s\) \[7\] are not registered"):
        check_reassignment([0, 7], [0, 1, 2])
    with pytest.raises(AssignmentError, match="twice"):
        check_reassignment([1, 1], [0, 1, 2])
    with pytest.raises(AssignmentError, match="at least one replica"):
        check_reassignment([], [0, 1, 2])
