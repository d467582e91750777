"""confluent-kafka (librdkafka) as a client adapter for tests/kafka_clients/test_clients.py."""

from __future__ import annotations

import time

from tests.support.kafka_clients.records import Consumed, Record

NAME = "confluent-kafka"
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def producer(bootstrap: str, **settings):
    from confluent_kafka import Producer
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **settings})


def produce(bootstrap: str, topic: str, records: list[Record], *, compression: str = "none",
            partition: int | None = 0, idempotent: bool = False) -> list[tuple[int, int]]:
    """Send ``records`` and return each one's acknowledged (partition, offset)."""
    client = producer(bootstrap, **{"compression.type": compression, "acks": "all",
                                    "enable.idempotence": idempotent, "message.timeout.ms": 30_000})
    reports: list = [None] * len(records)

    def delivered(index):
        def report(error, message):
            reports[index] = error or (message.partition(), message.offset())
        return report

    for index, r in enumerate(records):
        client.produce(topic, value=r.value, key=r.key, headers=list(r.headers), timestamp=r.timestamp_ms,
                       partition=-1 if partition is None else partition, on_delivery=delivered(index))
        client.poll(0)
    left = client.flush(30)
    assert left == 0, f"{left} records not delivered"
    errors = [report for report in reports if not isinstance(report, tuple)]
    assert not errors, f"delivery failed: {errors[:3]}"
    return reports


def _consumed(message) -> Consumed:
    headers = tuple((k, bytes(v)) for k, v in (message.headers() or []))
    return Consumed(message.partition(), message.offset(),
                    Record(message.key(), message.value(), headers, message.timestamp()[1]))


def consume(bootstrap: str, topic: str, count: int, *, partition: int = 0, timeout_s: float = 20.0
            ) -> list[Consumed]:
    """The first ``count`` records of ``topic``'s ``partition`` (fewer if the timeout ends first)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-assign-only",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        found: list[Consumed] = []
        deadline = time.monotonic() + timeout_s
        while len(found) < count and time.monotonic() < deadline:
            for message in consumer.consume(count - len(found), 0.2):
                assert message.error() is None, message.error()
                found.append(_consumed(message))
        return found[:count]
    finally:
        consumer.close()


def offset_for_time(bootstrap: str, topic: str, timestamp_ms: int, *, partition: int = 0) -> int | None:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-offsets-only"})
    try:
        [answer] = consumer.offsets_for_times([TopicPartition(topic, partition, timestamp_ms)], 10)
        assert answer.error is None, answer.error
        return None if answer.offset < 0 else answer.offset
    finally:
        consumer.close()


class Member:
    """A group member; ``poll`` returns the records it got, ``commit`` commits what it consumed."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        from confluent_kafka import Consumer
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1_000,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.consumer.subscribe([topic])
        self.consumed_any = False

    def poll(self, timeout_s: float = 0.2) -> list[Consumed]:
        found = []
        for message in self.consumer.consume(100, timeout_s):
            assert message.error() is None, message.error()
            found.append(_consumed(message))
        self.consumed_any |= bool(found)
        return found

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def commit(self) -> None:
        if self.consumed_any:  # librdkafka refuses a commit with nothing consumed (_NO_OFFSET)
            self.consumer.commit(asynchronous=False)

    def close(self) -> None:
        self.consumer.close()
