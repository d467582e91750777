"""Bad input to replication's requests on real brokers: each gets a clear error (or, for a
frame that cannot be decoded, a closed connection), and nothing changes: the leader keeps its
log, its epoch and its leadership, and goes on serving everyone else."""

import os
import struct

import pytest

from tests.support.replicated_cluster import FAST, ReplicatedCluster, Wire, segment_bytes
from tests.support.zookeeper import new_chroot
from twisted_broker.registry import replication_paths
from twisted_broker.codec.kafka07.replication import (
    EPOCH_END_OFFSET, PRODUCE_ACK, REPLICA_FETCH, REPLICA_METADATA, EpochEndOffsetRequest, EpochQuery,
    ReplicaFetchPartition, ReplicaFetchRequest, decode_epoch_end_offsets, decode_replica_fetch_response,
    encode_replication_request,
)

NOT_A_REPLICA, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = 56, 74, 75
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REPLICATION_FACTOR = 38


def replica_fetch(wire, replica_id, topic, partition, epoch, offset=0):
    request = ReplicaFetchRequest(replica_id, 0, 0, (ReplicaFetchPartition(topic, partition, epoch, offset, 1 << 16,
                                                                           offset),))
    body = wire.request(encode_replication_request(request))
    assert body[:2] == b"\x00\x00"
    _session, [answer] = decode_replica_fetch_response(body[2:])
    return answer


def epoch_end_offset(wire, replica_id, topic, partition, current_epoch, epoch):
    request = EpochEndOffsetRequest(replica_id, (EpochQuery(topic, partition, current_epoch, epoch),))
    body = wire.request(encode_replication_request(request))
    assert body[:2] == b"\x00\x00"
    [answer] = decode_epoch_end_offsets(body[2:])
    return answer


@pytest.fixture
def led_at_epoch_one(three_brokers):
    """Topic "bad" whose partition 0 had one leader change (epoch 1), with five messages;
    returns (cluster, leader id, a follower id)."""
    cluster = three_brokers
    cluster.create("bad")
    first = cluster.leaders("bad")[0]
    with Wire(cluster.brokers[first]) as wire:
        assert wire.produce("bad", 0, [b"m0", b"m1"])[0] == 0
    cluster.brokers[first].stop()  # controlled shutdown: leadership moves, epoch 0 -> 1
    cluster.start(first)
    state = cluster.create("bad").partitions[0]  # every broker sees every replica in sync
    assert state.leader_epoch == 1 and state.leader != first
    with Wire(cluster.brokers[state.leader]) as wire:
        assert wire.produce("bad", 0, [b"m2", b"m3", b"m4"])[0] == 0
    return cluster, state.leader, first


def assert_unchanged(cluster, leader, follower):
    """Same leader and epoch, still taking writes, every copy identical."""
    state = cluster.metadata("bad").topics[0].partitions[0]
    assert (state.leader, state.leader_epoch) == (leader, 1)
    with Wire(cluster.brokers[leader]) as wire:
        # a leader fenced by a newer epoch unfences once ZooKeeper confirms it still leads
        cluster.wait_for(lambda: wire.produce("bad", 0, [b"after"])[0] == 0, timeout_s=10, what="a write")
        assert [p for _, p in wire.read_all("bad", 0)] == [b"m0", b"m1", b"m2", b"m3", b"m4", b"after"]
    cluster.wait_for(lambda: segment_bytes(cluster.brokers[follower], "bad", 0)
                     == segment_bytes(cluster.brokers[leader], "bad", 0), what="the follower's copy")


def test_follower_fetches_with_an_unknown_replica_or_a_wrong_epoch_get_their_error(led_at_epoch_one):
    cluster, leader, follower = led_at_epoch_one
    with Wire(cluster.brokers[leader]) as wire:
        assert replica_fetch(wire, 99, "bad", 0, 1).error == NOT_A_REPLICA
        assert replica_fetch(wire, leader, "bad", 0, 1).error == NOT_A_REPLICA  # itself
        assert replica_fetch(wire, follower, "bad", 0, 0).error == FENCED_LEADER_EPOCH
        assert replica_fetch(wire, follower, "bad", 7, 1).error == UNKNOWN_TOPIC_OR_PARTITION
        assert replica_fetch(wire, follower, "nosuch", 0, 1).error == UNKNOWN_TOPIC_OR_PARTITION
    assert_unchanged(cluster, leader, follower)


def test_a_follower_fetch_with_a_newer_epoch_gets_its_error_and_the_leader_leads_on(led_at_epoch_one):
    cluster, leader, follower = led_at_epoch_one
    with Wire(cluster.brokers[leader]) as wire:
        answer = replica_fetch(wire, follower, "bad", 0, 2)
        assert answer.error == UNKNOWN_LEADER_EPOCH and bytes(answer.messages) == b""
    assert_unchanged(cluster, leader, follower)


def test_a_fetch_in_a_session_the_leader_does_not_hold_gets_the_sessions_error(led_at_epoch_one):
    cluster, leader, follower = led_at_epoch_one
    with Wire(cluster.brokers[leader]) as wire:
        request = ReplicaFetchRequest(follower, 0, 0, (), session_id=12345, session_epoch=3)
        assert wire.request(encode_replication_request(request))[:2] == b"\x00\x46"  # 70: FETCH_SESSION_ID_NOT_FOUND
    assert_unchanged(cluster, leader, follower)


