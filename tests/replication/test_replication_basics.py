"""A replicated topic on three real brokers: created on a producer's first metadata request,
committed on every replica before it is visible, byte-identical on every replica."""

from tests.support.replicated_cluster import Wire, segment_bytes


def test_a_produced_message_is_committed_on_every_replica_and_read_from_any(three_brokers):
    cluster = three_brokers
    metadata = cluster.metadata("events")
    [topic] = metadata.topics
    assert topic.error == 0 and [p.partition for p in topic.partitions] == [0, 1]
    for p in topic.partitions:
        assert sorted(p.replicas) == [0, 1, 2] and p.leader in p.replicas
    partition = topic.partitions[0]
    # The answer came from one broker's view; the leader may act on its election a moment later
    # (a fresh-clone CI run got NOT_LEADER, 6): wait until every broker sees it, as a producer
    # retries its metadata.
    cluster.create("events")
    with Wire(cluster.brokers[partition.leader]) as wire:
        for i in range(20):
            error, _offset = wire.produce("events", 0, [f"m{i}".encode()])
            assert error == 0
        assert [p for _, p in wire.read_all("events", 0)] == [f"m{i}".encode() for i in range(20)]
    leader_bytes = segment_bytes(cluster.brokers[partition.leader], "events", 0)
    for broker_id in partition.replicas:
        cluster.wait_for(lambda: segment_bytes(cluster.brokers[broker_id], "events", 0) == leader_bytes,
                         what=f"broker {broker_id}'s copy")
        with Wire(cluster.brokers[broker_id]) as wire:
            got = cluster.wait_for(lambda: len(wire.read_all("events", 0)) == 20 and wire.read_all("events", 0))
            assert [p for _, p in got] == [f"m{i}".encode() for i in range(20)]
