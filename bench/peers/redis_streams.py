"""Redis 7 (Debian's redis-server) with Streams, through redis-py and hiredis.

Messages are stream entries (``XADD key * d <payload>``), one stream per test. Persistence is
the append-only file with ``appendfsync everysec`` (written before each reply, fsynced once a
second by a background thread: no per-message fsync), RDB snapshots off so that they do not
write in the middle of a test, and AOF rewrites off so that the file measures what a stream
entry costs in the log. Producers pipeline: commands are written without waiting for their
replies, which a second thread reads and checks; the last reply means every entry is in the
stream and the AOF. The consumer is the Kafka-like one: ``XREAD COUNT 5000`` from the last id
it saw (no group, no acks), blocking (``BLOCK``) when caught up for the latency test.
"""

from __future__ import annotations

import os
import threading
import time

import redis

from bench.peers.base import Go, Peer
from bench.peers.harness import ServerProcess, debian_version, free_port, latency_ns, latency_summary, paced, \
    payload_pool, stamped_payload

SERVER = "/usr/bin/redis-server"
READ_COUNT = 5000  # entries per XREAD: the "prefetch"


class RedisServer(ServerProcess):
    name = "redis"

    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.port = free_port()
        self.data_dir = os.path.join(directory, "data")
        os.makedirs(self.data_dir, exist_ok=True)

    def command(self):
        return [SERVER, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.data_dir,
                "--daemonize", "no", "--appendonly", "yes", "--appendfsync", "everysec",
                "--save", "", "--auto-aof-rewrite-percentage", "0", "--protected-mode", "yes"], {}

    def ready(self) -> bool:
        try:
            return redis.Redis(port=self.port, socket_timeout=1).ping()
        except redis.RedisError:
            return False

    def version(self) -> str:
        return debian_version("redis-server")


class _Replies(threading.Thread):
    """Reads and checks ``count`` replies while the main thread keeps writing commands."""

    def __init__(self, connection: redis.connection.Connection, count: int) -> None:
        super().__init__(daemon=True)
        self._connection, self._count = connection, count
        self.error: BaseException | None = None
        self.finished_at = 0.0

    def run(self) -> None:
        try:
            read = self._connection.read_response
            for _ in range(self._count):
                read()  # raises ResponseError for a refused command
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.error = exc
        self.finished_at = time.perf_counter()

    def result(self) -> float:
        self.join()
        if self.error is not None:
            raise self.error
        return self.finished_at


class RedisStreams(Peer):
    key = "redis"
    label = "Redis Streams"
    settings = {
        "server": "redis-server --appendonly yes --appendfsync everysec --save '' "
                  "--auto-aof-rewrite-percentage 0, bound to 127.0.0.1",
        "persistence": "append-only file, fsync once a second (everysec): no per-message fsync",
        "message": "one stream entry, XADD key * d <200 bytes>",
        "produce": "pipelined: b1 writes each XADD on its own, b50 writes 50 in one write; replies "
                   "read by a second thread, never waited for per message; done at the last reply",
        "consume": f"XREAD COUNT {READ_COUNT} from the last id (Kafka-like: no group, no acks)",
        "latency": "XREAD BLOCK from the last id; producer one XADD per message",
    }

    def make_server(self, directory: str) -> RedisServer:
        return RedisServer(directory)

    def delete(self, server, dest: str) -> None:
        redis.Redis(port=server.port).delete(dest)

    def _connection(self, port: int) -> redis.connection.Connection:
        connection = redis.Redis(port=port).connection_pool.get_connection()
        connection.connect()
        return connection

    def produce(self, *, port: int, dest: str, n: int, batch: int, go: Go, **_: object) -> dict:
        connection = self._connection(port)
        pack = connection.pack_command
        pool = payload_pool()
        size = len(pool)
        # Packing is part of the client's work: done in the timed loop, as every system's is.
        send = connection.send_packed_command
        replies = _Replies(connection, n)
        go()
        started = time.perf_counter()
        replies.start()
        for first in range(0, n, batch):
            commands = [pack("XADD", dest, "*", "d", pool[i % size]) for i in range(first, min(first + batch, n))]
            send([b"".join(part for command in commands for part in command)], check_health=False)
        sent = time.perf_counter()
        done = replies.result()
        return {"seconds": done - started, "sent_s": sent - started}

    def consume(self, *, port: int, dest: str, n: int, go: Go, **_: object) -> dict:
        client = redis.Redis(port=port)
        client.ping()
        go()
        started = time.perf_counter()
        last, got, payload_bytes = "0-0", 0, 0
        while got < n:
            reply = client.xread({dest: last}, count=READ_COUNT)
            if not reply:
                raise RuntimeError(f"{dest}: stream ended after {got} of {n} entries")
            entries = reply[0][1]
            for entry_id, fields in entries:
                payload_bytes += len(fields[b"d"])
            got += len(entries)
            last = entries[-1][0]
        seconds = time.perf_counter() - started
        if payload_bytes != got * len(payload_pool(1)[0]):
            raise RuntimeError(f"{dest}: {payload_bytes} payload bytes in {got} entries")
        return {"seconds": seconds, "messages": got, "payload_bytes": payload_bytes}

    def latency_consume(self, *, port: int, dest: str, n: int, go: Go, **_: object) -> dict:
        client = redis.Redis(port=port)
        client.ping()
        go()
        samples: list[int] = []
        last = "0-0"
        while len(samples) < n:
            reply = client.xread({dest: last}, count=1000, block=10_000)
            now = time.monotonic_ns()
            if not reply:
                raise TimeoutError(f"{dest}: nothing for 10 s after {len(samples)} of {n}")
            entries = reply[0][1]
            samples.extend(latency_ns(fields[b"d"], now) for _id, fields in entries)
            last = entries[-1][0]
        return latency_summary(samples)

    def latency_produce(self, *, port: int, dest: str, n: int, rate: float, go: Go, **_: object) -> dict:
        connection = self._connection(port)
        pack = connection.pack_command
        send = connection.send_packed_command
        replies = _Replies(connection, n)
        go()
        started = time.perf_counter()
        replies.start()
        for _ in paced(n, rate):
            send(pack("XADD", dest, "*", "d", stamped_payload()), check_health=False)
        replies.result()
        return {"seconds": time.perf_counter() - started}
