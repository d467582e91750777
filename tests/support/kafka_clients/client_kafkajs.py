"""kafkajs (node) as a client adapter for tests/kafka_clients/test_clients.py: each call runs
js/client.js beside this file in a ``node`` process (its node_modules come from ``npm ci``, run
by the Makefile); a group member is a long-lived process that prints JSON lines."""

from __future__ import annotations

import base64
import json
import queue
import subprocess
import threading
import time
from pathlib import Path

from tests.support.kafka_clients.records import Consumed, Record

NAME = "kafkajs"
# kafkajs has gzip itself and snappy from kafkajs-snappy (pure JavaScript); its lz4 and zstd
# codecs need native builds from the network, which this machine's installs cannot do.
COMPRESSIONS = ("none", "gzip", "snappy")
JS = Path(__file__).with_name("js")
TIMEOUT_S = 60


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _node(*args: object, stdin: object = None) -> object:
    done = subprocess.run(["node", "client.js", *map(str, args)], cwd=JS, capture_output=True, text=True,
                          input=None if stdin is None else json.dumps(stdin), timeout=TIMEOUT_S)
    if done.returncode:
        raise RuntimeError(f"kafkajs {args[0]} exited with {done.returncode}: {done.stderr[-3000:]}")
    return json.loads(done.stdout)


def _consumed(item: dict) -> Consumed:
    r = item["record"]
    return Consumed(item["partition"], item["offset"], Record(
        _bytes(r["key"]), _bytes(r["value"]), tuple((name, _bytes(value)) for name, value in r["headers"]),
        r["timestamp_ms"]))


def produce(bootstrap: str, topic: str, records: list[Record], *, compression: str = "none",
            partition: int | None = 0, idempotent: bool = False) -> list[tuple[int, int]]:
    sent = [{"key": _b64(r.key), "value": _b64(r.value), "timestamp_ms": r.timestamp_ms,
             "headers": [[name, _b64(value)] for name, value in r.headers]} for r in records]
    answer = _node("produce", bootstrap, topic, compression, str(idempotent).lower(),
                   "any" if partition is None else partition, stdin=sent)
    return [tuple(pair) for pair in answer]


def consume(bootstrap: str, topic: str, count: int, *, partition: int = 0, timeout_s: float = 20.0
            ) -> list[Consumed]:
    """kafkajs reads only as a group member: a group of its own, from the beginning."""
    return [_consumed(item) for item in _node("consume", bootstrap, topic, partition, count, int(timeout_s * 1000))]


def offset_for_time(bootstrap: str, topic: str, timestamp_ms: int, *, partition: int = 0) -> int | None:
    return _node("offset-for-time", bootstrap, topic, partition, timestamp_ms)


class Member:
    """A group member in a node process; each record it reports is already committed."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.process = subprocess.Popen(["node", "client.js", "member", bootstrap, topic, group], cwd=JS,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.assigned: set[int] = set()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def poll(self, timeout_s: float = 0.2) -> list[Consumed]:
        found, deadline = [], time.monotonic() + timeout_s
        while True:
            try:
                event = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return found
            if event is None:
                raise RuntimeError(f"the kafkajs member exited with {self.process.wait()}")
            if "assigned" in event:
                self.assigned = set(event["assigned"])
            elif "consumed" in event:
                found.append(_consumed(event["consumed"]))

    def assignment(self) -> set[int]:
        return self.assigned

    def commit(self) -> None:
        """Nothing left to do: the member commits each record before reporting it."""

    def close(self) -> None:
        try:
            self.process.stdin.write("stop\n")
            self.process.stdin.flush()
            self.process.wait(20)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
