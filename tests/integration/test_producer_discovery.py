"""The producer's ZooKeeper mode (spec 5.6): ZkBrokerPartitionInfo against real brokers.

Partitions are ``(broker id, partition)`` sorted numerically; a topic no broker holds gets
every live broker's partition 0; registrations merge into what a topic had; brokers that
leave take their partitions with them. Changes arrive through watches: checks poll with
deadlines.
"""

from __future__ import annotations

import pytest

from tests.support.consumer_groups import known
from tests.support.polling import wait_for
from twisted_broker.client.partitioners import java_string_hashcode
from twisted_broker.client.producer import Producer
from twisted_broker.client.simple_consumer import SimpleConsumer
from twisted_broker.client.sync_producer import SyncProducer
from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.codec.kafka07.requests import FetchRequest
from twisted_broker.config import ProducerConfig
from twisted_broker.registry import paths
from twisted_broker.registry.zk_partition_info import ZkBrokerPartitionInfo

SESSION_TIMEOUT_S = 2.0  # the broker fixture's zk.sessiontimeout.ms


@pytest.fixture
def info(zk_connect):
    config = ProducerConfig.from_properties({"zk.connect": zk_connect, "zk.sessiontimeout.ms": "4000"})
    with ZkBrokerPartitionInfo.from_config(config) as partition_info:
        yield partition_info


def start(broker_factory, zk_connect, broker_id: int, partitions: int = 2):
    return broker_factory(f"broker{broker_id}", broker_id=broker_id, zk_connect=zk_connect,
                          properties={"num.partitions": str(partitions)})


def create_topic(broker, topic: str) -> None:
    with SyncProducer("127.0.0.1", broker.port) as producer:
        producer.send(topic, 0, encode_message_set([b"create"]))


def test_partitions_sort_numerically_by_broker_then_partition(broker_factory, zk_connect, info):
    brokers = [start(broker_factory, zk_connect, broker_id, partitions=2) for broker_id in (10, 2)]
    for broker in brokers:
        create_topic(broker, "t")
    # Numeric, unlike the consumers' string sort (which puts 10-x first).
    wait_for(lambda: info.partitions("t") == [(2, 0), (2, 1), (10, 0), (10, 1)], "both brokers' partitions")
    assert info.broker(2) == ("127.0.0.1", brokers[1].port)
    assert info.broker(10) == ("127.0.0.1", brokers[0].port)


def test_unknown_topic_gets_every_live_brokers_partition_0_and_registrations_merge(
        broker_factory, zk_connect, zk, info):
    first, second = (start(broker_factory, zk_connect, broker_id, partitions=4) for broker_id in (0, 1))
    wait_for(lambda: known(info, 0) and known(info, 1), "both brokers")
    assert info.partitions("fresh") == [(0, 0), (1, 0)]
    create_topic(first, "fresh")
    # Broker 0's four partitions join; broker 1's bootstrap candidate stays (0.7's merge), so
    # producing goes on reaching broker 1, which then creates the topic too.
    wait_for(lambda: info.partitions("fresh") == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)], "the merge")
    config = ProducerConfig.from_properties({"zk.connect": zk_connect})
    with Producer(config, broker_partition_info=info) as producer:
        def send_until_broker_1_registers():
            producer.send("fresh", [b"x"])
            return zk.exists(paths.broker_topic_path("fresh", 1))
        wait_for(send_until_broker_1_registers, "broker 1 to receive the topic")
    wait_for(lambda: info.partitions("fresh") == [(b, p) for b in (0, 1) for p in range(4)], "all eight")


def test_a_broker_that_dies_takes_its_partitions_and_address_with_it(broker_factory, zk_connect, info):
    survivor, victim = (start(broker_factory, zk_connect, broker_id) for broker_id in (0, 1))
    for broker in (survivor, victim):
        create_topic(broker, "t")
    wait_for(lambda: len(info.partitions("t")) == 4, "both brokers' partitions")
    victim.kill()
    wait_for(lambda: not known(info, 1), "broker 1 to leave", timeout_s=SESSION_TIMEOUT_S + 10)
    assert info.partitions("t") == [(0, 0), (0, 1)]
    assert info.partitions("unknown") == [(0, 0)]


def test_keyed_messages_go_to_abs_java_hashcode_mod_count_of_the_sorted_partitions(broker_factory, zk_connect, info):
    brokers = {broker_id: start(broker_factory, zk_connect, broker_id, partitions=3) for broker_id in (0, 1)}
    for broker in brokers.values():
        create_topic(broker, "t")
    wait_for(lambda: len(info.partitions("t")) == 6, "six partitions")
    partitions = info.partitions("t")
    config = ProducerConfig.from_properties({"zk.connect": zk_connect})
    keys = [f"key-{i}" for i in range(12)]
    with Producer(config, broker_partition_info=info) as producer:
        for key in keys:
            producer.send("t", [key.encode()], key=key)
    for key in keys:
        broker_id, partition = partitions[abs(java_string_hashcode(key)) % len(partitions)]

        def stored():
            with SimpleConsumer("127.0.0.1", brokers[broker_id].port) as consumer:
                fetched = consumer.fetch(FetchRequest("t", partition, 0, 1 << 20))
                return key.encode() in {bytes(message.payload) for _o, _n, message in fetched}
        wait_for(stored, f"{key} on broker {broker_id} partition {partition}")


def test_refresh_reads_the_registry_in_the_calling_thread(broker_factory, zk_connect, zk, info):
    broker = start(broker_factory, zk_connect, 0)
    create_topic(broker, "t")
    wait_for(lambda: zk.exists(paths.broker_topic_path("t", 0)), "the registration")
    info.refresh()
    assert known(info, 0)
    assert info.partitions("t") == [(0, 0), (0, 1)]


def test_from_config_refuses_a_broker_list_config():
    with pytest.raises(ValueError):
        ZkBrokerPartitionInfo.from_config(ProducerConfig.from_properties({"broker.list": "0:localhost:9092"}))


def test_producer_with_zk_connect_discovers_brokers_by_itself(broker_factory, zk_connect):
    broker = start(broker_factory, zk_connect, 0, partitions=1)
    config = ProducerConfig.from_properties({"zk.connect": zk_connect})
    with Producer(config) as producer:  # no broker_partition_info given: it watches ZooKeeper
        wait_for(lambda: producer._info.partitions("self-found") == [(0, 0)], "the broker")
        producer.send("self-found", [b"found"])
    with SimpleConsumer("127.0.0.1", broker.port) as consumer:
        wait_for(lambda: [bytes(m.payload) for _, _, m in consumer.fetch(FetchRequest("self-found", 0, 0, 4096))]
                 == [b"found"], "the message")