def test_epoch_end_offset_with_a_wrong_epoch_gets_its_error(led_at_epoch_one):
    cluster, leader, follower = led_at_epoch_one
    with Wire(cluster.brokers[leader]) as wire:
        assert epoch_end_offset(wire, follower, "bad", 0, 0, 0)[0] == FENCED_LEADER_EPOCH
        assert epoch_end_offset(wire, follower, "bad", 0, 2, 0)[0] == UNKNOWN_LEADER_EPOCH
        assert epoch_end_offset(wire, follower, "bad", 3, 1, 0)[0] == UNKNOWN_TOPIC_OR_PARTITION
        error, epoch, end = epoch_end_offset(wire, follower, "bad", 0, 1, 0)
        assert (error, epoch) == (0, 0) and end > 0  # where epoch 0 ends: the start of epoch 1
    assert_unchanged(cluster, leader, follower)


def test_epoch_end_offset_from_an_unknown_replica_gets_not_a_replica(led_at_epoch_one):
    cluster, leader, follower = led_at_epoch_one
    with Wire(cluster.brokers[leader]) as wire:
        assert epoch_end_offset(wire, 99, "bad", 0, 1, 0)[0] == NOT_A_REPLICA


def frames(request_type: int, topic: str) -> list[bytes]:
    """Bodies that cannot be decoded as ``request_type``: truncated, negative counts, lengths
    past the end, random bytes."""
    def frame(body: bytes) -> bytes:
        return struct.pack(">ih", len(body) + 2, request_type) + body
    name = struct.pack(">h", len(topic)) + topic.encode()
    valid = {REPLICA_FETCH: encode_replication_request(ReplicaFetchRequest(
                 1, 0, 0, (ReplicaFetchPartition(topic, 0, 1, 0, 100, 0),)))[6:],
             EPOCH_END_OFFSET: encode_replication_request(EpochEndOffsetRequest(1, (EpochQuery(topic, 0, 1, 0),)))[6:],
             PRODUCE_ACK: struct.pack(">hi", -1, 1000) + struct.pack(">h", 1) + name + struct.pack(">ii", 0, 100),
             REPLICA_METADATA: struct.pack(">h", 1) + name}[request_type]
    random = os.urandom(64)
    return [frame(b""), frame(valid[:len(valid) // 2]), frame(valid[:-1]), frame(valid + b"\x00"),
            frame(b"\xff" * len(valid)), frame(random)]


@pytest.fixture(scope="module")
def serving_cluster(zookeeper, tmp_path_factory):
    """Three brokers shared by the undecodable-frame tests: each sends its frames to the leader
    of a topic of its own and checks that topic, so they need no cluster of their own."""
    cluster = ReplicatedCluster(tmp_path_factory.mktemp("serving"), new_chroot(zookeeper), dict(FAST))
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop_all()


@pytest.mark.parametrize("request_type", [REPLICA_FETCH, EPOCH_END_OFFSET, PRODUCE_ACK, REPLICA_METADATA])
def test_undecodable_replication_frames_close_the_connection_and_the_broker_serves_on(serving_cluster, request_type):
    cluster, topic = serving_cluster, f"bad-{request_type}"
    cluster.create(topic)
    leader = cluster.leaders(topic)[0]
    broker = cluster.brokers[leader]
    with Wire(broker) as wire:
        assert wire.produce(topic, 0, [b"before"])[0] == 0
    for data in frames(request_type, topic):
        with Wire(broker) as bad:
            bad.send(data)
            assert bad.is_closed_by_peer(), f"type {request_type}: {data[:40].hex()}... left the connection open"
    assert broker.process.poll() is None
    with Wire(broker) as wire:
        assert wire.produce(topic, 0, [b"after"])[0] == 0
        assert [p for _, p in wire.read_all(topic, 0)] == [b"before", b"after"]
    assert cluster.metadata(topic).topics[0].partitions[0].leader == leader


def test_a_topic_with_a_factor_above_the_live_brokers_is_refused_with_one_log_line(replicated_cluster):
    cluster = replicated_cluster
    cluster.properties["default.replication.factor"] = "5"
    for broker_id in range(3):
        cluster.start(broker_id)
    [topic] = cluster.metadata("big", via=0).topics  # after retrying for a few seconds
    assert (topic.error, topic.partitions) == (INVALID_REPLICATION_FACTOR, ())
    client = cluster.zk_client()
    try:
        assert client.exists(replication_paths.topic_path("big")) is None
    finally:
        client.stop()
        client.close()
    lines = [line for b in cluster.brokers.values() for line in b.log_tail(1 << 20).splitlines() if "'big'" in line]
    assert len(lines) == 1 and "replication factor 5" in lines[0] and "larger than" in lines[0], lines
    # the broker serves on, and refuses the next request the same way, with one more line
    assert cluster.metadata("big", via=0).topics[0].error == INVALID_REPLICATION_FACTOR
    assert sum(b.log_tail(1 << 20).count("'big'") for b in cluster.brokers.values()) == 2
