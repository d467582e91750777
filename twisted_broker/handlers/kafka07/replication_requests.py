"""The broker's answers to replication's request types (codec/kafka07/replication.py), and its view of
replicated topics for 0.7's requests (docs/replication.md §5, §7).

Answers are response pieces as for 0.7's requests (bytes and file regions, streamed), or a
Deferred of them when the answer waits: a follower's fetch with nothing new (long-poll up to
its max wait, woken by the next append; replica_fetch.py), and a produce with acks=all (until the high
watermark passes it, or its timeout).
"""

from __future__ import annotations

import logging
import random

from twisted.internet.defer import Deferred, DeferredList, inlineCallbacks
from twisted.internet.task import deferLater

from twisted_broker.errors import (
    InvalidMessage, InvalidTopic, KafkaError, MessageSizeTooLarge, PartitionNotReady, UnknownError,
)
from twisted_broker.registry import replication_paths
from twisted_broker.replication.admin import Kafka07Topic, create_replicated_topic, wait_for_leaders
from twisted_broker.replication.assignment import AssignmentError
from twisted_broker.codec.kafka07.replication_errors import RequestTimedOut
from twisted_broker.replication.replica import Replica
from twisted_broker.replication.replica_manager import ReplicaManager
from twisted_broker.handlers.kafka07.replica_fetch import ReplicaFetches
from twisted_broker.codec.kafka07.message_set import validate_message_set
from twisted_broker.codec.kafka07.replication import (
    NOT_REPLICATED, EpochEndOffsetRequest, Metadata, MetadataRequest, PartitionMetadata, ProduceAckRequest,
    TopicMetadata, encode_epoch_end_offsets, encode_metadata, encode_produce_acks,
)
from twisted_broker.codec.kafka07.responses import NO_ERROR, encode_response_header
# Kafka's code: more replicas asked than live brokers.
from twisted_broker.codec.kafka.errors import INVALID_REPLICATION_FACTOR

log = logging.getLogger(__name__)

INVALID_TOPIC = 17  # Kafka's INVALID_TOPIC_EXCEPTION
TOPIC_CREATION_WAIT_S = 5.0
CREATION_RETRY_S = 0.2


