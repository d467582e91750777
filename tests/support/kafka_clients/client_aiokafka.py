"""aiokafka (asyncio) as a client adapter for tests/kafka_clients/test_clients.py.

Every call runs on one event loop that runs in a thread of its own: under the whole suite
the test's own thread may already run an asyncio loop (Playwright's sync API, which
tests/browser keep for the session), where ``asyncio.run`` refuses to start. The group members share that loop, so each member's
heartbeats go on while the test looks at another.
"""

from __future__ import annotations

import asyncio
import threading
import time

from tests.support.kafka_clients.records import Consumed, Record

NAME = "aiokafka"
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


def produce(bootstrap: str, topic: str, records: list[Record], *, compression: str = "none",
            partition: int | None = 0, idempotent: bool = False) -> list[tuple[int, int]]:
    """Send ``records`` and return each one's acknowledged (partition, offset)."""
    from aiokafka import AIOKafkaProducer

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                    compression_type=None if compression == "none" else compression,
                                    enable_idempotence=idempotent, request_timeout_ms=15_000)
        await producer.start()
        try:
            futures = [await producer.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                                           timestamp_ms=r.timestamp_ms, partition=partition) for r in records]
            return [(m.partition, m.offset) for m in await asyncio.gather(*futures)]
        finally:
            await producer.stop()

    return _run(run())


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _run(coroutine):
    """Run ``coroutine`` on the adapter's loop thread and return its result."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="aiokafka-loop", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coroutine, _LOOP).result()


def _consumed(message) -> Consumed:
    headers = tuple((k, bytes(v)) for k, v in (message.headers or ()))
    return Consumed(message.partition, message.offset,
                    Record(message.key, message.value, headers, message.timestamp))


def consume(bootstrap: str, topic: str, count: int, *, partition: int = 0, timeout_s: float = 20.0
            ) -> list[Consumed]:
    """The first ``count`` records of ``topic``'s ``partition`` (fewer if the timeout ends first)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            found: list[Consumed] = []
            deadline = time.monotonic() + timeout_s
            while len(found) < count and time.monotonic() < deadline:
                for messages in (await consumer.getmany(timeout_ms=200)).values():
                    found.extend(_consumed(m) for m in messages)
            return found[:count]
        finally:
            await consumer.stop()

    return _run(run())


def offset_for_time(bootstrap: str, topic: str, timestamp_ms: int, *, partition: int = 0) -> int | None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition)
            answer = (await consumer.offsets_for_times({tp: timestamp_ms}))[tp]
            return None if answer is None else answer.offset
        finally:
            await consumer.stop()

    return _run(run())




class Member:
    """A group member; ``poll`` returns the records it got, ``commit`` commits what it consumed."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        from aiokafka import AIOKafkaConsumer

        async def start():  # aiokafka objects are made inside their loop
            consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                        session_timeout_ms=10_000, heartbeat_interval_ms=1_000,
                                        auto_offset_reset="earliest", enable_auto_commit=False)
            await consumer.start()
            return consumer

        self.consumer = _run(start())

    def poll(self, timeout_s: float = 0.2) -> list[Consumed]:
        batches = _run(self.consumer.getmany(timeout_ms=int(timeout_s * 1000)))
        return [_consumed(m) for messages in batches.values() for m in messages]

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def commit(self) -> None:
        _run(self.consumer.commit())

    def close(self) -> None:
        _run(self.consumer.stop())
