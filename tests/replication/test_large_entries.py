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
from tests.support.replicated_cluster import FAST, Wire, all_in_sync, segment_bytes
from tests.support.zookeeper import new_chroot


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


def test_the_largest_entries_reach_every_follower_byte_for_byte(cluster):
    cluster.create("big")
    leader = cluster.leaders("big")[0]
    value = os.urandom(1_000_000)  # the 1 MB record, within kafka.max.batch.bytes
    record = Record(None, value, (), int(time.time() * 1000))
    [(partition, offset)] = client_kafka_python.produce(cluster.bootstrap, "big", [record], partition=0)
    assert (partition, offset) == (0, 0)
    with Wire(cluster.brokers[leader]) as wire:
        assert wire.produce("big", 0, [os.urandom(999_000)])[0] == 0  # near 0.7's max.message.size
        assert wire.produce("big", 0, [b"small"])[0] == 0
    expected = segment_bytes(cluster.brokers[leader], "big", 0)
    assert len(expected) > 2_900_000  # the batch, its deflated values, the 0.7 message
    for follower in (b for b in (0, 1, 2) if b != leader):
        cluster.wait_for(lambda: segment_bytes(cluster.brokers[follower], "big", 0) == expected, 20,
                         what=f"broker {follower}'s log to be the leader's")
    assert all_in_sync(cluster, "big", via=leader)
