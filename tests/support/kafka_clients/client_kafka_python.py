"""kafka-python (pure Python) as a client adapter for tests/kafka_clients/test_clients.py."""

from __future__ import annotations

import time

from tests.support.kafka_clients.records import Consumed, Record

NAME = "kafka-python"
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def _producer(bootstrap: str, compression: str, idempotent: bool):
    from kafka import KafkaProducer
    return KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                         compression_type=None if compression == "none" else compression,
                         enable_idempotence=idempotent, request_timeout_ms=15_000)


def produce(bootstrap: str, topic: str, records: list[Record], *, compression: str = "none",
            partition: int | None = 0, idempotent: bool = False) -> list[tuple[int, int]]:
    """Send ``records`` and return each one's acknowledged (partition, offset)."""
    producer = _producer(bootstrap, compression, idempotent)
    try:
        futures = [producer.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                                 timestamp_ms=r.timestamp_ms, partition=partition) for r in records]
        producer.flush(30)
        return [(m.partition, m.offset) for m in (f.get(30) for f in futures)]
    finally:
        producer.close(10)


def _consumed(message) -> Consumed:
    headers = tuple((k, bytes(v)) for k, v in (message.headers or []))
    return Consumed(message.partition, message.offset,
                    Record(message.key, message.value, headers, message.timestamp))


def consume(bootstrap: str, topic: str, count: int, *, partition: int = 0, timeout_s: float = 20.0
            ) -> list[Consumed]:
    """The first ``count`` records of ``topic``'s ``partition`` (fewer if the timeout ends first)."""
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, partition)])
        consumer.seek_to_beginning()
        found: list[Consumed] = []
        deadline = time.monotonic() + timeout_s
        while len(found) < count and time.monotonic() < deadline:
            for messages in consumer.poll(200).values():
                found.extend(_consumed(m) for m in messages)
        return found[:count]
    finally:
        consumer.close()


def offset_for_time(bootstrap: str, topic: str, timestamp_ms: int, *, partition: int = 0) -> int | None:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, partition)
        answer = consumer.offsets_for_times({tp: timestamp_ms})[tp]
        return None if answer is None else answer.offset
    finally:
        consumer.close()


class Member:
    """A group member; ``poll`` returns the records it got, ``commit`` commits what it consumed."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        from kafka import KafkaConsumer
        self.consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                      session_timeout_ms=10_000, heartbeat_interval_ms=1_000,
                                      auto_offset_reset="earliest", enable_auto_commit=False)

    def poll(self, timeout_s: float = 0.2) -> list[Consumed]:
        return [_consumed(m) for messages in self.consumer.poll(int(timeout_s * 1000)).values()
                for m in messages]

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def commit(self) -> None:
        self.consumer.commit()

    def close(self) -> None:
        self.consumer.close()
