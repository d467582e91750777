"""acks=all on real brokers with min.insync.replicas=2 (issue 22, defect 1): a write appended
while the ISR was full, then committed after both followers stopped (the ISR shrank to the
leader), was acknowledged on one copy. It is answered NotEnoughReplicasAfterAppend (20) on
today's protocol and on replication's 0.7 produce, and later writes NotEnoughReplicas (19)."""

from __future__ import annotations

import signal
import time

import pytest

from tests.support.kafka_clients.modern_cluster import ModernCluster
from tests.support.modern_listener import raw_request
from tests.support.replicated_cluster import FAST, Wire, produce_all
from tests.support.zookeeper import new_chroot
from twisted_broker.client.partitioners import DefaultPartitioner
from twisted_broker.client.producer import Producer
from twisted_broker.codec.kafka.api_keys import PRODUCE
from twisted_broker.codec.kafka07.replication_errors import NotEnoughReplicasAfterAppend
from twisted_broker.config import ProducerConfig
from twisted_broker.codec.kafka.record_batch import build_batch

NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
KEY = next(k for k in (f"k{i}" for i in range(100)) if DefaultPartitioner()(k, 2) == 0)  # to partition 0 of 2


@pytest.fixture
def cluster(zookeeper, tmp_path):
    # 4 s before the stopped followers leave the ISR (session end or lag): room for the write
    # to be appended first on a loaded machine
    cluster = ModernCluster(tmp_path, new_chroot(zookeeper), {
        **FAST, "min.insync.replicas": "2", "zk.sessiontimeout.ms": "4000", "replica.lag.time.max.ms": "4000"})
    try:
        cluster.start_all()
        yield cluster
    finally:
        for broker in cluster.brokers.values():
            if broker.process is not None and broker.process.poll() is None:
                broker.process.send_signal(signal.SIGCONT)
        cluster.stop_all()


def modern_produce(cluster, broker_id: int, topic: str, value: bytes) -> int:
    batch = build_batch([(int(time.time() * 1000), None, value)])
    answer = raw_request(cluster.kafka_ports[broker_id], PRODUCE, 3, {"acks": -1, "timeout_ms": 15_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return answer["responses"][0]["partition_responses"][0]["error_code"]


def isr(cluster, topic, leader):
    return cluster.metadata(topic, via=leader).topics[0].partitions[0].isr


def stopped_followers(cluster, leader):
    followers = [b for b in (0, 1, 2) if b != leader]
    for broker_id in followers:
        cluster.brokers[broker_id].process.send_signal(signal.SIGSTOP)
    return followers


def resume(cluster, topic, leader, followers):
    for broker_id in followers:
        cluster.brokers[broker_id].process.send_signal(signal.SIGCONT)
    cluster.wait_for(lambda: len(isr(cluster, topic, leader)) == 3, 30, what="the ISR to grow back")


def test_a_write_committed_on_the_leader_alone_is_not_acknowledged(cluster):
    cluster.create("a")
    produce_all(cluster, "a", 0, [b"three copies"])
    leader = cluster.leaders("a")[0]

    followers = stopped_followers(cluster, leader)
    assert modern_produce(cluster, leader, "a", b"modern, one copy") == NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert isr(cluster, "a", leader) == (leader,)
    assert modern_produce(cluster, leader, "a", b"refused") == NOT_ENOUGH_REPLICAS
    resume(cluster, "a", leader, followers)

    # replication's 0.7 produce, through this project's producer (connected, leaders known)
    # (given the leader alone: a stopped broker would hold its metadata requests to their timeout)
    config = ProducerConfig(broker_list=f"{leader}:127.0.0.1:{cluster.brokers[leader].port}", connect_timeout_ms=1000,
                            request_timeout_ms=15_000)
    with Producer(config) as producer:
        producer.send("a", [b"three copies too"], key=KEY)
        followers = stopped_followers(cluster, leader)
        with pytest.raises(NotEnoughReplicasAfterAppend, match="appended by the leader but not committed"):
            producer.send("a", [b"0.7, one copy"], key=KEY)
    with Wire(cluster.brokers[leader]) as wire:
        assert wire.produce("a", 0, [b"refused"], timeout_ms=15_000)[0] == NOT_ENOUGH_REPLICAS
    resume(cluster, "a", leader, followers)
    with Wire(cluster.brokers[leader]) as wire:
        assert wire.produce("a", 0, [b"three copies again"])[0] == 0
