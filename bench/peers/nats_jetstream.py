"""NATS 2.9 (Debian's nats-server) with JetStream, through nats-py.

Each test has a stream of its own (file storage, one subject of the same name). nats-server
writes stream messages to its block files as they arrive and fsyncs them on its sync timer
(``sync_interval``, 2 minutes by default): no per-message fsync. Producers publish on plain
NATS to the stream's subject, so JetStream stores them without sending an ack: nats-py queues
publishes and its flusher task writes them, and the producer yields to the event loop after
each message (b1) or after each 50 (b50) so that the flusher writes them in that many per
write; no reply is waited for (a JetStream publish with ack would wait per message). The
clock stops when the stream's info reports all ``n`` messages stored. The consumer is an
ordered push consumer (ack policy none, flow control, pending limits of 1 M messages / 1 GiB:
the generous prefetch); the pull consumer was slower here (39 k vs 188 k messages/s).
"""

from __future__ import annotations

import asyncio
import os
import time

import nats
from nats.js.api import StorageType, StreamConfig

from bench.peers.base import Go, Peer
from bench.peers.harness import ServerProcess, debian_version, free_port, latency_ns, latency_summary, payload_pool, \
    stamped_payload

SERVER = "/usr/sbin/nats-server"
PENDING_MSGS = 1_000_000
PENDING_BYTES = 1 << 30


class NatsServer(ServerProcess):
    name = "nats"

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.port = free_port()
        self.data_dir = os.path.join(directory, "jetstream")

    def command(self):
        return [SERVER, "-a", "127.0.0.1", "-p", str(self.port), "--jetstream", "--store_dir", self.data_dir], {}

    def version(self) -> str:
        return debian_version("nats-server")


async def _connect(port: int) -> nats.NATS:
    return await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False, max_reconnect_attempts=0)


async def _stored(js, dest: str) -> int:
    return (await js.stream_info(dest)).state.messages


class NatsJetStream(Peer):
    key = "nats"
    label = "NATS JetStream"
    settings = {
        "server": "nats-server --jetstream --store_dir DIR -a 127.0.0.1",
        "persistence": "a file-storage stream per test; block files written as messages arrive, "
                       "fsynced on the server's sync timer (2 min): no per-message fsync",
        "produce": "core NATS publish to the stream's subject (JetStream stores it, no ack); the client's "
                   "flusher writes 1 (b1) or 50 (b50) messages per write; done when stream info counts n",
        "consume": f"ordered push consumer (ack none, flow control), pending limits {PENDING_MSGS:,} "
                   f"messages / {PENDING_BYTES >> 20} MiB",
        "latency": "the same push consumer subscribed before the producer starts",
    }

    def make_server(self, directory: str) -> NatsServer:
        return NatsServer(directory)

    def create(self, server, dest: str) -> None:
        async def create() -> None:
            nc = await _connect(server.port)
            await nc.jetstream().add_stream(StreamConfig(name=dest, subjects=[dest], storage=StorageType.FILE))
            await nc.close()
        asyncio.run(create())

    def delete(self, server, dest: str) -> None:
        async def delete() -> None:
            nc = await _connect(server.port)
            await nc.jetstream().delete_stream(dest)
            await nc.close()
        asyncio.run(delete())

    def produce(self, *, port: int, dest: str, n: int, batch: int, go: Go, **_: object) -> dict:
        async def produce() -> dict:
            nc = await _connect(port)
            js = nc.jetstream()
            start = await _stored(js, dest)
            pool = payload_pool()
            size = len(pool)
            go()
            started = time.perf_counter()
            publish = nc.publish
            for first in range(0, n, batch):
                for i in range(first, min(first + batch, n)):
                    await publish(dest, pool[i % size])
                await asyncio.sleep(0)  # the flusher task writes what is pending
            sent = time.perf_counter()
            while (stored := await _stored(js, dest)) < start + n:
                await asyncio.sleep(0.002)
            done = time.perf_counter()
            await nc.close()
            if stored != start + n:
                raise RuntimeError(f"{dest}: {stored - start} messages stored, expected {n}")
            return {"seconds": done - started, "sent_s": sent - started}
        return asyncio.run(produce())

    def _drain(self, port: int, dest: str, n: int, go: Go, on_message, *, subscribe_first: bool) -> float:
        """Receive ``n`` messages of ``dest``; the clock runs from go (the consume test
        subscribes after it, the latency test before it)."""
        async def drain() -> float:
            nc = await _connect(port)
            js = nc.jetstream()
            finished = asyncio.Event()
            got = 0

            async def callback(msg) -> None:
                nonlocal got
                on_message(msg.data)
                got += 1
                if got == n:
                    finished.set()

            async def subscribe() -> None:
                await js.subscribe(dest, cb=callback, ordered_consumer=True, pending_msgs_limit=PENDING_MSGS,
                                   pending_bytes_limit=PENDING_BYTES)
            if subscribe_first:
                await subscribe()
            go()
            started = time.perf_counter()
            if not subscribe_first:
                await subscribe()
            try:
                await asyncio.wait_for(finished.wait(), 600)
            except asyncio.TimeoutError:
                raise TimeoutError(f"{dest}: {got} of {n} messages received") from None
            seconds = time.perf_counter() - started
            await nc.close()
            return seconds
        return asyncio.run(drain())

    def consume(self, *, port: int, dest: str, n: int, go: Go, **_: object) -> dict:
        counted = [0]

        def count(data: bytes) -> None:
            counted[0] += len(data)
        seconds = self._drain(port, dest, n, go, count, subscribe_first=False)
        return {"seconds": seconds, "payload_bytes": counted[0]}

    def latency_consume(self, *, port: int, dest: str, n: int, go: Go, **_: object) -> dict:
        samples: list[int] = []
        self._drain(port, dest, n, go, lambda data: samples.append(latency_ns(data, time.monotonic_ns())),
                    subscribe_first=True)
        return latency_summary(samples)

    def latency_produce(self, *, port: int, dest: str, n: int, rate: float, go: Go, **_: object) -> dict:
        async def produce() -> dict:
            nc = await _connect(port)
            go()
            started = time.monotonic()
            for i in range(n):
                delay = started + i / rate - time.monotonic()
                await asyncio.sleep(max(delay, 0))  # also lets the flusher write the message
                await nc.publish(dest, stamped_payload())
            await nc.flush()
            await nc.close()
            return {"seconds": time.monotonic() - started}
        return asyncio.run(produce())
