"""ReplicatedConsumer: SimpleConsumer's calls for partitions of replicated topics, sent to each
partition's leader and following it when it moves (docs/replication.md §7).

Byte offsets are the same on every replica, so a reader keeps its offset across a leader
change: a fetch that finds the leader gone (a lost connection, or error 3 from a broker that
holds no replica any more) refreshes the metadata (client/replicated_topics.py) and asks the
new leader. A new leader may serve nothing past its high watermark for a moment: the answer is
then empty, never wrong. Any replica could serve committed data; the leader has it first.

``leader_wait_ms`` bounds how long one call follows the leader (waiting while a partition has
no leader); 0 makes a call try each partition's leader once and raise ConnectionError
(LeaderNotAvailable) for the caller's own retry loop, which the group consumer's fetcher
threads have.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence

from twisted_broker.client.cluster import ConsumerPool
from twisted_broker.client.errors import LeaderNotAvailable
from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.client.replicated_topics import Address, LeaderBackoff, ReplicatedTopic, TopicMetadataCache
from twisted_broker.errors import WrongPartition
from twisted_broker.codec.kafka07.replication import Metadata
from twisted_broker.codec.kafka07.requests import FetchRequest

log = logging.getLogger(__name__)

# A dead leader's port refuses connections until the controller elects another (the session
# timeout): each attempt gives up after this, so the next metadata answer is asked soon.
LEADER_CONNECT_TIMEOUT_MS = 1000


class ReplicatedConsumer:
    """Fetches and offsets of replicated partitions, through one SimpleConsumer per broker
    address; ``candidates()`` lists the brokers to ask for metadata. Not thread-safe: one per
    thread."""

    def __init__(self, candidates: Callable[[], Iterable[tuple[int, Address]]], *, socket_timeout_ms: int = 30000,
                 connect_timeout_ms: int = LEADER_CONNECT_TIMEOUT_MS, buffer_size: int = 65536,
                 leader_wait_ms: int = 30000, backoff_ms: int = 100) -> None:
        self._pool = ConsumerPool(socket_timeout_ms, connect_timeout_ms=connect_timeout_ms, buffer_size=buffer_size)
        self._leader_wait_s = leader_wait_ms / 1000
        self._backoff_ms = backoff_ms
        self._metadata = TopicMetadataCache(self._ask, candidates, backoff_ms=backoff_ms)

    def topic(self, topic: str) -> ReplicatedTopic | None:
        """The topic's metadata; None for a 0.7 topic. Asking creates an unknown topic on a
        cluster whose default.replication.factor is above 1. Raises ConnectionError."""
        return self._metadata.topic(topic)

    def fetch(self, request: FetchRequest) -> FetchedMessageSet:
        """Fetch one partition from its leader (SimpleConsumer.fetch)."""
        return self.multifetch([request])[0]

    def multifetch(self, requests: Sequence[FetchRequest]) -> list[FetchedMessageSet]:
        """Fetch several partitions, one MultiFetch per leader; one result per request, in
        order. Raises LeaderNotAvailable / ConnectionError / TimeoutError when the leaders
        cannot be reached within leader_wait_ms, WrongPartition for a partition the topic
        does not have."""
        results: list[FetchedMessageSet | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        deadline = time.monotonic() + self._leader_wait_s
        backoff = LeaderBackoff(self._backoff_ms)
        while True:
            by_leader: dict[Address, list[int]] = {}
            for index in pending:
                _broker, address = self._metadata.leader(requests[index].topic, requests[index].partition, deadline)
                by_leader.setdefault(address, []).append(index)
            retry, failure = [], None
            for address, indices in by_leader.items():
                try:
                    answers = self._pool.get(*address).multifetch([requests[i] for i in indices])
                except (ConnectionError, TimeoutError) as exc:
                    retry += indices
                    failure = exc
                    continue
                for index, fetched in zip(indices, answers):
                    if fetched.error_code == WrongPartition.code:  # no replica there any more
                        retry.append(index)
                        failure = LeaderNotAvailable(f"{address[0]}:{address[1]} no longer holds "
                                                     f"{fetched.topic}-{fetched.partition}")
                    else:
                        results[index] = fetched
            if not retry:
                return results
            for topic in {requests[i].topic for i in retry}:
                self._refresh(topic)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise failure
            log.info("following the leaders of %s (%s)", sorted({requests[i].topic for i in retry}), failure)
            time.sleep(backoff.next_pause_s(remaining))
            pending = retry

    def get_offsets_before(self, topic: str, partition: int, time_ms: int, max_offsets: int) -> list[int]:
        """SimpleConsumer.get_offsets_before, asked of the partition's leader."""
        deadline = time.monotonic() + self._leader_wait_s
        backoff = LeaderBackoff(self._backoff_ms)
        while True:
            _broker, address = self._metadata.leader(topic, partition, deadline)
            try:
                return self._pool.get(*address).get_offsets_before(topic, partition, time_ms, max_offsets)
            except (ConnectionError, TimeoutError, WrongPartition) as exc:
                self._refresh(topic)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise
                log.info("asking the offsets of %s-%d again (%s)", topic, partition, exc)
                time.sleep(backoff.next_pause_s(remaining))

    def close(self) -> None:
        """Close the pool's connections."""
        self._pool.close()

    def __enter__(self) -> "ReplicatedConsumer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _refresh(self, topic: str) -> None:
        try:
            self._metadata.refresh(topic)
        except ConnectionError as exc:
            log.info("refreshing the metadata of %s failed: %s", topic, exc)

    def _ask(self, _broker_id: int, address: Address, topic: str) -> Metadata | None:
        return self._pool.get(*address).metadata((topic,))
