"""The modern listener of three brokers sharing a ZooKeeper: each advertises every broker's
listener, and a replicated topic is produced to and consumed from its leaders, with
acks=all, by kafka-python."""

from __future__ import annotations

import json

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.support.modern_listener import admin, start_with_listener
from tests.support.polling import wait_for


def test_three_brokers_advertise_each_other_and_serve_a_replicated_topic(broker_factory, zk_connect, zk):
    ports = {}
    for broker_id in range(3):
        _broker, ports[broker_id] = start_with_listener(broker_factory, f"b{broker_id}", broker_id=broker_id,
                                                         zk_connect=zk_connect,
                                                         properties={"default.replication.factor": "3"})
    client = admin(ports[1])
    try:
        assert wait_for(lambda: sorted((b["broker_id"], b["port"]) for b in client.describe_cluster()["brokers"])
                        == sorted(ports.items()), "three listeners")
        client.create_topics([NewTopic("r", 3, 3)])
        described = client.describe_topics(["r"])[0]
        assert sorted(len(p["replica_nodes"]) for p in described["partitions"]) == [3, 3, 3]
    finally:
        client.close()
    bootstrap = f"127.0.0.1:{ports[0]}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
    acknowledged = [producer.send("r", value=b"m%d" % i, partition=i % 3).get(15) for i in range(30)]
    producer.close()
    assert sorted({m.partition for m in acknowledged}) == [0, 1, 2]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=10000)
    try:
        consumer.assign([TopicPartition("r", p) for p in range(3)])
        values = []
        for record in consumer:
            values.append(record.value)
            if len(values) == 30:
                break
    finally:
        consumer.close()
    assert sorted(values) == sorted(b"m%d" % i for i in range(30))
    # A producer's Metadata request creates an unknown topic with default.replication.factor.
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{ports[2]}", acks=1)
    producer.send("auto", value=b"first").get(15)
    producer.close()
    assert len(json.loads(zk.get("/replication/topics/auto")[0])["partitions"]["0"]) == 3
