"""Consumer groups against a real ZooKeeper and real brokers (spec 5.2-5.5): how
ZookeeperConsumerConnector's members share the partitions (0.7's ranges, joins and leaves,
retries while a partition stays owned) and what wildcard subscriptions own.

The brokers, connectors and checks of tests/support/consumer_groups.py; every check polls.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.support.consumer_groups import (  # noqa: F401 (fixtures)
    GROUP, cluster, collectors, committed, connector_factory, consumed_all, fill, latest_offset, owners, send,
    wait_registered,
)
from tests.support.polling import wait_for
from twisted_broker.client.topic_filter import Blacklist, Whitelist
from twisted_broker.client.zookeeper_consumer import ConsumerRebalanceFailed, KafkaStream
from twisted_broker.registry import paths, rebalance


# -- the group's assignment and delivery ---------------------------------------------------------

def test_three_consumers_over_eight_partitions_own_0_7s_ranges_and_consume_everything(
        broker_factory, zk_connect, zk, connector_factory, collectors):
    brokers = cluster(broker_factory, zk_connect, broker_ids=(2, 10))
    sent = fill(brokers, "t", 4, 25, "m")
    wait_registered(zk, "t", (2, 10))
    members = {}
    for consumerid in ("c9", "c10", "c2"):
        connector = connector_factory(consumerid)
        (stream,) = connector.create_message_streams({"t": 1})["t"]
        members[consumerid] = collectors(stream)
    # Hand-computed (tests/unit/registry/test_rebalance.py): partitions and thread ids sort as
    # strings, 10-x before 2-x and g_c10-0 < g_c2-0 < g_c9-0; 8 = 3 + 3 + 2.
    expected = {"10-0": "g_c10-0", "10-1": "g_c10-0", "10-2": "g_c10-0",
                "10-3": "g_c2-0", "2-0": "g_c2-0", "2-1": "g_c2-0",
                "2-2": "g_c9-0", "2-3": "g_c9-0"}
    wait_for(lambda: owners(zk, "t") == expected, f"owners {expected}, have {owners(zk, 't')}")
    for consumerid in ("c9", "c10", "c2"):
        value, _ = zk.get(paths.consumer_id_path(GROUP, f"g_{consumerid}"))
        assert value == b'{ "t": 1 }'
    wait_for(consumed_all(members.values(), sent), "every message to be consumed")
    more = fill(brokers, "t", 4, 5, "more")
    wait_for(consumed_all(members.values(), more), "messages produced after the rebalance")
    # autocommit.interval.ms=200: the offsets reach the end of every partition.
    ends = {paths.partition_name(b.broker_id, p): latest_offset(b, "t", p) for b in brokers for p in range(4)}
    wait_for(lambda: committed(zk, "t") == ends, f"autocommitted offsets {ends}")
    # Once the assignment settled, each member receives only its own partitions.
    for consumerid, collector in members.items():
        late = {m.partition for m in collector.snapshot() if m.payload.startswith(b"more-")}
        assert late <= {p for p, owner in expected.items() if owner == f"g_{consumerid}-0"}
    assert not any(c.errors for c in members.values())


def test_members_joining_and_leaving_together_converge_on_0_7s_assignment(
        broker_factory, zk_connect, zk, connector_factory, collectors):
    brokers = cluster(broker_factory, zk_connect)
    sent = fill(brokers, "t", 4, 10, "m")
    wait_registered(zk, "t", (0, 1))
    members = {consumerid: connector_factory(consumerid) for consumerid in ("d", "c", "b", "a")}
    streams: dict[str, list[KafkaStream]] = {}
    errors: list[BaseException] = []

    def join(consumerid: str) -> None:
        try:
            streams[consumerid] = members[consumerid].create_message_streams({"t": 2})["t"]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    joining = [threading.Thread(target=join, args=(consumerid,)) for consumerid in members]
    for thread in joining:
        thread.start()
    for thread in joining:
        thread.join(60)
    assert not errors
    partitions = [f"{b}-{p}" for b in (0, 1) for p in range(4)]

    def expected(consumerids):
        threads = [f"g_{c}-{i}" for c in consumerids for i in range(2)]
        return {p: thread for thread, owned in rebalance.assign(threads, partitions).items() for p in owned}
    wait_for(lambda: owners(zk, "t") == expected("abcd"), "eight threads over eight partitions")
    group = [collectors(stream) for member_streams in streams.values() for stream in member_streams]
    wait_for(consumed_all(group, sent), "every message")
    leaving = [threading.Thread(target=members[c].shutdown) for c in ("a", "c")]
    for thread in leaving:
        thread.start()
    for thread in leaving:
        thread.join(30)
    wait_for(lambda: owners(zk, "t") == expected("bd"), "the two remaining members' ranges")
    more = fill(brokers, "t", 4, 5, "more")
    wait_for(consumed_all(group, more), "messages after the others left")


def test_streams_of_one_consumer_are_threads_of_the_assignment(broker_factory, zk_connect, zk, connector_factory,
                                                               collectors):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=3)
    sent = fill([broker], "t", 3, 10, "m")
    wait_registered(zk, "t", (0,))
    connector = connector_factory("a")
    streams = connector.create_message_streams({"t": 2})["t"]
    assert len(streams) == 2
    # Threads g_a-0, g_a-1 over 0-0 0-1 0-2: 2 + 1.
    wait_for(lambda: owners(zk, "t") == {"0-0": "g_a-0", "0-1": "g_a-0", "0-2": "g_a-1"}, "two streams' owners")
    first, second = collectors(streams[0]), collectors(streams[1])
    wait_for(consumed_all([first, second], sent), "every message")
    assert {m.partition for m in first.snapshot()} == {"0-0", "0-1"}
    assert {m.partition for m in second.snapshot()} == {"0-2"}


def test_rebalance_fails_after_its_retries_while_a_partition_stays_owned_then_recovers(
        broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    send(broker, "t", 0, ["m"])
    wait_registered(zk, "t", (0,))
    squatter = zk.create(paths.owner_path(GROUP, "t", "0-0"), b"g_other-0", ephemeral=True, makepath=True)
    connector = connector_factory("a", rebalance_retries_max="3", rebalance_backoff_ms="200",
                                  consumer_timeout_ms="5000")
    started = time.monotonic()
    with pytest.raises(ConsumerRebalanceFailed, match="g_a can't rebalance after 3 retries"):
        connector.create_message_streams({"t": 1})
    assert time.monotonic() - started >= 0.4  # 3 attempts, 2 backoffs
    # 0.7 would wait for the next ZooKeeper event; this consumer keeps trying.
    zk.delete(squatter)
    wait_for(lambda: owners(zk, "t") == {"0-0": "g_a-0"}, "the freed partition to be taken")


# -- wildcard subscriptions ----------------------------------------------------------------------

def test_whitelist_consumer_picks_up_a_topic_created_after_it_started(
        broker_factory, zk_connect, zk, connector_factory, collectors):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=2)
    first = fill([broker], "wl-a", 2, 5, "a")
    other = fill([broker], "other", 2, 5, "o")
    wait_registered(zk, "wl-a", (0,))
    wait_registered(zk, "other", (0,))
    white = connector_factory("w", group="white")
    black = connector_factory("b", group="black")
    (white_stream,) = white.create_message_streams_by_filter(Whitelist("wl-.*"), 1)
    (black_stream,) = black.create_message_streams_by_filter(Blacklist("other"), 1)
    assert zk.get(paths.consumer_id_path("white", "white_w"))[0] == b"*1*wl-.*"
    assert zk.get(paths.consumer_id_path("black", "black_b"))[0] == b"!1!other"
    whites, blacks = collectors(white_stream), collectors(black_stream)
    wait_for(consumed_all([whites], first), "the whitelisted topic")
    wait_for(consumed_all([blacks], first), "the topic the blacklist allows")
    later = fill([broker], "wl-b", 2, 5, "b")  # a topic that did not exist when they started
    wait_for(consumed_all([whites], later), "the new whitelisted topic")
    wait_for(consumed_all([blacks], later), "the new topic the blacklist allows")
    assert owners(zk, "wl-b", group="white") == {"0-0": "white_w-0", "0-1": "white_w-0"}
    assert not whites.payloads() & set(other)
    assert not blacks.payloads() & set(other)
    assert {m.topic for m in whites.snapshot()} == {"wl-a", "wl-b"}


def test_a_member_filter_python_cannot_compile_counts_for_nothing_instead_of_failing_the_rebalance(
        broker_factory, zk_connect, zk, connector_factory, collectors):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=2)
    sent = fill([broker], "t", 2, 3, "t")
    wait_registered(zk, "t", (0,))
    # What a Java member with Whitelist("\\p{Alpha}+") registers: valid for Java, not for re.
    zk.create(paths.consumer_id_path(GROUP, "g_java"), b"*1*\\p{Alpha}+", ephemeral=True, makepath=True)
    connector = connector_factory("a", rebalance_retries_max="3")
    (stream,) = connector.create_message_streams({"t": 1})["t"]  # raised ConsumerRebalanceFailed before
    assert owners(zk, "t") == {"0-0": "g_a-0", "0-1": "g_a-0"}
    wait_for(consumed_all([collectors(stream)], sent), "every message")
