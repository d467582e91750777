"""Replicated topics as this project's clients see them: metadata, leaders, and what a
produce-ack error means (docs/replication.md §7). Blocking; the Twisted clients share the
pure parts (``replicated_topic``, ``ack_outcome``, ``LeaderBackoff``).

How this works
--------------
A client asks a broker a MetadataRequest (type 103) for a topic the first time it uses it:

- the topic's error is 3: a 0.7 topic (or an unknown one on a cluster whose
  ``default.replication.factor`` is 1). The caller keeps its 0.7 path, byte for byte, and the
  answer is kept for the client's life;
- otherwise: partitions 0..N-1, each with its leader (-1 while it has none) and its replicas,
  and the brokers' addresses. Asking **creates** an unknown topic when the broker's
  ``default.replication.factor`` is above 1: that is how the first produce to a new topic
  makes it replicated.

A broker that is not ours (Kafka 0.7) closes the connection on type 103. A closed connection
on a broker that then accepts a new one is taken to be that: every topic counts as 0.7 there,
remembered per broker. A broker that cannot be reached is skipped for the next candidate.

The cached answer is refreshed when a caller reports it stale (produce error 6 or 3, a lost
connection to a leader, a fetch answered with 3). While a partition has no leader, ``leader``
refreshes with a growing pause (``backoff_ms`` doubling to ``max_backoff_ms``) until the
caller's deadline, then raises LeaderNotAvailable.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from twisted_broker.client.connection import Address, BrokerConnection
from twisted_broker.client.errors import LeaderNotAvailable
from twisted_broker.errors import KafkaError, UnexpectedResponse, UnknownError, WrongPartition
from twisted_broker.codec.kafka07.replication_errors import (
    NotEnoughReplicas, NotEnoughReplicasAfterAppend, NotLeaderForPartition, RequestTimedOut,
)
from twisted_broker.codec.kafka07.replication import (
    NOT_REPLICATED, Metadata, MetadataRequest, PartitionMetadata, decode_metadata, encode_replication_request,
)
from twisted_broker.codec.kafka07.responses import NO_ERROR
from twisted_broker.registry.replication_paths import NO_LEADER

log = logging.getLogger(__name__)

_CANNOT_CREATE = {17: "its name is not a valid topic name",
                  38: "the brokers' default.replication.factor is larger than the live brokers"}
# The broker id clients file a replicated topic's partitions under (the async producer's queue,
# the group consumer's fetchers): whoever leads each one when it is sent or fetched.
LEADERS = -2


@dataclass(frozen=True)
class ReplicatedTopic:
    """One replicated topic: its partitions (index = partition number) and where its brokers are."""

    topic: str
    partitions: tuple[PartitionMetadata, ...]
    brokers: Mapping[int, Address]

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    def leader(self, partition: int) -> tuple[int, Address] | None:
        """``(broker id, address)`` of the partition's leader; None while it has none."""
        leader = self.partitions[partition].leader
        address = self.brokers.get(leader)
        return None if leader == NO_LEADER or address is None else (leader, address)

    def isr(self, partition: int) -> tuple[int, ...]:
        return self.partitions[partition].isr


def replicated_topic(metadata: Metadata, topic: str) -> ReplicatedTopic | None:
    """The topic in a metadata answer; None for a 0.7 topic (error 3). Raises KafkaError for
    another error, UnexpectedResponse if the answer does not name the topic or numbers its
    partitions other than 0..N-1."""
    for answer in metadata.topics:
        if answer.topic != topic:
            continue
        if answer.error == NOT_REPLICATED:
            return None
        if answer.error in _CANNOT_CREATE:
            raise UnknownError(f"topic {topic} cannot be created: {_CANNOT_CREATE[answer.error]} "
                               f"(metadata error {answer.error})")
        if answer.error != NO_ERROR:
            raise UnknownError(f"metadata of topic {topic}: error code {answer.error}")
        partitions = tuple(sorted(answer.partitions, key=lambda p: p.partition))
        if [p.partition for p in partitions] != list(range(len(partitions))) or not partitions:
            raise UnexpectedResponse(f"metadata of topic {topic} lists partitions "
                                     f"{[p.partition for p in partitions]}, not 0..N-1")
        return ReplicatedTopic(topic, partitions, {b: (host, port) for b, host, port in metadata.brokers})
    raise UnexpectedResponse(f"the metadata answer does not name topic {topic}")


