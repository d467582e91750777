"""kafka-python (pure Python) as a client adapter for tests/kafka_clients/test_clients.py."""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future

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
    """A group member; ``poll`` returns the records it got, ``commit`` commits what it consumed.

    Its consumer polls on a thread of its own, as an application's does. kafka-python 3.0.12
    drops a JoinGroup and SyncGroup that complete while no ``poll()`` of that consumer awaits
    them: its next ``poll()`` sends JoinGroup again, and from the group's leader that starts a
    new rebalance (Kafka's coordinator rule, which the broker keeps). Members polled in turn
    from one thread hit that window at every rebalance (one waits while the other's join
    completes) and can rebalance every second for as long as the test waits; a member that
    always has a poll waiting leaves a window of a few microseconds between two polls.
    """

    POLL_MS = 500

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        from kafka import KafkaConsumer
        self.consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                      session_timeout_ms=10_000, heartbeat_interval_ms=1_000,
                                      auto_offset_reset="earliest", enable_auto_commit=False)
        self._records: queue.Queue = queue.Queue()
        self._calls: queue.Queue = queue.Queue()  # (function, its result's Future): run between polls
        self._failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll_loop, name=f"kafka-python member of {group}", daemon=True)
        self._thread.start()

    def _poll_loop(self) -> None:
        try:
            while not self._stop.is_set():
                while not self._calls.empty():
                    function, result = self._calls.get_nowait()
                    try:
                        result.set_result(function())
                    except Exception as exc:  # the caller re-raises it
                        result.set_exception(exc)
                for messages in self.consumer.poll(timeout_ms=self.POLL_MS).values():
                    for message in messages:
                        self._records.put(_consumed(message))
        except BaseException as exc:  # poll() re-raises it in the test
            self._failure = exc

    def _on_poll_thread(self, function):
        result: Future = Future()
        self._calls.put((function, result))
        return result.result(timeout=30)  # the consumer is not thread-safe: calls go between polls

    def poll(self, timeout_s: float = 0.2) -> list[Consumed]:
        """The records polled since the last call, waiting up to ``timeout_s`` for the first."""
        if self._failure is not None:
            raise self._failure
        try:
            found = [self._records.get(timeout=timeout_s)]
        except queue.Empty:
            return []
        while not self._records.empty():
            found.append(self._records.get_nowait())
        return found

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def commit(self) -> None:
        self._on_poll_thread(self.consumer.commit)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.consumer.close()
