"""Planned ranges (OffsetRange), and cutting them at message starts (planning.py's step 3, "Splits").

Offsets are byte positions, so a split point cannot be computed: a range is cut near evenly
spaced targets, each moved to a real message start found by a small fetch at the target
(``find_message_start``: the first chain of complete entries with matching CRCs). The
executors' range reader uses the same probe to resume inside a range.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from twisted_broker.client.cluster import BrokerPartition, ReplicatedPartition
from twisted_broker.client.simple_consumer import SimpleConsumer
from twisted_broker.errors import InvalidMessage
from twisted_broker.codec.kafka07.message_search import find_message_start
from twisted_broker.codec.kafka07.requests import FetchRequest

log = logging.getLogger(__name__)

SPLIT_PROBE_BYTES = 64 * 1024  # the first look for a message start; fetch.size the second
MIN_PROBE_BYTES = 512  # the smallest window tried when a broker refuses a probe

PlannedPartition = BrokerPartition | ReplicatedPartition  # a 0.7 broker-partition, or a replicated partition


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Log offsets ``[start, end)`` of one partition; both are message boundaries."""

    target: PlannedPartition
    start: int
    end: int

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def size_bytes(self) -> int:
        return self.end - self.start


def split_range(consumer: SimpleConsumer, topic: str, whole: OffsetRange, *, split_bytes: int,
                probe_bytes: Iterable[int], segment_starts: Iterable[int] = ()) -> list[OffsetRange]:
    """``whole`` cut into pieces of about ``split_bytes``, each ending on a message start.

    A target where no message start can be found (a message larger than the probes, or a
    broker refusing the probe) is skipped, so a piece may be larger than ``split_bytes``;
    pieces are never empty.
    """
    if split_bytes <= 0 or whole.size_bytes <= split_bytes:
        return [whole]
    count = math.ceil(whole.size_bytes / split_bytes)
    inside = sorted(start for start in segment_starts if whole.start < start < whole.end)
    points: list[int] = []
    for index in range(1, count):
        target = whole.start + whole.size_bytes * index // count
        if points and target <= points[-1]:
            continue  # the previous point overshot this target (large messages)
        following = [start for start in inside if start >= target][:1]
        limit = following[0] if following else whole.end
        candidates = list(following)
        if limit > target:
            try:
                found, _covered = probe_message_start(consumer, topic, whole.target.partition, target,
                                                      limit=limit, probe_bytes=probe_bytes)
            except InvalidMessage as exc:
                log.debug("%s-%d: no split at %d: %s", topic, whole.target.partition, target, exc)
                found = None
            if found is not None:
                candidates.append(found)
        if candidates:
            point = min(candidates)
            if point > (points[-1] if points else whole.start):
                points.append(point)
    bounds = [whole.start, *points, whole.end]
    return [replace(whole, start=start, end=end) for start, end in zip(bounds, bounds[1:])]


def probe_message_start(consumer: SimpleConsumer, topic: str, partition: int, target: int, *,
                        limit: int, probe_bytes: Iterable[int]) -> tuple[int | None, bool]:
    """The first message start in ``[target, limit)``, found by small fetches at ``target``.

    ``limit`` must be a known boundary (a segment start, a range end). Returns ``(offset,
    False)``, or ``(None, covered)`` where ``covered`` tells that the probes saw every byte
    before ``limit`` without finding a start (the message at ``target`` runs to ``limit``).

    The windows stop one byte short of ``limit``: a response never spans segments anyway,
    and a broker that checks unverified bytes from disk (this one, after a restart) answers
    a misaligned fetch reaching a boundary it knows with InvalidMessage instead of raw bytes;
    on that answer the window is halved. Raises InvalidMessage if even a small one is refused.
    """
    for size in probe_bytes:
        size = min(size, limit - 1 - target)
        if size <= 0:
            return None, True
        while True:
            fetched = consumer.fetch(FetchRequest(topic, partition, target, size))
            if fetched.error_code != InvalidMessage.code or size <= MIN_PROBE_BYTES:
                break
            size //= 2
        fetched.check()
        position = find_message_start(fetched.message_set, partial_tail=True)
        if position is not None:
            return target + position, False
        if target + len(fetched.message_set) >= limit - 1:
            return None, True
        if len(fetched.message_set) < size:
            return None, False  # cut short by the broker: a bigger window brings nothing more
    log.debug("%s-%d: no message start within the probes at offset %d", topic, partition, target)
    return None, False