def registered_replicated_topic(view, topic: str) -> ReplicatedTopic | None:
    """The topic as ZooKeeper's ``/replication`` describes it, with the live brokers of
    ``/brokers/ids``; None if it is not a replicated topic. ``view`` is a
    registry.replication_view.ReplicationView (the caller opens it: no kazoo here). A
    partition the controller has not elected yet has no leader and an empty ISR. Raises
    ValueError for a node that does not decode, ZooKeeperUnavailable."""
    assignment = view.assignment(topic)
    if assignment is None:
        return None
    partitions = []
    for partition, replicas in sorted(assignment.replicas.items()):
        state = view.partition_state(topic, partition)
        partitions.append(PartitionMetadata(partition, state.leader if state else NO_LEADER,
                                            state.leader_epoch if state else -1, tuple(replicas),
                                            tuple(state.isr) if state else ()))
    brokers = {broker_id: (info.host, info.port) for broker_id, info in view.brokers().items()}
    return ReplicatedTopic(topic, tuple(partitions), brokers)


def request_metadata(connection: BrokerConnection, topics: Iterable[str]) -> Metadata | None:
    """Ask one broker; None if it is not ours (it closes the connection on type 103 and then
    accepts a new one). Raises ConnectionError (unreachable), TimeoutError, UnexpectedResponse."""
    try:
        error, body = connection.request(encode_replication_request(MetadataRequest(tuple(topics))))
    except ConnectionError:
        connection.connect()  # raises ConnectionError if it is down, not merely not ours
        connection.close()
        return None
    if error != NO_ERROR:
        raise UnexpectedResponse(f"{connection.host}:{connection.port} answered metadata with error {error}")
    try:
        return decode_metadata(body)
    except ValueError as exc:  # Truncated
        raise UnexpectedResponse(f"malformed metadata from {connection.host}:{connection.port}: {exc}") from None


# -- what a produce-ack answer means ----------------------------------------------------------

RETRY, FAIL = "retry", "fail"
# Errors after which the same messages are sent again, to the leader the refreshed metadata
# names: the leader moved (6), the broker holds no replica any more (3), or the ISR did not
# acknowledge in time (7: the set may be in the log already, so a retry can duplicate it).
_RETRIABLE = {NotLeaderForPartition.code, WrongPartition.code, RequestTimedOut.code}


def ack_outcome(code: int) -> str | None:
    """None for success, RETRY (refresh metadata, send again) or FAIL for a produce-ack code."""
    if code == NO_ERROR:
        return None
    return RETRY if code in _RETRIABLE else FAIL


def ack_error(topic: str, partition: int, code: int, isr: tuple[int, ...] = ()) -> KafkaError:
    """The exception a producer raises for a failed produce-ack code, saying what to do."""
    where = f"topic {topic} partition {partition}"
    if code in (NotEnoughReplicas.code, NotEnoughReplicasAfterAppend.code):
        members = f"{len(isr)} in-sync replica{'s' if len(isr) != 1 else ''} ({', '.join(map(str, isr)) or 'none'})"
        appended = ("appended by the leader but not committed" if code == NotEnoughReplicasAfterAppend.code
                    else "refused")
        return (NotEnoughReplicas if code == NotEnoughReplicas.code else NotEnoughReplicasAfterAppend)(
            f"{where}: write {appended}: {members}, fewer than the brokers' min.insync.replicas "
            f"(error {code}); start the stopped replicas or lower min.insync.replicas")
    if code == NotLeaderForPartition.code:
        return NotLeaderForPartition(f"{where}: the leader kept moving (error 6)")
    if code == RequestTimedOut.code:
        return RequestTimedOut(f"{where}: the in-sync replicas did not acknowledge in time (error 7)")
    if code == WrongPartition.code:
        return WrongPartition(f"{where}: no broker holds it (error 3)")
    return UnknownError(f"{where}: produce refused with error code {code}")


class LeaderBackoff:
    """The pauses between metadata refreshes while a leader is missing: ``backoff_ms``,
    doubling up to ``max_backoff_ms``. Pure: the caller sleeps."""

    def __init__(self, backoff_ms: int = 100, max_backoff_ms: int = 1000) -> None:
        self._first_s, self._max_s = backoff_ms / 1000, max_backoff_ms / 1000
        self._next_s = self._first_s

    def next_pause_s(self, remaining_s: float) -> float:
        pause = min(self._next_s, max(remaining_s, 0.0))
        self._next_s = min(self._next_s * 2, self._max_s)
        return pause

    def reset(self) -> None:
        self._next_s = self._first_s


