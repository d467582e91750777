"""Load for replication's fault tests: producers and consumers that follow the leaders.

Both speak to real brokers with the tests' ``Wire`` client on threads. They find each
partition's leader with a metadata request to whichever broker answers (``bootstrap()`` gives
the addresses to try, as a client's broker list would), and ask again whenever the leader
refuses, times out or drops the connection.

- ``LeaderProducer`` sends small sets with acks=all, one request in flight per partition, and
  records every acknowledged set (offset, payloads, time, which broker acknowledged it). Each
  attempt carries new payloads, so an unacknowledged attempt that did commit is told apart.
- ``LeaderConsumer`` reads its partitions with 0.7 fetches from their current leader and
  records every message it saw with its offset. Several of them stand in for the members of a
  consumer group (``group_of``); anything with ``.seen``, ``.stop()`` and ``.problems`` can
  replace them (the project's group consumer, once it exists).
- ``check_history`` compares what was acknowledged and seen with the partitions' final logs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tests.support.replicated_cluster import Wire
from twisted_broker.codec.kafka07.message_set import iter_entries, valid_bytes

Address = tuple[str, int]
PAUSE_S = 0.02
IO_TIMEOUT_S = 5.0


class Leaders:
    """Each partition's leader (broker id and address), asked of any bootstrap broker."""

    def __init__(self, bootstrap: Callable[[], Iterable[Address]], topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic

    def find(self, partition: int) -> tuple[int, Address] | None:
        for address in self.bootstrap():
            try:
                with Wire.at(address, timeout_s=2.0) as wire:
                    metadata = wire.metadata(self.topic)
            except (OSError, ConnectionError, AssertionError):
                continue
            addresses = {broker_id: (host, port) for broker_id, host, port in metadata.brokers}
            for p in metadata.topics[0].partitions:
                if p.partition == partition and p.leader in addresses:
                    return p.leader, addresses[p.leader]
        return None


@dataclass(frozen=True)
class Ack:
    partition: int
    offset: int
    payloads: tuple[bytes, ...]
    at: float  # time.monotonic() of the answer
    broker: int
    sent: float = 0.0  # time.monotonic() just before the request was written


class _Loop(threading.Thread):
    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._stopping = threading.Event()
        self.problems: list[str] = []

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stopping.set()
        self.join(timeout_s)
        assert not self.is_alive(), f"{self.name} did not stop"


class LeaderProducer(_Loop):
    """Produce of ``batch`` messages per request to one partition's leader, acks=all unless
    told otherwise."""

    def __init__(self, leaders: Leaders, partition: int, *, tag: str = "m", batch: int = 5, acks: int = -1,
                 timeout_ms: int = int(IO_TIMEOUT_S * 1000) - 1000, pinned: tuple[int, Address] | None = None) -> None:
        super().__init__(f"producer-{partition}")
        self.leaders, self.partition, self.tag, self.batch = leaders, partition, tag, batch
        self.acks, self.timeout_ms = acks, timeout_ms
        self.pinned = pinned  # send to this broker only, never following a leader change
        self.acked: list[Ack] = []
        self.refusals: list[tuple[float, int, int]] = []  # (time, broker, error)
        self.attempts = 0
        self._sequence = 0

    def _payloads(self) -> list[bytes]:
        start, self._sequence = self._sequence, self._sequence + self.batch
        return [f"{self.tag}-p{self.partition}-{seq:08d}".encode() for seq in range(start, start + self.batch)]

    def run(self) -> None:
        while not self._stopping.is_set():
            found = self.pinned or self.leaders.find(self.partition)
            if found is None:
                time.sleep(PAUSE_S)
                continue
            broker, address = found
            try:
                with Wire.at(address, timeout_s=IO_TIMEOUT_S) as wire:
                    while not self._stopping.is_set():
                        payloads = self._payloads()
                        self.attempts += 1
                        sent = time.monotonic()
                        error, offset = wire.produce(self.leaders.topic, self.partition, payloads,
                                                     acks=self.acks, timeout_ms=self.timeout_ms)
                        now = time.monotonic()
                        if error:
                            self.refusals.append((now, broker, error))
                            break
                        self.acked.append(Ack(self.partition, offset, tuple(payloads), now, broker, sent))
            except (OSError, ConnectionError):
                pass
            time.sleep(PAUSE_S)

    def first_ack_after(self, moment: float, *, not_by: int | None = None) -> float | None:
        return next((a.at for a in self.acked if a.at > moment and a.broker != not_by), None)

    def messages(self) -> int:
        return sum(len(a.payloads) for a in self.acked)


class LeaderConsumer(_Loop):
    """0.7 fetches of ``partitions`` from their current leaders; ``seen[p]``: (offset, payload)."""

    def __init__(self, leaders: Leaders, partitions: Iterable[int], name: str = "consumer",
                 pinned: tuple[int, Address] | None = None) -> None:
        super().__init__(name)
        self.leaders = leaders
        self.pinned = pinned
        self.seen: dict[int, list[tuple[int, bytes]]] = {p: [] for p in partitions}
        self.position = {p: 0 for p in self.seen}

    def run(self) -> None:
        where: dict[int, tuple[int, Address]] = {}
        while not self._stopping.is_set():
            idle = True
            for partition in self.seen:
                found = self.pinned or where.get(partition) or self.leaders.find(partition)
                if found is None:
                    continue
                where[partition] = found
                try:
                    read = self._read(found[1], partition)
                except (OSError, ConnectionError):
                    read = None
                if read is None:
                    del where[partition]  # ask for the leader again
                idle = idle and not read
            if idle:
                time.sleep(PAUSE_S)

    def _read(self, address: Address, partition: int) -> int | None:
        """Messages read; None when this broker cannot serve the partition now."""
        offset = self.position[partition]
        with Wire.at(address, timeout_s=IO_TIMEOUT_S) as wire:
            error, data = wire.fetch(self.leaders.topic, partition, offset)
        if error:
            if error == 1:  # out of range: a consumer must never be ahead of what exists
                self.problems.append(f"{self.name}: partition {partition} offset {offset} out of range")
            return None
        count = 0
        for start, _next, message in iter_entries(data, offset):
            self.seen[partition].append((start, bytes(message.payload)))
            count += 1
        self.position[partition] = offset + valid_bytes(data)
        return count

    def caught_up(self, ends: dict[int, int]) -> bool:
        return all(self.position[p] >= end for p, end in ends.items() if p in self.position)


def group_of(leaders: Leaders, partitions: list[int], members: int) -> list[LeaderConsumer]:
    """Consumers sharing ``partitions`` round robin, as a group's members would."""
    return [LeaderConsumer(leaders, partitions[i::members], name=f"member-{i}") for i in range(members)]


@dataclass
class History:
    acked: int = 0  # messages acknowledged
    seen: int = 0  # messages consumers saw
    lost: list[str] = field(default_factory=list)  # acknowledged or seen, then missing or changed

    @property
    def checked(self) -> int:
        return self.acked + self.seen


def check_history(final: dict[int, list[tuple[int, bytes]]], acks: Iterable[Ack],
                  consumers: Iterable) -> History:
    """Every acknowledged set and every message a consumer saw must be in the final log, at
    the same offset with the same payload."""
    at = {p: dict(entries) for p, entries in final.items()}
    index = {p: {offset: i for i, (offset, _) in enumerate(entries)} for p, entries in final.items()}
    history = History()
    for ack in acks:
        entries, first = final[ack.partition], index[ack.partition].get(ack.offset)
        for k, payload in enumerate(ack.payloads):
            history.acked += 1
            found = entries[first + k] if first is not None and first + k < len(entries) else None
            if found is None or found[1] != payload:
                history.lost.append(f"acknowledged {payload!r} (set at {ack.partition}/{ack.offset}, "
                                    f"message {k}): final log has {found!r}")
    for consumer in consumers:
        for partition, seen in consumer.seen.items():
            for offset, payload in seen:
                history.seen += 1
                if at[partition].get(offset) != payload:
                    history.lost.append(f"{consumer.name} saw {payload!r} at {partition}/{offset}: "
                                        f"final log has {at[partition].get(offset)!r}")
    return history
