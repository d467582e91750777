"""kcat's balanced consumer (``kcat -G``) as a group member for tests/kafka_clients/test_clients.py:
records come as JSON envelopes on stdout, assignments as kcat's rebalance lines on stderr.
The rest of kcat's tests are in tests/kafka_clients/test_kcat.py."""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import threading
import time

from tests.support.kafka_clients.records import Consumed, Record

NAME = "kcat"
_ASSIGNED = re.compile(r"rebalanced \(memberid [^)]*\): (assigned|revoked): (.*)$")


class Member:
    """``kcat -G``: librdkafka stores each offset as the record is printed and commits what
    it stored on a timer and when SIGINT stops it, so ``commit`` asks for nothing more."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.process = subprocess.Popen(
            ["kcat", "-b", bootstrap, "-G", group, "-J", "-u", "-X", "auto.offset.reset=earliest",
             "-X", "session.timeout.ms=10000", "-X", "heartbeat.interval.ms=1000",
             "-X", "auto.commit.interval.ms=500", topic],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.records: queue.Queue = queue.Queue()
        self.assigned: set[int] = set()
        threading.Thread(target=self._read_records, daemon=True).start()
        threading.Thread(target=self._read_rebalances, daemon=True).start()

    def _read_records(self) -> None:
        for line in self.process.stdout:
            envelope = json.loads(line)
            flat = envelope.get("headers") or []
            key = envelope["key"]
            self.records.put(Consumed(envelope["partition"], envelope["offset"], Record(
                None if key is None else key.encode(), envelope["payload"].encode(),
                tuple((flat[i], flat[i + 1].encode()) for i in range(0, len(flat), 2)), envelope["ts"])))

    def _read_rebalances(self) -> None:
        for line in self.process.stderr:
            match = _ASSIGNED.search(line.strip())
            if match:
                partitions = {int(p) for p in re.findall(r"\[(\d+)\]", match.group(2))}
                self.assigned = partitions if match.group(1) == "assigned" else set()

    def poll(self, timeout_s: float = 0.2) -> list[Consumed]:
        found, deadline = [], time.monotonic() + timeout_s
        while True:
            try:
                found.append(self.records.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                if self.process.poll() is not None:
                    raise RuntimeError(f"kcat -G exited with {self.process.returncode}")
                return found

    def assignment(self) -> set[int]:
        return self.assigned

    def commit(self) -> None:
        """Nothing to ask: close() (SIGINT) commits what kcat printed."""

    def close(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