# -- the blocking cache ----------------------------------------------------------------------

AskBroker = Callable[[int, Address, str], "Metadata | None"]  # (broker id, address, topic)
Candidates = Callable[[], Iterable[tuple[int, Address]]]


class TopicMetadataCache:
    """Topics' metadata, asked of the brokers ``candidates()`` lists (and those earlier answers
    named), through ``ask`` (which opens the connection; None: the broker is not ours).
    Thread-safe: one question at a time."""

    def __init__(self, ask: AskBroker, candidates: Candidates, *, backoff_ms: int = 100,
                 max_backoff_ms: int = 1000, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._ask, self._candidates = ask, candidates
        self._backoff_ms, self._max_backoff_ms = backoff_ms, max_backoff_ms
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._topics: dict[str, ReplicatedTopic | None] = {}
        self._known_brokers: dict[int, Address] = {}
        self._not_ours: set[Address] = set()
        self._last_good: Address | None = None
        self._failed_at: dict[Address, float] = {}  # a dead broker costs a connect timeout: ask it last

    def topic(self, topic: str) -> ReplicatedTopic | None:
        """The topic's metadata, asked once and kept; None for a 0.7 topic. Raises
        ConnectionError when no broker answers."""
        with self._lock:
            if topic in self._topics:
                return self._topics[topic]
        return self.refresh(topic)

    def refresh(self, topic: str) -> ReplicatedTopic | None:
        """Ask again now (raises as topic())."""
        with self._lock:
            answer = self._ask_someone(topic)
            self._topics[topic] = answer
            return answer

    def leader(self, topic: str, partition: int, deadline: float) -> tuple[int, Address]:
        """``(broker id, address)`` of the partition's leader, refreshing while it has none
        until ``deadline`` (of ``clock``). Raises LeaderNotAvailable (a ConnectionError), or
        WrongPartition if the topic is not replicated (any more) or has no such partition."""
        backoff = LeaderBackoff(self._backoff_ms, self._max_backoff_ms)
        current = self.topic(topic)
        while True:
            if current is None or partition >= current.partition_count:
                raise WrongPartition(f"topic {topic} has no replicated partition {partition}")
            found = current.leader(partition)
            if found is not None:
                return found
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise LeaderNotAvailable(f"topic {topic} partition {partition} has no leader "
                                         f"(replicas {list(current.partitions[partition].replicas)} offline)")
            log.info("topic %s partition %d has no leader; asking again", topic, partition)
            self._sleep(backoff.next_pause_s(remaining))
            try:
                current = self.refresh(topic)
            except ConnectionError as exc:
                log.info("refreshing the metadata of %s failed: %s", topic, exc)

    def _ask_someone(self, topic: str) -> ReplicatedTopic | None:
        order: dict[Address, int] = {}
        for broker_id, address in [*self._candidates(), *self._known_brokers.items()]:
            order.setdefault(tuple(address), broker_id)
        # The last broker that answered first, those that failed last (oldest failure first).
        addresses = sorted(order, key=lambda a: (self._failed_at.get(a, 0.0), a != self._last_good))
        failures: list[Exception] = []
        not_ours = 0
        for address in addresses:
            if address in self._not_ours:
                not_ours += 1
                continue
            try:
                metadata = self._ask(order[address], address, topic)
            except (OSError, UnexpectedResponse) as exc:  # TimeoutError, ConnectionError included
                failures.append(exc)
                self._failed_at[address] = self._clock()
                continue
            if metadata is None:
                log.info("broker %s:%d does not answer metadata requests (a Kafka 0.7 broker, or one "
                         "without ZooKeeper): its topics are 0.7 topics", *address)
                self._not_ours.add(address)
                not_ours += 1
                continue
            self._last_good = address
            self._failed_at.pop(address, None)
            self._known_brokers = {b: (host, port) for b, host, port in metadata.brokers}
            return replicated_topic(metadata, topic)
        if not_ours:
            return None  # a 0.7 cluster (or the brokers of ours that could answer are down)
        if not addresses:
            raise ConnectionError(f"no broker is known to ask about topic {topic}")
        if len(failures) == 1:
            raise failures[0]  # its own words name the broker
        raise ConnectionError(f"no broker answered a metadata request for topic {topic}: "
                              + "; ".join(map(str, failures)))
