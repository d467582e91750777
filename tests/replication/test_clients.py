"""This project's clients on replicated topics, against three real brokers: the CLI producer
creates a new topic replicated, the blocking and Twisted producers and the consumers (CLI
group consumer, SimpleConsumer) follow a kill -9 of a leader, and a write refused for want of
in-sync replicas is reported clearly.

Delivery across a failover is at least once: a set the dead leader appended (and its
followers copied) before the producer heard back is sent again to the new leader. The tests
allow duplicates, count them, and require everything acknowledged to be there, in order.
"""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
import pytest_twisted
from twisted.internet import reactor

from tests.support.cli import cli_env, run_cli, start_cli
from tests.support.replicated_cluster import Wire
from twisted_broker.client.partitioners import DefaultPartitioner
from twisted_broker.client.producer import Producer
from twisted_broker.client.twisted_leader_producer import TwistedLeaderProducer
from twisted_broker.config import ProducerConfig
from twisted_broker.codec.kafka07.replication_errors import NotEnoughReplicas

KEY_PARTITION = DefaultPartitioner()("k", 2)  # where key "k" goes among the cluster's 2 partitions


def create(cluster, topic: str) -> None:
    """Create a replicated topic as a producer's first metadata request does, once every
    broker sees the others (until then a broker refuses a factor above the brokers it sees,
    and answers error 3)."""
    for via in range(3):
        cluster.wait_for(lambda: cluster.metadata(topic, via).topics[0].error == 0,
                         what=f"broker {via} to create or know replicated topic {topic}")


def broker_list(cluster) -> str:
    return ",".join(f"{b.broker_id}:127.0.0.1:{b.port}" for b in cluster.brokers.values())


def committed_payloads(cluster, topic: str, partition: int) -> list[bytes]:
    """Every committed message of a partition, read from its current leader."""
    (leader,) = cluster.wait_for(lambda: _live_leader(cluster, topic, partition),
                                 what=f"a leader of {topic}-{partition}")
    with Wire(cluster.brokers[leader], timeout_s=5) as wire:
        return [payload for _offset, payload in wire.read_all(topic, partition)]


def _live_leader(cluster, topic, partition):
    live = {b.broker_id for b in cluster.live()}
    leaders = {cluster.leaders(topic, via).get(partition, -1) for via in live}
    if len(leaders) == 1 and leaders <= live:  # every live broker agrees on a live leader
        return tuple(leaders)  # a tuple: broker 0 is a leader too
    return None


def assert_at_least_once_in_order(received: list[bytes], sent: list[bytes]) -> int:
    """``received`` is ``sent`` in order with some runs repeated (a resend after a failover):
    every sent message is there, nothing else is, and nothing goes backwards except by
    repeating what came just before. Returns the number of duplicates."""
    position = {payload: i for i, payload in enumerate(sent)}
    assert set(received) <= set(sent), "messages nobody sent"
    assert set(received) == set(sent), f"lost {len(set(sent) - set(received))} acknowledged messages"
    highest = -1
    for payload in received:
        index = position[payload]
        assert index <= highest + 1, f"a gap before {payload!r}"
        highest = max(highest, index)
    return len(received) - len(set(received))


def test_the_cli_producer_creates_a_new_topic_replicated(three_brokers):
    cluster = three_brokers
    create(cluster, "warm-up")  # every broker sees the other two
    lines = [f"line-{i}".encode() for i in range(20)]
    result = run_cli("produce", "--zk", cluster.zk_connect, "--topic", "fresh", input=b"\n".join(lines) + b"\n")
    assert result.returncode == 0, result.stderr.decode()
    (topic,) = cluster.metadata("fresh").topics
    assert topic.error == 0 and len(topic.partitions) == 2  # num.partitions of the cluster
    assert all(len(p.replicas) == 3 for p in topic.partitions)  # default.replication.factor
    received = committed_payloads(cluster, "fresh", 0) + committed_payloads(cluster, "fresh", 1)
    assert sorted(received) == sorted(lines)


def test_the_blocking_producer_keeps_sending_through_a_leader_kill(three_brokers):
    cluster = three_brokers
    create(cluster, "b")  # created: two partitions, three replicas
    config = ProducerConfig(broker_list=broker_list(cluster), connect_timeout_ms=1000)
    acknowledged: list[bytes] = []
    with Producer(config) as producer:
        for i in range(60):
            producer.send("b", [f"m{i:03d}".encode()], key="k")  # one key: one partition
            acknowledged.append(f"m{i:03d}".encode())
        partition = KEY_PARTITION
        leader = cluster.leaders("b")[partition]
        cluster.brokers[leader].kill()
        for i in range(60, 120):
            producer.send("b", [f"m{i:03d}".encode()], key="k")
            acknowledged.append(f"m{i:03d}".encode())
    assert cluster.leaders("b", via=next(iter(cluster.live())).broker_id)[partition] != leader
    duplicates = assert_at_least_once_in_order(committed_payloads(cluster, "b", partition), acknowledged)
    assert duplicates <= 1  # one set in flight at the kill


