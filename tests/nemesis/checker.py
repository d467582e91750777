"""The nemesis run's checker: independent of the clients' own view, it reads everything back
once the faults are healed and the cluster has recovered, and compares it with what the
clients were told and what they saw.

- ``wait_recovered``: every broker answers, every partition of every topic is led by a live
  broker and its ISR is all its replicas, and every broker says so.
- ``final_logs``: each partition read from its leader to its high watermark: the modern
  topics with a confluent-kafka consumer (assigned, no group), the 0.7 topic with 0.7 fetches.
- ``compare_replicas``: each replica's segment files, byte by byte, against the leader's, up to
  the leader's high watermark (its 0.7-visible end, in bytes: 0.7 offsets are byte positions).
- ``verdict``: the figures (``Figures``) and the evidence of every violation.
"""

from __future__ import annotations

import re
import time
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field

from tests.support.replicated_cluster import Wire
from tests.support.faults.oracle import read_log
from twisted_broker.codec.kafka07.message_set import valid_bytes

Partition = tuple[str, int]


def metadata_from(broker, topics: list[str]):
    try:
        with Wire.at(broker.wire_address, timeout_s=3.0) as wire:
            return wire.metadata(*topics)
    except (OSError, ConnectionError, AssertionError):
        return None


def recovery_problem(brokers: dict, topics: list[str]) -> str | None:
    """None if every broker sees every partition led by a live broker with a full ISR."""
    live = {b.broker_id for b in brokers.values() if b.running}
    if len(live) < len(brokers):
        return f"brokers not running: {sorted(set(b.broker_id for b in brokers.values()) - live)}"
    views = set()
    for name, broker in brokers.items():
        answer = metadata_from(broker, topics)
        if answer is None:
            return f"{name} does not answer"
        for t in answer.topics:
            if t.error or not t.partitions:
                return f"{name}: {t.topic} error {t.error}"
            for p in t.partitions:
                if p.leader not in live or set(p.isr) != set(p.replicas):
                    return f"{name}: {t.topic}/{p.partition} leader {p.leader} isr {p.isr} replicas {p.replicas}"
        views.add(tuple((t.topic, tuple((p.partition, p.leader, p.isr) for p in t.partitions)) for t in answer.topics))
    return None if len(views) == 1 else f"brokers disagree: {views}"


def wait_recovered(brokers: dict, topics: list[str], timeout_s: float) -> tuple[bool, float, str | None]:
    start = time.monotonic()
    problem = "not checked"
    while time.monotonic() - start < timeout_s:
        problem = recovery_problem(brokers, topics)
        if problem is None:
            return True, time.monotonic() - start, None
        time.sleep(1.0)
    return False, time.monotonic() - start, problem


def layout(brokers: dict, topics: list[str]) -> dict[Partition, tuple[int, tuple[int, ...]]]:
    """(topic, partition) -> (leader, replicas), as the first broker that answers says."""
    for broker in brokers.values():
        answer = metadata_from(broker, topics)
        if answer is not None:
            return {(t.topic, p.partition): (p.leader, p.replicas) for t in answer.topics for p in t.partitions}
    raise RuntimeError("no broker answers a metadata request")


def visible_end(broker, topic: str, partition: int) -> int | None:
    """The byte offset up to which ``broker`` serves the partition to a 0.7 consumer (its
    high watermark for a replicated topic), by fetching to the end."""
    offset = 0
    try:
        with Wire.at(broker.wire_address, timeout_s=10.0) as wire:
            while True:
                error, data = wire.fetch(topic, partition, offset)
                if error:
                    return None
                step = valid_bytes(data)
                if not step:
                    return offset
                offset += step
    except (OSError, ConnectionError):
        return None


