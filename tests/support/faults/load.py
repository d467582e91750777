"""Load for the fault tests: a producer at full speed and a consumer that records what it saw.

Both speak the wire protocol over raw sockets with the spec's encoder, on threads, and stop by
themselves when their connection breaks (the broker was killed) or when told to.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

from tests.support.faults.oracle import walk
from tests.support.spec_encoding import fetch, message_set_of, offsets, produce

FETCH_BYTES = 1 << 20


def payload(partition: int, sequence: int) -> bytes:
    """A message that names itself; lengths vary so entries straddle pages and segments."""
    return b"p%d seq %d|" % (partition, sequence) + b"%x" % sequence * (sequence % 23)


def read_response(sock: socket.socket) -> bytes:
    header = _read_exactly(sock, 4)
    (size,) = struct.unpack(">i", header)
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    chunks, remaining = [], count
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise ConnectionError("closed by the broker")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class FullSpeedProducer(threading.Thread):
    """Sends batches of 1-50 messages round-robin over the partitions, as fast as it can."""

    def __init__(self, port: int, topic: str, partitions: int, first_sequence: int, seed: int) -> None:
        super().__init__(daemon=True, name="full-speed-producer")
        self.port, self.topic, self.partitions = port, topic, partitions
        self.sequence = first_sequence
        self.messages_sent = 0
        self.error: BaseException | None = None
        self._random = random.Random(seed)
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
                while not self._halt.is_set():
                    partition = self._random.randrange(self.partitions)
                    count = self._random.randint(1, 50)
                    batch = [payload(partition, self.sequence + i) for i in range(count)]
                    sock.sendall(produce(self.topic, partition, message_set_of(*batch)))
                    self.sequence += count
                    self.messages_sent += count
        except OSError as exc:  # killed under us: expected
            self.error = exc

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


class RecordingConsumer(threading.Thread):
    """Fetches every partition from where it stopped and keeps every byte it was served.

    ``seen[p]`` is the partition's log from offset 0 as this consumer read it: what was
    visible to a fetch, hence acknowledged as flushed. It carries over from run to run
    (``resume``), so a gap or a rewrite anywhere shows as a mismatch with the final log.
    ``problems`` collects anything a correct broker never serves (an invalid entry, an
    OffsetOutOfRange at the consumer's own position).
    """

    def __init__(self, topic: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.topic, self.partitions = topic, partitions
        self.seen = [bytearray() for _ in range(partitions)]
        self.fetch_starts: list[list[int]] = [[] for _ in range(partitions)]  # boundaries it fetched at
        self.messages = [0] * partitions
        self.problems: list[str] = []
        self.port = 0
        self._halt = threading.Event()

    def resume(self, port: int) -> "RecordingConsumer":
        """A fresh thread over the same record, reading from a (restarted) broker."""
        follower = RecordingConsumer(self.topic, self.partitions)
        follower.seen, follower.messages, follower.problems = self.seen, self.messages, self.problems
        follower.fetch_starts = self.fetch_starts
        follower.port = port
        return follower

    def run(self) -> None:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
                while not self._halt.is_set():
                    if not any([self._fetch_once(sock, p) for p in range(self.partitions)]):
                        time.sleep(0.001)
        except OSError:
            pass  # killed under us

    def _fetch_once(self, sock: socket.socket, partition: int) -> bool:
        offset = len(self.seen[partition])
        sock.sendall(fetch(self.topic, partition, offset, FETCH_BYTES))
        body = read_response(sock)
        (error,) = struct.unpack_from(">h", body)
        if error:
            self.problems.append(f"fetch {self.topic}-{partition} at {offset}: error {error}")
            self._halt.set()
            return False
        entries, valid, problem = walk(body[2:], offset)
        if problem is not None and not problem.incomplete:
            self.problems.append(f"served an invalid entry in {self.topic}-{partition}: {problem}")
            self._halt.set()
            return False
        if valid:
            self.fetch_starts[partition].append(offset)
        self.seen[partition] += body[2:2 + valid]
        self.messages[partition] += len(entries)
        return bool(valid)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)

    def catch_up(self, port: int, timeout_s: float = 20.0) -> None:
        """Read (in this thread) until every partition's latest offset has been seen."""
        deadline = time.monotonic() + timeout_s
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            for partition in range(self.partitions):
                sock.sendall(offsets(self.topic, partition, -1, 1))
                body = read_response(sock)
                (latest,) = struct.unpack_from(">q", body, 6)
                while len(self.seen[partition]) < latest:
                    assert time.monotonic() < deadline, "the consumer did not catch up"
                    self._fetch_once(sock, partition)
                    assert not self.problems, self.problems
