"""Consumer groups of kafka-python on the modern listener of a real broker with ZooKeeper:
two members split the partitions, committed offsets land at 0.7's ZooKeeper paths, and a
member that starts later resumes after them."""

from __future__ import annotations

from kafka import KafkaAdminClient, KafkaProducer

from tests.support.kafka_clients.client_kafka_python import Member
from tests.support.modern_listener import start_with_listener
from tests.support.polling import wait_for


def member(port: int, group: str) -> Member:
    # A kafka-python consumer polling on its own thread (Member says why), earliest, no autocommit.
    return Member(f"127.0.0.1:{port}", "shared", group)


def produce(port: int, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", acks=1)
    for i, value in enumerate(values):
        producer.send("shared", value=value, partition=i % 2)
    producer.flush()
    producer.close()


def test_two_members_split_partitions_and_a_later_one_resumes_after_their_commits(broker_factory, zk_connect, zk):
    _broker, port = start_with_listener(broker_factory, zk_connect=zk_connect, properties={"num.partitions": "2"})
    produce(port, [b"before %d" % i for i in range(10)])
    first, second = member(port, "g"), member(port, "g")
    try:
        got = {id(first): [], id(second): []}

        def split_and_read() -> bool:
            for consumer in (first, second):
                got[id(consumer)] += [c.record.value for c in consumer.poll(0.2)]
            return (len(first.assignment()) == len(second.assignment()) == 1
                    and sum(map(len, got.values())) == 10)
        assert wait_for(split_and_read, "two members, one partition each, all read", timeout_s=30)
        first.commit()
        second.commit()
    finally:
        first.close()
        second.close()
    # 0.7's paths: <broker>-<local partition> for a 0.7 topic's partitions.
    assert sorted(zk.get_children("/consumers/g/offsets/shared")) == ["0-0", "0-1"]
    produce(port, [b"after %d" % i for i in range(4)])
    later = member(port, "g")
    try:
        values = []
        assert wait_for(lambda: values.extend(c.record.value for c in later.poll(0.2))
                        or len(values) >= 4, "the records after the commit", timeout_s=30)
        values += [c.record.value for c in later.poll(1.0)]
    finally:
        later.close()
    assert sorted(values) == [b"after %d" % i for i in range(4)]
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}")
    try:
        assert "g" in [group["group_id"] for group in admin.list_groups()]
    finally:
        admin.close()
