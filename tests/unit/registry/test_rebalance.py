"""Kafka 0.7.2's range assignment (spec 5.5), as registry/rebalance.py computes it."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.registry import rebalance


def test_spec_example_five_partitions_two_threads_split_three_and_two():
    partitions = ["0-0", "0-1", "0-2", "0-3", "0-4"]
    assert rebalance.assign(["g_b-0", "g_a-0"], partitions) == {
        "g_a-0": ["0-0", "0-1", "0-2"],
        "g_b-0": ["0-3", "0-4"],
    }


def test_partitions_sort_as_strings_so_broker_10_comes_before_broker_2():
    assignment = rebalance.assign(["t-0", "t-1"], ["2-0", "2-1", "10-0", "10-1"])
    assert assignment == {"t-0": ["10-0", "10-1"], "t-1": ["2-0", "2-1"]}


def test_partitions_sort_as_strings_so_1_10_comes_before_1_2():
    partitions = rebalance.partition_names({"1": 12})
    assert partitions == ["1-0", "1-1", "1-10", "1-11", "1-2", "1-3", "1-4", "1-5", "1-6", "1-7", "1-8", "1-9"]
    assignment = rebalance.assign(["t-0", "t-1", "t-2"], partitions)
    assert assignment["t-0"] == ["1-0", "1-1", "1-10", "1-11"]


def test_threads_sort_as_strings_so_stream_10_comes_before_stream_2():
    threads = [f"g_c-{i}" for i in range(11)]
    partitions = [f"0-{p}" for p in range(11)]
    assignment = rebalance.assign(threads, partitions)
    # sorted threads: g_c-0, g_c-1, g_c-10, g_c-2, ...; sorted partitions: 0-0, 0-1, 0-10, 0-2, ...
    assert assignment["g_c-10"] == ["0-10"]
    assert assignment["g_c-2"] == ["0-2"]


def test_consumer_ids_sort_as_strings():
    assignment = rebalance.assign(["g_c9-0", "g_c10-0"], ["0-0", "0-1", "0-2"])
    assert assignment == {"g_c10-0": ["0-0", "0-1"], "g_c9-0": ["0-2"]}


def test_more_threads_than_partitions_leaves_the_last_threads_empty():
    assignment = rebalance.assign(["t-0", "t-1", "t-2", "t-3", "t-4"], ["0-0", "0-1", "1-0"])
    assert assignment == {"t-0": ["0-0"], "t-1": ["0-1"], "t-2": ["1-0"], "t-3": [], "t-4": []}


def test_no_partitions_assigns_nothing():
    assert rebalance.assign(["t-0", "t-1"], []) == {"t-0": [], "t-1": []}


def test_no_threads_is_an_error():
    with pytest.raises(ValueError):
        rebalance.assign([], ["0-0"])


def test_three_consumers_over_eight_partitions_on_two_brokers_by_hand():
    # Brokers 0 and 1 with 4 partitions each; consumers a, b, c with one stream each.
    # P (string order) = 0-0 0-1 0-2 0-3 1-0 1-1 1-2 1-3; |P| = 8, |C| = 3: q = 2, r = 2.
    # i=0: start 0*2 + min(0,2) = 0, count 3 -> 0-0 0-1 0-2
    # i=1: start 1*2 + min(1,2) = 3, count 3 -> 0-3 1-0 1-1
    # i=2: start 2*2 + min(2,2) = 6, count 2 -> 1-2 1-3
    partitions = rebalance.partition_names({"0": 4, "1": 4})
    consumers = rebalance.consumers_per_topic({"g_c": {"t": 1}, "g_a": {"t": 1}, "g_b": {"t": 1}})
    assert consumers == {"t": ["g_a-0", "g_b-0", "g_c-0"]}
    assert rebalance.assign(consumers["t"], partitions) == {
        "g_a-0": ["0-0", "0-1", "0-2"],
        "g_b-0": ["0-3", "1-0", "1-1"],
        "g_c-0": ["1-2", "1-3"],
    }


def test_three_consumers_over_brokers_2_and_10_follow_the_string_orders():
    # The integration test's cluster: P = 10-0 10-1 10-2 10-3 2-0 2-1 2-2 2-3;
    # C = g_c10-0 g_c2-0 g_c9-0 (string order, not 2 < 9 < 10).
    partitions = rebalance.partition_names({"2": 4, "10": 4})
    consumers = rebalance.consumers_per_topic({"g_c2": {"t": 1}, "g_c9": {"t": 1}, "g_c10": {"t": 1}})
    assert rebalance.assign(consumers["t"], partitions) == {
        "g_c10-0": ["10-0", "10-1", "10-2"],
        "g_c2-0": ["10-3", "2-0", "2-1"],
        "g_c9-0": ["2-2", "2-3"],
    }


def test_partition_range_formula():
    # q = 7 // 3 = 2, r = 1: thread 0 takes 3 from 0, thread 1 takes 2 from 3, thread 2 from 5.
    assert [rebalance.partition_range(i, 3, 7) for i in range(3)] == [range(0, 3), range(3, 5), range(5, 7)]
    with pytest.raises(ValueError):
        rebalance.partition_range(3, 3, 7)


@given(threads=st.integers(1, 40), partitions=st.integers(0, 200))
def test_ranges_cover_every_partition_once_in_order_and_differ_by_at_most_one(threads, partitions):
    ranges = [rebalance.partition_range(i, threads, partitions) for i in range(threads)]
    assert [p for r in ranges for p in r] == list(range(partitions))
    sizes = [len(r) for r in ranges]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the first r threads take the extra one


def test_thread_ids_per_topic_are_consumer_id_dash_index():
    assert rebalance.thread_ids_per_topic("g_h-1-abc", {"t1": 2, "t2": 1}) == {
        "t1": ["g_h-1-abc-0", "g_h-1-abc-1"], "t2": ["g_h-1-abc-0"]}


def test_consumers_per_topic_counts_only_subscribers_of_each_topic():
    consumers = rebalance.consumers_per_topic({"g_a": {"t1": 2}, "g_b": {"t1": 1, "t2": 1}})
    assert consumers == {"t1": ["g_a-0", "g_a-1", "g_b-0"], "t2": ["g_b-0"]}


def test_owned_partitions_is_this_consumers_share_across_topics():
    my_threads = {"t1": ["g_b-0"], "t2": ["g_b-0"]}
    consumers = {"t1": ["g_a-0", "g_b-0"], "t2": ["g_b-0"]}
    partitions = {"t1": ["0-0", "0-1", "0-2"], "t2": ["1-0"]}
    assert rebalance.owned_partitions(my_threads, consumers, partitions) == {
        ("t1", "0-2"): "g_b-0", ("t2", "1-0"): "g_b-0"}


def test_owned_partitions_of_a_topic_no_broker_holds_is_empty():
    assert rebalance.owned_partitions({"t": ["g_a-0"]}, {"t": ["g_a-0"]}, {}) == {}


def test_owned_partitions_refuses_a_view_without_this_consumer():
    with pytest.raises(ValueError, match="g_z-0"):
        rebalance.owned_partitions({"t": ["g_z-0"]}, {"t": ["g_a-0"]}, {"t": ["0-0"]})


@given(consumers=st.lists(st.text("abc0123456789", min_size=1, max_size=4), min_size=1, max_size=6, unique=True),
       counts=st.dictionaries(st.integers(0, 12).map(str), st.integers(1, 6), min_size=0, max_size=4))
def test_every_member_computing_its_share_owns_each_partition_exactly_once(consumers, counts):
    group = {f"g_{c}": {"t": 1 + i % 2} for i, c in enumerate(consumers)}
    everyone = rebalance.consumers_per_topic(group)
    partitions = {"t": rebalance.partition_names(counts)}
    owners: dict = {}
    for consumer_id, topic_counts in group.items():
        mine = rebalance.thread_ids_per_topic(consumer_id, topic_counts)
        for key, thread in rebalance.owned_partitions(mine, everyone, partitions).items():
            assert key not in owners
            owners[key] = thread
    expected = len(partitions["t"]) if everyone else 0
    assert len(owners) == expected
