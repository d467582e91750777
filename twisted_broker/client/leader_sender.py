"""LeaderSender: message sets to replicated topics' leaders, as ProduceAck requests, following
leader changes (docs/replication.md §7). Used by the blocking Producer and the mirror.

How this works: the sets are grouped by their partition's current leader (the metadata cache
of client/replicated_topics.py) and each group goes out as one ProduceAck request with
``required_acks`` and ``timeout_ms``. A set answered with 6 (not leader), 3 or 7 (timed out),
or whose leader could not be reached, is sent again after the metadata is refreshed, with a
growing pause, until ``give_up_after_ms`` has passed since the send began (waiting meanwhile
while its partition has no leader). Delivery is therefore at least once: a set the old leader
appended, and its followers copied, before its answer was lost is appended again by the new
leader. Error 19/20 (fewer in-sync replicas than ``min.insync.replicas``) is not retried: it
raises at once, naming the partition and its ISR as the refreshed metadata gives it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from twisted_broker.client.replicated_topics import (
    FAIL, RETRY, Address, Candidates, LeaderBackoff, ReplicatedTopic, TopicMetadataCache, ack_error, ack_outcome,
)
from twisted_broker.client.sync_producer import SyncProducer
from twisted_broker.errors import KafkaError
from twisted_broker.codec.kafka07.replication import Metadata

log = logging.getLogger(__name__)

# (broker id, address) -> the SyncProducer (or stand-in) for that broker, kept by the caller.
ProducerAt = Callable[[int, Address], SyncProducer]
Produce = tuple[str, int, bytes]  # topic, partition, message set


class LeaderSender:
    """Thread-safe as its SyncProducers are (each serializes its own requests)."""

    def __init__(self, producer_at: ProducerAt, candidates: Candidates, *, required_acks: int = -1,
                 timeout_ms: int = 10000, give_up_after_ms: int = 30000) -> None:
        self._producer_at = producer_at
        self._required_acks, self._timeout_ms = required_acks, timeout_ms
        self._give_up_after_s = give_up_after_ms / 1000
        self._metadata = TopicMetadataCache(self._ask, candidates)

    def topic(self, topic: str) -> ReplicatedTopic | None:
        """The topic's metadata (None: a 0.7 topic). Asking creates an unknown topic where
        default.replication.factor is above 1. Raises ConnectionError."""
        return self._metadata.topic(topic)

    def send(self, produces: list[Produce]) -> None:
        """Send ``(topic, partition, message set)`` triples to their leaders (any thread).
        Raises NotEnoughReplicas(AfterAppend), LeaderNotAvailable, ConnectionError /
        TimeoutError or another KafkaError once it gives up."""
        deadline = time.monotonic() + self._give_up_after_s
        backoff = LeaderBackoff()
        pending = produces
        while True:
            by_leader: dict[tuple[int, Address], list[Produce]] = {}
            for produce in pending:
                by_leader.setdefault(self._metadata.leader(produce[0], produce[1], deadline), []).append(produce)
            retry: list[Produce] = []
            last_error: Exception | None = None
            for (broker_id, address), parts in by_leader.items():
                try:
                    answers = self._producer_at(broker_id, address).send_acked(
                        parts, required_acks=self._required_acks, timeout_ms=self._timeout_ms)
                except (ConnectionError, TimeoutError) as exc:
                    log.warning("sending to the leader, broker %d at %s:%d, failed (%s); finding the leader again",
                                broker_id, *address, exc)
                    retry += parts
                    last_error = exc
                    continue
                for part, (topic, partition, code, _offset) in zip(parts, answers):
                    outcome = ack_outcome(code)
                    if outcome == RETRY:
                        retry.append(part)
                        last_error = ack_error(topic, partition, code)
                    elif outcome == FAIL:
                        raise self._refused(topic, partition, code)
            if not retry:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise last_error
            time.sleep(backoff.next_pause_s(remaining))
            for topic in {topic for topic, _p, _s in retry}:
                try:
                    self._metadata.refresh(topic)
                except ConnectionError as exc:
                    log.info("refreshing the metadata of %s failed (%s); trying again", topic, exc)
            pending = retry

    def _refused(self, topic: str, partition: int, code: int) -> KafkaError:
        """The error of a refused write, naming the partition's current ISR (logged by whoever
        handles it: the async send thread, the CLI's one line)."""
        isr: tuple[int, ...] = ()
        try:
            current = self._metadata.refresh(topic)
            if current is not None and partition < current.partition_count:
                isr = current.isr(partition)
        except ConnectionError:
            pass
        return ack_error(topic, partition, code, isr)

    def _ask(self, broker_id: int, address: Address, topic: str) -> Metadata | None:
        ask = getattr(self._producer_at(broker_id, address), "metadata", None)
        return None if ask is None else ask((topic,))  # a stand-in without it knows 0.7 topics only
