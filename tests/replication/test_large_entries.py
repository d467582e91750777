"""The largest entries the broker stores, through replication (issue 22, defect 3).

A record batch of today's protocol is stored with its values deflated beside it
(storage/stored_batch.py): with incompressible values, one entry of about twice the batch,
larger than any follower's fetch. A leader's answer to a follower holds at least the first
whole entry whatever the fetch size (KIP-74); before, the follower was given part of it, asked
again forever, and dropped out of the ISR while the leader acknowledged the write alone."""

from __future__ import annotations

import os
import time

import pytest

from tests.support.kafka_clients import client_kafka_python
from tests.support.kafka_clients.modern_cluster import ModernCluster
from tests.support.kafka_clients.records import Record
from tests.support.modern_listener import raw_request
from tests.support.replicated_cluster import FAST, Wire, all_in_sync, segment_bytes
from tests.support.zookeeper import new_chroot
from twisted_broker.codec.kafka.api_keys import PRODUCE
from twisted_broker.codec.kafka.record_batch import build_batch

MAX_BATCH_BYTES = 1048588 + 65536  # kafka.max.batch.bytes's default


@pytest.fixture
def cluster(zookeeper, tmp_path):
    # replica.fetch.max.bytes far below the entries (a follower asks max.message.size + 1 KiB
    # at least, which a 0.7 message always fits in; a stored batch does not)
    cluster = ModernCluster(tmp_path, new_chroot(zookeeper), {**FAST, "replica.fetch.max.bytes": "1000"})
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop_all()


def largest_batch() -> bytes:
    """A batch of one incompressible record, exactly kafka.max.batch.bytes long (the default)."""
    size = 0
    value_bytes = MAX_BATCH_BYTES - 80
    while size != MAX_BATCH_BYTES:
        value_bytes += MAX_BATCH_BYTES - size
        batch = build_batch([(int(time.time() * 1000), None, os.urandom(value_bytes))])
        size = len(batch)
    return bytes(batch)


def test_the_largest_entries_reach_every_follower_byte_for_byte(cluster):
    cluster.create("big")
    leader = cluster.leaders("big")[0]
    # the 1 MB record, through kafka-python
    record = Record(None, os.urandom(1_000_000), (), int(time.time() * 1000))
    assert client_kafka_python.produce(cluster.bootstrap, "big", [record], partition=0) == [(0, 0)]
    # the largest batch today's protocol takes
    answer = raw_request(cluster.kafka_ports[leader], PRODUCE, 3, {"acks": -1, "timeout_ms": 15_000, "topic_data": [
        {"name": "big", "partition_data": [{"index": 0, "records": largest_batch()}]}]})
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
    with Wire(cluster.brokers[leader]) as wire:
        # the largest 0.7 message (max.message.size: 1000000 payload bytes)
        assert wire.produce("big", 0, [os.urandom(1_000_000)])[0] == 0
        assert wire.produce("big", 0, [b"small"])[0] == 0
    expected = segment_bytes(cluster.brokers[leader], "big", 0)
    assert len(expected) > 2 * 1_000_000 + 2 * MAX_BATCH_BYTES + 1_000_000  # batches stored with their values
    for follower in (b for b in (0, 1, 2) if b != leader):
        cluster.wait_for(lambda: segment_bytes(cluster.brokers[follower], "big", 0) == expected, 20,
                         what=f"broker {follower}'s log to be the leader's")
    assert all_in_sync(cluster, "big", via=leader)
