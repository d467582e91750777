"""aiokafka (asyncio) as a client adapter for tests/modern/test_clients.py.

Each call runs on an event loop of its own; the group members share one loop, so every
member's heartbeats run while the test polls any of them.
"""

from __future__ import annotations

import asyncio
import time

from tests.modern.records import Consumed, Record

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

    return asyncio.run(run())


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

    return asyncio.run(run())


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

    return asyncio.run(run())


_MEMBERS_LOOP = asyncio.new_event_loop()


class Member:
    """A group member; ``poll`` returns the records it got, ``commit`` commits what it consumed."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        from aiokafka import AIOKafkaConsumer
        self.loop = _MEMBERS_LOOP

        async def start():  # aiokafka objects are made inside their loop
            consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                        session_timeout_ms=10_000, heartbeat_interval_ms=1_000,
                                        auto_offset_reset="earliest", enable_auto_commit=False)
            await consumer.start()
            return consumer

        self.consumer = self.loop.run_until_complete(start())

    def poll(self, timeout_s: float = 0.2) -> list[Consumed]:
        batches = self.loop.run_until_complete(self.consumer.getmany(timeout_ms=int(timeout_s * 1000)))
        return [_consumed(m) for messages in batches.values() for m in messages]

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def commit(self) -> None:
        self.loop.run_until_complete(self.consumer.commit())

    def close(self) -> None:
        self.loop.run_until_complete(self.consumer.stop())
