"""Planning a read on the driver: which broker-partitions, which offsets, which splits.

How this works:

1. **Partitions.** With ``zk.connect``, the ``(broker, partition)`` pairs registered under
   ``/brokers/topics/<topic>`` on brokers registered under ``/brokers/ids`` (spec 5.2; both
   nodes are ephemeral, so a broker that is down has no partitions here). With
   ``broker.list``, each broker's partition count is probed: one MultiFetch of empty fetches
   of partitions 0..63, repeated, until one answers WrongPartition.

   A **replicated topic** (docs/replication.md) is not under ``/brokers/topics`` but under
   ``/replication/topics/<topic>``: its partitions 0..N-1 each become one
   ReplicatedPartition (client/cluster.py), whose live replicas are asked in order: the
   leader, the other in-sync replicas, the rest. With ``broker.list`` a Metadata request
   tells the two kinds apart first (client/replicated_topics.py; on a cluster whose
   ``default.replication.factor`` is above 1 it creates an unknown topic, as a producer's
   first request does).

   **Its identity is the partition number alone**, never the broker that served it: byte
   offsets are the same on every replica, so a range planned on one leader and read from
   another after a failover is the same bytes. The rows' ``broker_id`` is null and
   ``partition`` the topic's partition number; JSON offset maps (``startingOffsets``, and
   so the ETL's checkpoint and manifests) name it ``"<partition>"`` (Kafka 0.8's naming,
   as the group offsets of replicated topics), so a run after a leader change resumes at
   the committed offset, not at a new broker's partition read from the start.
2. **Offsets.** One Offsets request per partition, time -1 (latest) and a large maximum,
   answers every segment start and the flushed end, newest first (spec 4.4): the first is
   *latest*, the last *earliest*, and the ones between are message boundaries for free.
3. **Splits** (splits.py). Offsets are byte positions, so a split point cannot be computed: a range
   larger than ``split.size`` is cut near evenly spaced targets, each moved to a real message
   start. That is the first segment start at or after the target, or, if a message start comes
   earlier, the one found by a small fetch at the target: the fetch returns raw bytes from
   the middle of a message, and ``find_message_start`` looks for the first position where a
   chain of complete entries with matching CRCs begins and runs to the end of what came
   back. Ranges end on top-level entries, so a compressed wrapper is never split.

   The CRC chain can only be fooled by a payload that itself holds a well-formed message
   set (a message set stored as a message). Such a false split point cannot pass unnoticed:
   the reader of the range before it then finds an entry crossing its end and fails the
   query, saying to set ``split.size`` to 0. It never duplicates or drops a message.

Offsets and split probes of a replicated partition go to its first replica that answers
(``ask_replicas``): a leader killed a moment ago is still named in ZooKeeper until its
session ends, and a follower answers up to its own high watermark, never past what is
committed, so a plan made there is only shorter. A follower learns the leader's high
watermark on its next fetch, so for a moment it may be behind an offset the leader already
reported (an ETL checkpoint, an ``endingOffsets`` planned before the failover):
``replica_offsets`` then asks again, pausing 0.1 s doubling to 1 s, for up to
``failover.timeout.ms``, before such an offset is judged past the end.

Everything here blocks (sockets, ZooKeeper) and runs on the driver, never on executors.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from twisted_broker.client.cluster import (  # PROBE_BATCH, PROBE_LIMIT: kept importable from here
    PROBE_BATCH, PROBE_LIMIT, BrokerPartition, ConsumerPool, PartitionProbeError, ReplicatedPartition,
    probe_partition_count, registered_partitions, replicated_partitions,
)
from twisted_broker.client.errors import ReplicasUnavailable
from twisted_broker.client.replicated_consumer import LEADER_CONNECT_TIMEOUT_MS
from twisted_broker.client.replicated_topics import (
    LeaderBackoff, ReplicatedTopic, TopicMetadataCache, registered_replicated_topic,
)
from twisted_broker.client.simple_consumer import LATEST_TIME, SimpleConsumer
from twisted_broker.errors import WrongPartition
from twisted_broker.spark.options import (
    EARLIEST_SPEC, EARLIEST_IN_JSON, LATEST_SPEC, LATEST_IN_JSON, OffsetSpec, ReadOptions,
)
from twisted_broker.spark.splits import SPLIT_PROBE_BYTES, OffsetRange, PlannedPartition, split_range

log = logging.getLogger(__name__)

MAX_SEGMENT_OFFSETS = 1_000_000  # "all of them": a partition has far fewer segments
PLANNING_ZK_TIMEOUT_S = 10.0

T = TypeVar("T")


class PlanningError(ValueError):
    """The read cannot be planned: unknown topic, offsets out of range, no such partition."""


class DataLoss(PlanningError):
    """A starting offset is before the earliest offset still on the broker (retention)."""


@dataclass(frozen=True)
class PartitionOffsets:
    """What a broker reports for a partition: the flushed end and its segment starts."""

    earliest: int
    latest: int
    segment_starts: tuple[int, ...]  # ascending, earliest first




# -- 1. partitions ---------------------------------------------------------------------------

def discover_partitions(topic: str, consumers: ConsumerPool, *, zk_connect: str | None = None,
                        brokers: Mapping[int, tuple[str, int]] | None = None) -> list[PlannedPartition]:
    """The topic's partitions on live brokers, sorted: 0.7 broker-partitions, or a replicated
    topic's partitions that have a live replica. Raises PlanningError if there are none,
    ConnectionError if ZooKeeper or a listed broker cannot be reached."""
    if zk_connect is not None:
        found = _registered_partitions(topic, zk_connect)
        if not found:
            raise PlanningError(f"topic {topic} is not registered by any live broker in ZooKeeper at {zk_connect}")
        return found
    def ask(_broker_id: int, address: tuple[str, int], name: str):
        return consumers.get(*address, connect_timeout_ms=LEADER_CONNECT_TIMEOUT_MS).metadata((name,))

    replicated = TopicMetadataCache(ask, lambda: sorted((brokers or {}).items())).topic(topic)
    if replicated is not None:
        found = _live(replicated)
        if not found:
            raise PlanningError(f"no replica of any partition of {topic} is live")
        return found
    found = []
    for broker_id, (host, port) in sorted((brokers or {}).items()):
        try:
            count = probe_partition_count(consumers.get(host, port), topic)
        except PartitionProbeError as exc:
            raise PlanningError(str(exc)) from None
        found += [BrokerPartition(broker_id, partition, host, port) for partition in range(count)]
    if not found:
        raise PlanningError(f"no broker of broker.list allows topic {topic}")
    return found


def _registered_partitions(topic: str, zk_connect: str) -> list[PlannedPartition]:
    # kazoo lives behind registry/: imported here so executors and broker.list users never load it.
    from twisted_broker.registry.replication_view import ReplicationView
    with ReplicationView(zk_connect, timeout_s=PLANNING_ZK_TIMEOUT_S) as view:
        try:
            replicated = registered_replicated_topic(view, topic)
        except ValueError as exc:
            raise PlanningError(f"topic {topic}: {exc}") from None
        if replicated is not None:
            return _live(replicated)
        return registered_partitions(view, topic)


def _live(topic: ReplicatedTopic) -> list[ReplicatedPartition]:
    found = replicated_partitions(topic)
    offline = [target.name for target in found if not target.replicas]
    if offline:  # as a 0.7 broker that is down: its partitions are not read now
        log.warning("%s: partitions %s have no live replica; they are not read", topic.topic, ", ".join(offline))
    return [target for target in found if target.replicas]


def ask_replicas(consumers: ConsumerPool, target: PlannedPartition, call: Callable[[SimpleConsumer], T]) -> T:
    """``call(consumer)`` on the first of ``target``'s replicas that answers: one try each.

    A 0.7 partition has one; its errors are raised as they are. For a replicated partition, a
    replica that cannot be reached or holds no replica any more (WrongPartition) is passed
    over; raises ReplicasUnavailable naming each one's failure when none answers. A replica's
    connection is given LEADER_CONNECT_TIMEOUT_MS, not the socket timeout: the port of a
    leader killed a moment ago refuses at once, and retrying it would only wait.
    """
    if isinstance(target, BrokerPartition):
        return call(consumers.of(target))
    failures = []
    for replica in target.replicas:
        try:
            return call(consumers.get(replica.host, replica.port, connect_timeout_ms=LEADER_CONNECT_TIMEOUT_MS))
        except (OSError, WrongPartition) as exc:  # ConnectionError, TimeoutError included
            log.info("partition %s: broker %d does not answer (%s); asking the next replica",
                     target.name, replica.broker_id, exc)
            failures.append(f"broker {replica.broker_id} ({replica.host}:{replica.port}): {exc}")
    raise ReplicasUnavailable(f"no replica of partition {target.name} answered: {'; '.join(failures)}")


# -- 2. offsets ------------------------------------------------------------------------------

def partition_offsets(consumer: SimpleConsumer, topic: str, partition: int) -> PartitionOffsets:
    """Earliest, latest (flushed end) and segment starts, from one Offsets request."""
    offsets = consumer.get_offsets_before(topic, partition, LATEST_TIME, MAX_SEGMENT_OFFSETS)
    if not offsets:  # a 0.7 broker always answers at least one offset for time -1
        raise PlanningError(f"broker {consumer.host}:{consumer.port} reports no offsets for {topic}-{partition}")
    ascending = sorted(set(offsets))
    return PartitionOffsets(earliest=ascending[0], latest=ascending[-1], segment_starts=tuple(ascending[:-1]))


def replica_offsets(consumers: ConsumerPool, topic: str, target: PlannedPartition, *, at_least: int = 0,
                    timeout_ms: int = 0, clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> PartitionOffsets:
    """The partition's offsets from its first replica that answers (``ask_replicas``).

    For a replicated partition whose answer ends before ``at_least`` (a follower's high
    watermark behind the leader's for a moment), asked again with pauses for up to
    ``timeout_ms``; the last answer is returned, for the caller to judge. Raises as
    ask_replicas.
    """
    def ask() -> PartitionOffsets:
        return ask_replicas(consumers, target, lambda consumer: partition_offsets(consumer, topic, target.partition))

    offsets = ask()
    if isinstance(target, BrokerPartition) or offsets.latest >= at_least:
        return offsets
    deadline, backoff = clock() + timeout_ms / 1000, LeaderBackoff(100, 1000)
    while offsets.latest < at_least and (remaining := deadline - clock()) > 0:
        log.info("%s partition %s: the replica answering ends at %d, before offset %d; asking again",
                 topic, target.name, offsets.latest, at_least)
        sleep(backoff.next_pause_s(remaining))
        offsets = ask()
    return offsets


def _given_offset(spec: OffsetSpec, name: str) -> int:
    """The byte offset a JSON spec gives ``name`` (0 for none, earliest or latest)."""
    return max(spec.get(name, 0), 0) if isinstance(spec, dict) else 0


def resolve_offset(spec: OffsetSpec, name: str, offsets: PartitionOffsets, *, default: int) -> int:
    """The offset ``spec`` names for partition ``name`` (``default`` when a JSON omits it)."""
    if spec == EARLIEST_SPEC:
        return offsets.earliest
    if spec == LATEST_SPEC:
        return offsets.latest
    offset = spec.get(name, default)
    return {EARLIEST_IN_JSON: offsets.earliest, LATEST_IN_JSON: offsets.latest}.get(offset, offset)


def plan_ranges(options: ReadOptions, consumers: ConsumerPool) -> list[OffsetRange]:
    """The ``[start, end)`` of every partition to read (empty ones included), unsplit.

    Raises DataLoss for a start before the earliest offset (unless ``failOnDataLoss`` is
    false: then the range starts at earliest, with a warning), PlanningError for an offset
    past the flushed end, a start after its end, or a JSON naming an unknown partition.
    """
    found = discover_partitions(options.topic, consumers, zk_connect=options.zk_connect, brokers=options.brokers)
    names = {target.name for target in found}
    for spec, option in ((options.starting, "startingOffsets"), (options.ending, "endingOffsets")):
        if isinstance(spec, dict):
            missing = sorted(set(spec) - names)
            if missing:
                raise PlanningError(f"{option} names partitions {', '.join(missing)} of {options.topic}, which "
                                    f"no live broker holds (found: {', '.join(sorted(names)) or 'none'})")
    if isinstance(options.ending, dict):  # an ending map says exactly what to read
        found = [target for target in found if target.name in options.ending]
    ranges = []
    for target in found:
        offsets = replica_offsets(consumers, options.topic, target, timeout_ms=options.failover_timeout_ms,
                                  at_least=max(_given_offset(options.starting, target.name),
                                               _given_offset(options.ending, target.name)))
        start = resolve_offset(options.starting, target.name, offsets, default=offsets.earliest)
        end = resolve_offset(options.ending, target.name, offsets, default=offsets.latest)
        if start < offsets.earliest:
            if options.fail_on_data_loss:
                raise DataLoss(f"{options.topic} {target.name}: starting offset {start} is before the earliest "
                               f"offset {offsets.earliest}; {offsets.earliest - start} bytes were deleted by "
                               "retention (option failOnDataLoss=false starts at the earliest instead)")
            log.warning("%s %s: starting offset %d was deleted; starting at the earliest offset %d",
                        options.topic, target.name, start, offsets.earliest)
            start = offsets.earliest
        if end > offsets.latest:
            raise PlanningError(f"{options.topic} {target.name}: ending offset {end} is past the latest "
                                f"(flushed) offset {offsets.latest}")
        if start > end:
            raise PlanningError(f"{options.topic} {target.name}: starting offset {start} is after "
                                f"the ending offset {end}")
        ranges.append(OffsetRange(target, start, end))
    return ranges


# -- 3. splits -------------------------------------------------------------------------------

def plan_splits(options: ReadOptions, ranges: list[OffsetRange], consumers: ConsumerPool) -> list[OffsetRange]:
    """Every non-empty range, split per ``options.split_bytes``; in partition order."""
    pieces = []
    probes = sorted({min(SPLIT_PROBE_BYTES, options.fetch_bytes), options.fetch_bytes})
    for whole in ranges:
        if not whole.size_bytes:
            continue

        def split(consumer: SimpleConsumer, whole: OffsetRange = whole) -> list[OffsetRange]:
            segment_starts: tuple[int, ...] = ()
            if options.split_bytes and whole.size_bytes > options.split_bytes:
                segment_starts = partition_offsets(consumer, options.topic, whole.target.partition).segment_starts
            return split_range(consumer, options.topic, whole, split_bytes=options.split_bytes,
                               probe_bytes=probes, segment_starts=segment_starts)

        pieces += ask_replicas(consumers, whole.target, split)
    return pieces


@contextmanager
def planner(options: ReadOptions) -> Iterator[ConsumerPool]:
    """Consumers for planning, closed at the end."""
    consumers = ConsumerPool(options.socket_timeout_ms)
    try:
        yield consumers
    finally:
        consumers.close()


def plan_read(options: ReadOptions) -> list[OffsetRange]:
    """The pieces a query reads: ``plan_ranges`` then ``plan_splits``."""
    with planner(options) as consumers:
        return plan_splits(options, plan_ranges(options, consumers), consumers)