def test_too_few_in_sync_replicas_is_reported_by_the_producer(replicated_cluster):
    cluster = replicated_cluster
    cluster.properties["min.insync.replicas"] = "2"
    for broker_id in range(3):
        cluster.start(broker_id)
    create(cluster, "m")
    config = ProducerConfig(broker_list=broker_list(cluster), connect_timeout_ms=1000)
    with Producer(config) as producer:
        producer.send("m", [b"before"], key="k")
        partition = KEY_PARTITION
        survivor = cluster.leaders("m")[partition]
        for broker_id in range(3):
            if broker_id != survivor:
                cluster.brokers[broker_id].kill()
        cluster.wait_for(lambda: cluster.metadata("m", via=survivor).topics[0].partitions[partition].isr
                         == (survivor,), what="the ISR to shrink to the leader")
        with pytest.raises(NotEnoughReplicas) as refused:
            producer.send("m", [b"after"], key="k")
    message = str(refused.value)
    assert f"partition {partition}" in message and "1 in-sync replica" in message
    assert "min.insync.replicas" in message

    # The CLI prints the same as its one-line error and fails.
    result = run_cli("produce", "--broker-list", f"{survivor}:127.0.0.1:{cluster.brokers[survivor].port}",
                     "--topic", "m", "--key", "k", input=b"x\n")
    err = result.stderr.decode()
    assert result.returncode == 1 and err.count("\n") == 1 and "min.insync.replicas" in err, err


def test_consume_as_a_group_keeps_printing_through_a_leader_kill(three_brokers):
    cluster = three_brokers
    create(cluster, "g")
    config = ProducerConfig(broker_list=broker_list(cluster), connect_timeout_ms=1000)
    consumer = start_cli("consume", "--zk", cluster.zk_connect, "--topic", "g", "--group", "grp",
                         "--backoff-ms", "100", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    printed: list[bytes] = []
    reader = threading.Thread(target=lambda: printed.extend(consumer.stdout), daemon=True)
    reader.start()
    acknowledged: list[bytes] = []
    try:
        with Producer(config) as producer:
            for i in range(40):
                producer.send("g", [f"g{i:03d}".encode()], key="k")
                acknowledged.append(f"g{i:03d}".encode())
            cluster.wait_for(lambda: len(printed) >= 40, what="the first messages printed")
            leader = cluster.leaders("g")[KEY_PARTITION]
            cluster.brokers[leader].kill()
            for i in range(40, 80):
                producer.send("g", [f"g{i:03d}".encode()], key="k")
                acknowledged.append(f"g{i:03d}".encode())
        cluster.wait_for(lambda: len(set(printed)) >= 80, timeout_s=30, what="every message printed")
        assert consumer.poll() is None, "the consumer stopped"
    finally:
        consumer.terminate()
        _out, err = consumer.communicate(timeout=30)
    reader.join(5)
    assert consumer.returncode == 0, err.decode()
    received = [line.rstrip(b"\n") for line in printed]
    assert_at_least_once_in_order(received, acknowledged)
    # The group's offset is committed under the partition number alone (Kafka 0.8's naming).
    from twisted_broker.registry.cluster_view import ClusterView
    with ClusterView(cluster.zk_connect) as view:
        offsets = view.offsets("grp", "g")
    assert str(KEY_PARTITION) in offsets and set(offsets) <= {"0", "1"}, offsets


def test_consume_without_a_group_follows_the_leader(three_brokers):
    cluster = three_brokers
    create(cluster, "d")
    config = ProducerConfig(broker_list=broker_list(cluster), connect_timeout_ms=1000)
    consumer = start_cli("consume", "--broker-list", broker_list(cluster), "--topic", "d", "--from-beginning",
                         "--partition", str(KEY_PARTITION), "--timeout-ms", "8000",
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    acknowledged = []
    with Producer(config) as producer:
        for i in range(30):
            producer.send("d", [f"d{i:03d}".encode()], key="k")
            acknowledged.append(f"d{i:03d}".encode())
        time.sleep(0.5)  # the consumer is reading from the first leader
        cluster.brokers[cluster.leaders("d")[KEY_PARTITION]].kill()
        for i in range(30, 60):
            producer.send("d", [f"d{i:03d}".encode()], key="k")
            acknowledged.append(f"d{i:03d}".encode())
    out, err = consumer.communicate(timeout=60)
    assert consumer.returncode == 0, err.decode()
    assert_at_least_once_in_order(out.splitlines(), acknowledged)


@pytest_twisted.inlineCallbacks
def test_the_twisted_producer_keeps_sending_through_a_leader_kill(three_brokers):
    cluster = three_brokers
    create(cluster, "tw")
    producer = TwistedLeaderProducer(reactor, [("127.0.0.1", b.port) for b in cluster.brokers.values()])
    acknowledged = []
    try:
        for i in range(80):
            if i == 40:
                cluster.brokers[cluster.leaders("tw")[0]].kill()
            yield producer.send("tw", 0, [f"t{i:03d}".encode()])
            acknowledged.append(f"t{i:03d}".encode())
    finally:
        yield producer.close()
    duplicates = assert_at_least_once_in_order(committed_payloads(cluster, "tw", 0), acknowledged)
    assert duplicates <= 1
