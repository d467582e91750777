"""Reads of a replicated topic at offsets no entry starts at (issue 22, defect 8): a 0.7
consumer asking any replica at an offset past its end, or inside an entry (where a consumer's
offset can fall after a truncation cut what it read and a new leader's entries were copied
over it), gets OffsetOutOfRange (error 1), never the raw bytes of part of an entry; today's
Fetch past the leader's end gets OFFSET_OUT_OF_RANGE (1) too."""

from __future__ import annotations

import pytest

from tests.support.kafka_clients.modern_cluster import ModernCluster
from tests.support.modern_listener import raw_request
from tests.support.replicated_cluster import FAST, Wire, produce_all, segment_bytes
from tests.support.zookeeper import new_chroot
from twisted_broker.codec.kafka.api_keys import FETCH
from twisted_broker.codec.kafka07.message_set import encode_message_set

OFFSET_OUT_OF_RANGE = 1
PAYLOADS = [b"first", b"second", b"third"]


@pytest.fixture
def cluster(zookeeper, tmp_path):
    cluster = ModernCluster(tmp_path, new_chroot(zookeeper), dict(FAST))
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop_all()


def modern_fetch_error(cluster, broker_id: int, topic: str, offset: int) -> int:
    answer = raw_request(cluster.kafka_ports[broker_id], FETCH, 4, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                    "partition_max_bytes": 1 << 20}]}]})
    return answer["responses"][0]["partitions"][0]["error_code"]


def test_an_offset_past_the_end_or_inside_an_entry_is_out_of_range_on_every_replica(cluster):
    cluster.create("r")
    produce_all(cluster, "r", 0, PAYLOADS)
    leader = cluster.leaders("r")[0]
    end = len(encode_message_set(PAYLOADS))
    second = len(encode_message_set(PAYLOADS[:1]))
    for broker_id in (0, 1, 2):
        cluster.wait_for(lambda: len(segment_bytes(cluster.brokers[broker_id], "r", 0)) == end,
                         what=f"broker {broker_id} to hold every entry")
        with Wire(cluster.brokers[broker_id]) as wire:
            cluster.wait_for(lambda: [p for _, p in wire.read_all("r", 0)] == PAYLOADS,
                             what=f"broker {broker_id} to commit every entry")
            for inside in (1, second - 1, second + 3, end - 1):
                assert wire.fetch("r", 0, inside) == (OFFSET_OUT_OF_RANGE, b""), f"offset {inside}"
            for past in (end + 1, end + 1000):
                assert wire.fetch("r", 0, past) == (OFFSET_OUT_OF_RANGE, b""), f"offset {past}"
            error, data = wire.fetch("r", 0, second)
            assert error == 0 and data == encode_message_set(PAYLOADS[1:])
            assert wire.fetch("r", 0, end) == (0, b"")
    # a 0.7 entry's modern offset is its position (docs/kafka-protocol.md): the end is the same
    assert modern_fetch_error(cluster, leader, "r", end + 5) == OFFSET_OUT_OF_RANGE
    assert modern_fetch_error(cluster, leader, "r", 0) == 0