def read_modern(bootstrap: str, parts: list[Partition], timeout_s: float = 120.0) -> dict[Partition, list]:
    """(offset, value) of every record to the high watermark. Offsets here are byte positions
    (the logs are 0.7's), so the end is where the consumer's position reaches the watermark."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from tests.nemesis.clients import CLIENT_LOG
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "nemesis-checker", "enable.auto.commit": False,
                         "logger": CLIENT_LOG})
    try:
        ends = {tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=30)[1] for tp in parts}
        assigned = [TopicPartition(t, p, OFFSET_BEGINNING) for t, p in parts]
        consumer.assign(assigned)
        found: dict = {tp: [] for tp in parts}
        deadline = time.monotonic() + timeout_s
        while True:
            messages = consumer.consume(1000, 0.5)
            for message in messages:
                if message.error() is None:
                    found[(message.topic(), message.partition())].append((message.offset(), message.value()))
            if not messages:
                positions = {(tp.topic, tp.partition): tp.offset for tp in consumer.position(
                    [TopicPartition(t, p) for t, p in parts])}
                short = {tp: (positions[tp], end) for tp, end in ends.items() if end > 0 and positions[tp] < end}
                if not short:
                    return found
                if time.monotonic() > deadline:  # the checker reports what it could not read
                    found["unread"] = short
                    return found
    finally:
        consumer.close()


def read_07(broker, topic: str, partition: int) -> list[tuple[int, bytes]]:
    with Wire.at(broker.wire_address, timeout_s=10.0) as wire:
        return wire.read_all(topic, partition)


def producer_epochs(partition_dir, topic: str, partition: int) -> list[tuple[int, int, int]]:
    """(first offset, last offset, producer epoch) of each record batch stored in a modern
    topic's partition directory, in log order: which producer epoch wrote each record."""
    from twisted_broker.storage.log import Log, LogPolicy
    from twisted_broker.storage.log_directory import open_log_directory
    from twisted_broker.storage.record_offsets import iter_batch_headers
    log = Log(str(partition_dir), topic, partition, open_log_directory(str(partition_dir), time.time()),
              policy=LogPolicy(), now=time.time)
    try:
        return [(first, first + header.last_offset_delta, header.producer_epoch)
                for first, header in iter_batch_headers(log)]
    finally:
        log.close()


def epoch_finder(batches: dict[int, list[tuple[int, int, int]]]):
    """``epoch_of(partition, offset)``: the producer epoch of the batch holding that record."""
    firsts = {partition: [first for first, _, _ in rows] for partition, rows in batches.items()}

    def epoch_of(partition: int, offset: int) -> int | None:
        rows = batches.get(partition, [])
        k = bisect_right(firsts.get(partition, []), offset) - 1
        return rows[k][2] if k >= 0 and rows[k][0] <= offset <= rows[k][1] else None
    return epoch_of


def compare_replicas(brokers_by_id: dict, where: dict[Partition, tuple[int, tuple[int, ...]]],
                     settle_s: float = 30.0) -> tuple[list[str], dict[Partition, int]]:
    """Problems (a replica that differs from its leader below the high watermark) and each
    partition's high watermark in bytes. Retries while followers may still be catching up."""
    deadline = time.monotonic() + settle_s
    while True:
        problems, ends = [], {}
        for (topic, partition), (leader, replicas) in sorted(where.items()):
            end = visible_end(brokers_by_id[leader], topic, partition)
            if end is None:
                problems.append(f"{topic}/{partition}: leader {leader} does not serve it")
                continue
            ends[(topic, partition)] = end
            reference = read_log(brokers_by_id[leader].log_dir / f"{topic}-{partition}")[:end]
            for replica in replicas:
                copy = read_log(brokers_by_id[replica].log_dir / f"{topic}-{partition}")[:end]
                if copy != reference:
                    at = next((i for i, (a, b) in enumerate(zip(copy, reference)) if a != b), min(len(copy), end))
                    problems.append(f"{topic}/{partition}: broker {replica} differs from leader {leader} at byte {at} "
                                    f"(high watermark {end}, replica holds {len(copy)} bytes below it)")
        if not problems or time.monotonic() > deadline:
            return problems, ends
        time.sleep(2.0)


SEQUENCE = re.compile(rb"^[a-z]-p(\d+)-(\d+)$")


@dataclass
class Figures:
    rows: list[tuple[str, str]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)  # one line per kind, with a count
    evidence: list[str] = field(default_factory=list)

    def add(self, name: str, value, violation: bool = False, details: list[str] = ()) -> None:
        self.rows.append((name, f"{value:,}" if isinstance(value, int) else str(value)))
        if violation and value:
            self.violations.append(f"{name}: {value}")
            self.evidence += [f"[{name}] {d}" for d in details]


