"""Consumer groups against a real ZooKeeper and real brokers (spec 5.2-5.5): the offsets
ZookeeperConsumerConnector hands out, commits and resets (autocommit, commit_offsets, compressed
wrappers, autooffset.reset), and its fetch size and consumer timeout.

The brokers, connectors and checks of tests/support/consumer_groups.py; every check polls.
"""

from __future__ import annotations

import time

import pytest

from tests.support.consumer_groups import (  # noqa: F401 (fixtures)
    GROUP, cluster, committed, connector_factory, fill, latest_offset, owners, send, wait_registered,
)
from tests.support.polling import wait_for
from twisted_broker.client.sync_producer import SyncProducer
from twisted_broker.client.zookeeper_consumer import ConsumerTimeout, MessageAndMetadata
from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, encode_message_set
from twisted_broker.errors import InvalidFetchSize
from twisted_broker.registry import paths


# -- offsets: where a member starts, what it commits -------------------------------------------------

def test_consumed_offsets_chain_and_shutdown_commits_them_and_releases_ownership(
        broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=2)
    fill([broker], "t", 2, 10, "m")
    wait_registered(zk, "t", (0,))
    connector = connector_factory("a", autocommit_enable="true", autocommit_interval_ms="600000",
                                  consumer_timeout_ms="5000")
    (stream,) = connector.create_message_streams({"t": 1})["t"]
    wait_for(lambda: len(owners(zk, "t")) == 2, "both partitions owned")
    last: dict[str, MessageAndMetadata] = {}
    for _ in range(13):
        message = next(stream)
        if message.partition in last:  # uncompressed: each message starts where the last ended
            assert message.offset == last[message.partition].next_offset
        else:
            assert message.offset == 0
        last[message.partition] = message
    assert committed(zk, "t") == {}  # nothing committed yet: the interval is 10 minutes
    connector.shutdown()
    expected = {partition: 0 for partition in ("0-0", "0-1")}  # owned, nothing consumed: where it starts
    expected.update({partition: message.next_offset for partition, message in last.items()})
    assert committed(zk, "t") == expected
    assert owners(zk, "t") == {}
    assert zk.exists(paths.consumer_id_path(GROUP, "g_a")) is None
    with pytest.raises(StopIteration):
        next(stream)
    # The next member of the group starts exactly there (one more message each, so that a
    # partition consumed to its end has something to start with).
    fill([broker], "t", 2, 1, "after")
    successor = connector_factory("b", consumer_timeout_ms="5000")
    (stream,) = successor.create_message_streams({"t": 1})["t"]
    firsts: dict[str, int] = {}
    while len(firsts) < 2:
        message = next(stream)
        firsts.setdefault(message.partition, message.offset)
    assert firsts == expected


def test_commit_offsets_writes_consumed_offsets_without_autocommit(broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    fill([broker], "t", 1, 5, "m")
    connector = connector_factory("a", autocommit_enable="false", consumer_timeout_ms="5000")
    (stream,) = connector.create_message_streams({"t": 1})["t"]
    messages = [next(stream) for _ in range(3)]
    connector.commit_offsets()
    assert committed(zk, "t") == {"0-0": messages[-1].next_offset}
    next(stream)
    connector.shutdown()  # autocommit.enable=false: shutdown does not commit
    assert committed(zk, "t") == {"0-0": messages[-1].next_offset}


def test_compressed_wrappers_report_0_7_offsets_and_a_commit_inside_one_replays_it(
        broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    plain = encode_message_set([b"x"])
    wrapper = encode_compressed_message_set([b"a", b"b", b"c"], GZIP)
    with SyncProducer("127.0.0.1", broker.port) as producer:
        producer.send("t", 0, plain)
        producer.send("t", 0, wrapper)
    end = len(plain) + len(wrapper)
    connector = connector_factory("a", autocommit_enable="false", consumer_timeout_ms="5000")
    (stream,) = connector.create_message_streams({"t": 1})["t"]
    got = [(m.payload, m.offset, m.next_offset) for m in (next(stream) for _ in range(3))]
    # Spec 3.5: inner messages before the last report the wrapper's own start.
    assert got == [(b"x", 0, len(plain)), (b"a", len(plain), len(plain)), (b"b", len(plain), len(plain))]
    connector.commit_offsets()
    assert committed(zk, "t") == {"0-0": len(plain)}
    connector.shutdown()
    successor = connector_factory("b", autocommit_enable="false", consumer_timeout_ms="5000")
    (stream,) = successor.create_message_streams({"t": 1})["t"]
    replay = [(m.payload, m.offset, m.next_offset) for m in (next(stream) for _ in range(3))]
    assert replay == [(b"a", len(plain), len(plain)), (b"b", len(plain), len(plain)), (b"c", len(plain), end)]


def test_a_message_larger_than_fetch_size_raises_in_the_iterator(broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    send(broker, "t", 0, ["y" * 500])
    connector = connector_factory("a", fetch_size="100", consumer_timeout_ms="5000")
    (stream,) = connector.create_message_streams({"t": 1})["t"]
    with pytest.raises(InvalidFetchSize, match="raise fetch.size"):
        next(stream)


def test_consumer_timeout_raises_and_the_stream_stays_usable(broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    connector = connector_factory("a", consumer_timeout_ms="300")
    (stream,) = connector.create_message_streams({"t": 1})["t"]
    started = time.monotonic()
    with pytest.raises(ConsumerTimeout):
        next(stream)
    assert 0.25 <= time.monotonic() - started < 5
    send(broker, "t", 0, ["late"])

    def receive():
        try:
            return next(stream)
        except ConsumerTimeout:
            return None
    assert wait_for(receive, "the message produced after a timeout").payload == b"late"


def test_autooffset_reset_largest_skips_old_messages_and_smallest_reads_them(
        broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    old = send(broker, "t", 0, [f"old-{i}" for i in range(5)])
    wait_for(lambda: latest_offset(broker, "t", 0) > 0, "the old messages to be flushed")
    largest = connector_factory("l", group="largest", autooffset_reset="largest", consumer_timeout_ms="5000")
    smallest = connector_factory("s", group="smallest", autooffset_reset="smallest", consumer_timeout_ms="5000")
    (from_largest,) = largest.create_message_streams({"t": 1})["t"]
    (from_smallest,) = smallest.create_message_streams({"t": 1})["t"]
    new = send(broker, "t", 0, [f"new-{i}" for i in range(3)])
    assert [next(from_largest).payload.decode() for _ in new] == new
    assert [next(from_smallest).payload.decode() for _ in old + new] == old + new


def test_offset_out_of_range_resets_per_autooffset_and_writes_the_offset(
        broker_factory, zk_connect, zk, connector_factory):
    (broker,) = cluster(broker_factory, zk_connect, broker_ids=(0,), partitions=1)
    sent = send(broker, "t", 0, [f"m-{i}" for i in range(4)])
    zk.create(paths.offset_path(GROUP, "t", "0-0"), b"1000000", makepath=True)
    connector = connector_factory("a", autooffset_reset="smallest", consumer_timeout_ms="5000",
                                  autocommit_enable="false")
    (stream,) = connector.create_message_streams({"t": 1})["t"]
    assert [next(stream).payload.decode() for _ in sent] == sent
    # The fetcher wrote the reset offset (the earliest, 0) as 0.7 does; nothing else committed.
    assert committed(zk, "t") == {"0-0": 0}