class ReplicationRequests:
    """Handlers for one broker; ``stats`` and ``max_message_size`` are the Broker's."""

    def __init__(self, manager: ReplicaManager, *, stats, max_message_size: int, default_replication_factor: int,
                 num_partitions: int, clock) -> None:
        self.manager = manager
        self.cluster = manager.cluster
        self.stats = stats
        self.max_message_size = max_message_size
        self.default_replication_factor = default_replication_factor
        self.num_partitions = num_partitions
        self.clock = clock
        self.replica_fetch = ReplicaFetches(manager, clock).replica_fetch

    # -- follower fetches (replica_fetch.py) ---------------------------------------------------

    def epoch_end_offset(self, request: EpochEndOffsetRequest) -> list:
        answers = []
        for query in request.queries:
            try:
                epoch, end = self.manager.epoch_end_offset(request.replica_id, query.topic, query.partition,
                                                           query.current_leader_epoch, query.epoch)
                answers.append((NO_ERROR, epoch, end))
            except KafkaError as exc:
                answers.append((exc.code, -1, -1))
        body = encode_epoch_end_offsets(answers)
        return [encode_response_header(NO_ERROR, len(body)) + body]

    # -- produce with acknowledgements ----------------------------------------------------------

    def produce_ack(self, request: ProduceAckRequest, append_0_7) -> list | Deferred:
        """The answer pieces, or a Deferred of them while acks=all writes wait for their
        commit. ``append_0_7(produce)`` appends a part for a 0.7 topic (acknowledged once
        appended)."""
        answers: list = []
        waits: list[tuple[int, Deferred]] = []
        for part in request.produce.produces:
            offset = -1
            try:
                if not self.cluster.is_replicated(part.topic):
                    if not self.cluster.synced and not self.manager.logs.has_topic(part.topic):
                        # Just started: a topic not known here may be a replicated one all the same.
                        raise PartitionNotReady(f"{part.topic}: replication's state not read from ZooKeeper yet")
                    offset = append_0_7(part)
                else:
                    replica = self.manager.leader_for_write(part.topic, part.partition, request.required_acks)
                    offset = self.append(replica, part.messages)
                    if request.required_acks == -1:
                        waits.append((len(answers), self.manager.wait_for_commit(
                            replica, replica.log.written_end, request.timeout_ms)))
                error = NO_ERROR
            except MessageSizeTooLarge as exc:
                error = InvalidMessage.code
                log.warning("refused produce to %s-%s: %s", part.topic, part.partition, exc)
            except KafkaError as exc:
                error = exc.code
            except OSError as exc:
                error = UnknownError.code
                log.error("append to %s-%s failed: %s", part.topic, part.partition, exc)
            answers.append([part.topic, part.partition, error, offset])
        if not waits:  # the common acks=1 case: no Deferred at all
            return self._acks(request, answers)
        if len(waits) == 1:
            [(index, waiting)] = waits
            return waiting.addCallbacks(lambda _: self._acks(request, answers),
                                        lambda failure: self._acks(request, answers, {index: failure.value}))

        def settled(results):
            failed = {index: value.value for (index, _d), (ok, value) in zip(waits, results) if not ok}
            return self._acks(request, answers, failed)
        return DeferredList([d for _, d in waits], consumeErrors=True).addCallback(settled)

    @staticmethod
    def _acks(request: ProduceAckRequest, answers: list, failed: dict | None = None) -> list:
        for index, error in (failed or {}).items():
            answers[index][2] = error.code if isinstance(error, KafkaError) else RequestTimedOut.code
        if request.required_acks == 0:
            return []
        body = encode_produce_acks([tuple(a) for a in answers])
        return [encode_response_header(NO_ERROR, len(body)) + body]

    def append(self, replica: Replica, messages) -> int:
        """Validate and append a set to a leader's log; returns its offset. Raises
        InvalidMessage (MessageSizeTooLarge) or LogWriteError."""
        return self.append_validated(replica, validate_message_set(messages, max_message_size=self.max_message_size))

    def append_validated(self, replica: Replica, validated) -> int:
        """Append a validated set to a leader's log (a run of 0.7 Produce requests comes so:
        handlers/kafka07/broker.py's ``append_run``); returns its offset. Raises LogWriteError."""
        offset = replica.log.append(validated)
        self.stats.produced(replica.topic, replica.partition, validated.message_count, len(validated))
        self.manager.appended(replica)
        return offset

    def replica_log(self, topic: str, partition: int):
        """The log of this broker's replica of a replicated partition (a 0.7 fetch or offsets
        request reads it up to its high watermark). Raises WrongPartition."""
        return self.manager.replica(topic, partition).log

    def leader_for_0_7_produce(self, topic: str, partition: int, *, counted: bool = True) -> Replica:
        """The replica a 0.7 produce appends to: it must lead, with enough in-sync replicas
        (0.7's produce cannot be acknowledged, so it gets acks=all's checks). Partition -1:
        one of those this broker leads, at random. Raises KafkaError; a refusal for too few
        in-sync replicas is counted and logged unless not ``counted`` (a run's question, asked
        before its requests go the usual way, which counts each)."""
        if partition == -1:
            led = [p for (t, p), r in self.manager.replicas.items() if t == topic and r.leader is not None]
            if not led:
                raise KafkaError(f"broker {self.manager.broker_id} leads no partition of {topic!r}")
            partition = random.choice(led)
        return self.manager.leader_for_write(topic, partition, -1, counted=counted)

    # -- metadata -------------------------------------------------------------------------

    def metadata(self, request: MetadataRequest) -> Deferred:
        """A Deferred of ``_metadata``'s answer; cancelling it (the connection went) lets the
        work (a topic's creation in ZooKeeper) finish, unanswered."""
        answer: Deferred = Deferred(lambda _: None)
        self._metadata(request).addBoth(lambda result: None if answer.called else answer.callback(result))
        return answer

    @inlineCallbacks
    def _metadata(self, request: MetadataRequest) -> list:
        """Leaders, replicas and ISR of each topic asked (every replicated one if none), and
        the live brokers. With default.replication.factor > 1, an unknown topic is created
        first. A topic's error: 3 for a 0.7 topic (or an unknown one when topics are created
        as 0.7 topics), 38 when it cannot be created with that factor, 17 for a bad name."""
        waited = 0.0
        while not self.cluster.synced and waited < TOPIC_CREATION_WAIT_S:
            # Just started (or reconnected for the first time): ZooKeeper not read yet, so an
            # existing topic would look unknown.
            yield deferLater(self.clock, CREATION_RETRY_S, lambda: None)
            waited += CREATION_RETRY_S
        topics = request.topics or tuple(sorted(self.cluster.assignments))
        errors = {}
        for topic in topics:
            if not self.cluster.is_replicated(topic) and self.default_replication_factor > 1:
                errors[topic] = yield self._create(topic)
        answer = []
        for topic in topics:
            assignment = self.cluster.assignments.get(topic)
            if assignment is None:
                answer.append(TopicMetadata(topic, errors.get(topic) or NOT_REPLICATED, ()))
                continue
            partitions = []
            for partition, replicas in sorted(assignment.replicas.items()):
                state = self.cluster.state(topic, partition)
                partitions.append(PartitionMetadata(
                    partition, state.leader if state else replication_paths.NO_LEADER,
                    state.leader_epoch if state else -1, replicas, state.isr if state else ()))
            answer.append(TopicMetadata(topic, NO_ERROR, tuple(partitions)))
        brokers = tuple((b, host, port) for b, (host, port) in sorted(self.cluster.brokers.items()))
        body = encode_metadata(Metadata(brokers, tuple(answer)))
        return [encode_response_header(NO_ERROR, len(body)) + body]

    @inlineCallbacks
    def _create(self, topic: str):
        """Create a replicated topic and wait (a few seconds) for its first leaders; returns
        the error its metadata carries if it could not be created, else None."""
        waited = 0.0
        while True:
            try:
                yield create_replicated_topic(self.manager.zk, topic, partitions=self.num_partitions,
                                              replication_factor=self.default_replication_factor,
                                              live_brokers=self.cluster.brokers)
                yield wait_for_leaders(self.cluster, topic, self.clock, TOPIC_CREATION_WAIT_S)
                return None
            except InvalidTopic as exc:
                log.warning("cannot create replicated topic %r: %s", topic, exc)
                return INVALID_TOPIC
            except Kafka07Topic:
                return NOT_REPLICATED
            except AssignmentError as exc:
                # Brokers that have just started may not see each other yet: wait a little.
                if waited >= TOPIC_CREATION_WAIT_S:
                    log.warning("cannot create replicated topic %r: %s", topic, exc)
                    return INVALID_REPLICATION_FACTOR
            except Exception as exc:
                log.warning("creating replicated topic %r failed: %s", topic, exc)
                return UnknownError.code
            yield deferLater(self.clock, CREATION_RETRY_S, lambda: None)
            waited += CREATION_RETRY_S