def check_producer(figures: Figures, label: str, acked: dict[bytes, tuple[int, int]], final: dict[int, list],
                   must_keep: bool, exactly_once: bool, epoch_of=None) -> None:
    """acked: value -> (partition, offset); final: partition -> [(offset, value)]; epoch_of:
    ``epoch_finder``'s, for an idempotent producer.

    A record stored twice, each copy by a different epoch of its producer, was sent again by
    the client after it bumped its own epoch: librdkafka does so for every partition when a
    message of any partition times out (message.timeout.ms), re-sending under the new epoch
    what it took as not persisted (a batch answered NOT_LEADER after its append). A new epoch
    starts at sequence 0, so no broker can tell the copy from a new record: Apache Kafka
    stores it twice too (librdkafka issue #4953). Those are counted on their own row; a
    duplicate within one epoch is the broker's, and a violation."""
    where: dict[bytes, list[tuple[int, int]]] = {}
    for partition, entries in final.items():
        for offset, value in entries:
            where.setdefault(value, []).append((partition, offset))
    lost = [f"{v!r} acknowledged at {a}: not in the final log" for v, a in acked.items() if v not in where]
    # librdkafka's idempotent producer reports a batch it knows persisted without knowing
    # where (a later batch of the same producer succeeded after this one's answer was lost,
    # or after a retriable error) as delivered with no offset: such a record must be present
    # in its partition, at any offset.
    unplaced = [v for v, a in acked.items() if a[1] is None]
    moved = [f"{v!r} acknowledged at {a}, found at {where[v]}" for v, a in acked.items()
             if v in where and (a not in where[v] if a[1] is not None else a[0] not in [p for p, _ in where[v]])]
    copies = {v: w for v, w in where.items() if len(w) > 1}
    resent = {v for v, w in copies.items() if epoch_of is not None and _one_copy_per_epoch(w, epoch_of)}
    duplicated = [f"{v!r} stored {len(w)} times: {w}" for v, w in copies.items() if v not in resent]
    figures.add(f"{label}: acknowledged", len(acked))
    figures.add(f"{label}: acknowledged without an offset (librdkafka)", len(unplaced))
    figures.add(f"{label}: lost", len(lost), violation=must_keep, details=lost[:50])
    figures.add(f"{label}: acknowledged at another offset", len(moved), violation=must_keep, details=moved[:50])
    figures.add(f"{label}: duplicated", len(duplicated), violation=exactly_once, details=duplicated[:50])
    if epoch_of is not None:
        figures.add(f"{label}: stored again by a new producer epoch (librdkafka's epoch bump)", len(resent))
        figures.evidence += [f"[{label}: new producer epoch] {v!r} stored at {copies[v]}, epochs "
                             f"{[epoch_of(p, o) for p, o in copies[v]]}" for v in sorted(resent)[:50]]
    if exactly_once:
        disorder = []
        for partition, entries in final.items():
            met: set[bytes] = set()
            numbers = []
            for _, value in entries:
                if value in resent and value in met:
                    continue  # the second copy of a resent record: ordered by its first
                met.add(value)
                if m := SEQUENCE.match(value):
                    numbers.append(int(m.group(2)))
            disorder += [f"partition {partition}: sequence {a} before {b}" for a, b in zip(numbers, numbers[1:]) if b <= a]
        figures.add(f"{label}: out of order", len(disorder), violation=True, details=disorder[:50])


def _one_copy_per_epoch(copies: list[tuple[int, int]], epoch_of) -> bool:
    epochs = [epoch_of(partition, offset) for partition, offset in copies]
    return None not in epochs and len(set(epochs)) == len(epochs)


def check_seen(figures: Figures, label: str, seen: list[tuple[Partition, int, bytes]],
               final: dict[Partition, dict[int, bytes]]) -> None:
    lost = [f"{tp[0]}/{tp[1]} offset {o}: saw {v!r}, final log has {final.get(tp, {}).get(o)!r}"
            for tp, o, v in seen if final.get(tp, {}).get(o) != v]
    figures.add(f"{label}: records seen by consumers", len(seen))
    figures.add(f"{label}: seen then lost", len(lost), violation=True, details=lost[:50])


def table(title: str, figures: Figures, faults: Counter) -> str:
    rows = [("faults injected", f"{sum(faults.values()):,}")]
    rows += [(f"  {kind}", f"{count:,}") for kind, count in sorted(faults.items())]
    rows += figures.rows
    width = max(len(name) for name, _ in rows)
    lines = [title, "-" * (width + 14)]
    lines += [f"{name:<{width}}  {value:>12}" for name, value in rows]
    lines.append("-" * (width + 14))
    lines.append("VIOLATIONS: " + ("; ".join(figures.violations) if figures.violations else "none"))
    return "\n".join(lines)
