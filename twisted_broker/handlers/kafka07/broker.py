"""Request handling of a Kafka 0.7 broker: from decoded requests to log calls and response pieces.

A response is a list of pieces, ``bytes`` and ``FileRegion``s, that the protocol writes in
order, streaming the regions from their files; produce requests have none. The reactions to
bad input are 0.7.2's (spec 2.4): fetches turn errors into error codes; produce and offsets
requests have no way to carry one, so the broker raises ``CloseConnection`` and the protocol
closes the socket, except for an oversize message, which 0.7.2 drops silently.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from twisted_broker.errors import (
    CloseConnection, InvalidFetchSize, InvalidMessage, InvalidTopic, KafkaError, MessageSizeTooLarge,
    OffsetOutOfRange, PartitionNotReady, UnknownError, WrongPartition,
)
from twisted_broker.handlers.held_fetch import HeldFetch
from twisted_broker.handlers.kafka07.authorization import Kafka07Authorization
from twisted_broker.security.acl import ANONYMOUS
from twisted_broker.security.authorizer import AclAuthorizer
from twisted_broker.server.stats import BrokerStats
from twisted_broker.storage.log import Log
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.storage.segment import FileRegion, Piece
from twisted_broker.codec.kafka07.message_set import validate_message_set
from twisted_broker.codec.kafka07.produce_run import run_message_set, unflushed_after
from twisted_broker.codec.kafka07.replication import (
    ALL_REQUEST_CLASSES, EpochEndOffsetRequest, MetadataRequest, ProduceAckRequest, ReplicaFetchRequest,
)
from twisted_broker.codec.kafka07.requests import (
    REQUEST_CLASSES, FetchRequest, MultiFetchRequest, MultiProduceRequest, OffsetRequest, ProduceRequest, Kafka07Request,
)
from twisted_broker.codec.kafka07.responses import NO_ERROR, encode_offsets_response, encode_response_header

if TYPE_CHECKING:  # replication is optional here: a Broker without it never sees a Replica
    from twisted_broker.replication.replica import Replica

log = logging.getLogger(__name__)


class Broker:
    """Serves requests against a LogManager. Reactor thread only."""

    def __init__(self, logs: LogManager, stats: BrokerStats, *, max_message_size: int = 1_000_000,
                 choose: Callable[[int], int] | None = None, replication=None,
                 authorizer: AclAuthorizer | None = None) -> None:
        self.logs = logs
        self.stats = stats
        self.max_message_size = max_message_size
        self._choose = choose or random.SystemRandom().randrange
        self._handlers = {ProduceRequest: self._produce, MultiProduceRequest: self._multiproduce,
                          FetchRequest: self._fetch, MultiFetchRequest: self._multifetch,
                          OffsetRequest: self._offsets}
        # handlers/kafka07/replication_requests.ReplicationRequests, when this broker replicates.
        self.replication = replication
        # The ACLs' checks (handlers/kafka07/authorization.py); None: authorization is off.
        self.authorization = authorizer and Kafka07Authorization(authorizer)
        self.request_classes = REQUEST_CLASSES  # what the protocol decodes: 0.7's, and replication's
        if replication is not None:
            self.request_classes = ALL_REQUEST_CLASSES
            self._handlers.update({
                ReplicaFetchRequest: replication.replica_fetch,
                EpochEndOffsetRequest: replication.epoch_end_offset,
                ProduceAckRequest: lambda request: replication.produce_ack(request, self._append_0_7),
                MetadataRequest: replication.metadata})

    def handle(self, request: Kafka07Request, principal: str = ANONYMOUS, host: str = "") -> list[Piece]:
        """The response pieces for ``request`` (empty for produce), or a Deferred of them for
        replication's requests that wait. ``principal`` and ``host`` (the peer's address) are
        who sent it, for the ACLs when authorization is on. Raises CloseConnection."""
        if self.authorization is not None:
            return self.authorization.handle(request, self.serve, principal, host)
        return self._handlers[type(request)](request)

    def serve(self, request: Kafka07Request) -> list[Piece]:
        """``handle`` without the ACLs' checks."""
        return self._handlers[type(request)](request)

    def hold_fetch(self, request: Kafka07Request, resume: Callable[[], object], *, wait_s: float, clock) -> HeldFetch | None:
        """Hold a fetch with nothing new in any partition until a flush publishes data in one
        of them or ``wait_s`` ends (fetch.wait.max.ms), then ``resume()``; None: answer now."""
        logs = self.caught_up_logs(request)
        return None if logs is None else HeldFetch(clock, logs, resume, wait_s)

    # -- produce -------------------------------------------------------------------------

    def _produce(self, request: ProduceRequest) -> list[Piece]:
        self._append(request)
        return []

    def _multiproduce(self, request: MultiProduceRequest) -> list[Piece]:
        for part in request.produces:  # earlier parts stay appended if a later one fails
            self._append(part)
        return []

    def _append(self, request: ProduceRequest) -> None:
        topic = request.topic
        if self.replication is not None and self.replication.cluster.is_replicated(topic):
            self._append_replicated(request)
            return
        try:
            partition = request.partition
            if partition == -1:
                partition = self._choose(self.logs.partitions_for(topic))
            log_ = self.logs.get_or_create_log(topic, partition)  # even if the set is invalid, as 0.7
            messages = validate_message_set(request.messages, max_message_size=self.max_message_size)
            log_.append(messages)
        except MessageSizeTooLarge as exc:
            log.warning("dropped produce to %s-%s: %s", topic, request.partition, exc)
            self._failed_produce(topic)
            return
        except (InvalidTopic, WrongPartition, InvalidMessage, PartitionNotReady) as exc:
            self._failed_produce(topic)
            raise CloseConnection(f"produce to {topic!r} partition {request.partition}: {exc}") from exc
        except OSError as exc:  # LogWriteError, or the log directory could not be created
            # The producer has no other way to learn that its messages were not stored.
            self._failed_produce(topic)
            log.error("append to %s-%s failed: %s", topic, partition, exc)
            raise CloseConnection(f"produce to {topic}-{partition}: disk error") from exc
        self.stats.produced(topic, partition, messages.message_count, len(messages))

    def run_target(self, topic: bytes, partition: int) -> tuple[str, int, Log, Replica | None] | None:
        """Where a run of pipelined Produce requests to ``topic`` (as sent) and ``partition``
        may be appended as one write (codec/kafka07/produce_run.py): (topic, partition, its
        log, the replica when this broker leads a replicated topic's partition) for a named
        partition (not -1); None, and the requests go the usual way, which chooses a
        partition or says what is wrong. A replicated topic's run gets the checks each of its
        requests would (``leader_for_0_7_produce``: this broker leads, with enough in-sync
        replicas). Asked before the run's frames are read, so a refusal costs one lookup."""
        if partition < 0:
            return None
        try:
            name = topic.decode()
            if self.replication is not None and self.replication.cluster.is_replicated(name):
                replica = self.replication.leader_for_0_7_produce(name, partition, counted=False)
                return name, partition, replica.log, replica
            return name, partition, self.logs.get_or_create_log(name, partition), None
        except (UnicodeDecodeError, InvalidTopic, WrongPartition, PartitionNotReady, KafkaError, OSError):
            return None

    def append_run(self, target: tuple[str, int, Log, Replica | None], message_sets: list, counts: list[int]) -> int:
        """Append the message sets of consecutive Produce requests to ``target`` (``run_target``'s),
        each plain messages that passed whole with ``counts`` messages, as one write, when
        that is what appending each in turn would do. Returns how many were appended: those
        that go to one segment (0.7 rolls between them where each alone would roll); 0, and
        the requests go the usual way.

        The flush policy's count goes on as if each had been appended alone: a flush starts
        when the run reaches ``log.flush.interval`` (it covers the whole run), and the count
        then holds the messages of the requests after the one that would have started the last
        flush, so the next flush starts where it would have (a producer's burst of a multiple
        of the interval still ends with a flush). A leader's high watermark and its followers'
        fetch sessions hear of the run once, as of one request."""
        topic, partition, log_, leader = target
        taken = _sets_in_one_segment(log_, message_sets)
        messages = run_message_set(message_sets[:taken], counts[:taken])
        try:
            unflushed = unflushed_after(log_.unflushed_messages, counts[:taken], log_.policy.flush_interval_messages)
            if leader is None:
                log_.append(messages)
                self.stats.produced(topic, partition, messages.message_count, len(messages))
            else:
                self.replication.append_validated(leader, messages)
            # (While a consumer waits, each append asks for a flush anyway: the count only
            # makes the next one come no later than it would.)
            log_.unflushed_messages = unflushed
        except (KafkaError, OSError):
            return 0  # the usual path appends those before the one that fails, and says why
        return taken

    def _append_0_7(self, request: ProduceRequest) -> int:
        """A ProduceAck part for a 0.7 topic: appended as 0.7 does; returns its offset.
        Raises KafkaError (InvalidMessage, WrongPartition, ...) or OSError."""
        partition = request.partition
        if partition == -1:
            partition = self._choose(self.logs.partitions_for(request.topic))
        messages = validate_message_set(request.messages, max_message_size=self.max_message_size)
        offset = self.logs.get_or_create_log(request.topic, partition).append(messages)
        self.stats.produced(request.topic, partition, messages.message_count, len(messages))
        return offset

    def _append_replicated(self, request: ProduceRequest) -> None:
        """A 0.7 produce to a replicated topic (docs/replication.md §7): only its leader
        takes it, with enough in-sync replicas; refused the 0.7 way otherwise."""
        topic = request.topic
        try:
            replica = self.replication.leader_for_0_7_produce(topic, request.partition)
            self.replication.append(replica, request.messages)
        except MessageSizeTooLarge as exc:
            log.warning("dropped produce to %s-%s: %s", topic, request.partition, exc)
            self._failed_produce(topic)
        except KafkaError as exc:
            self._failed_produce(topic)
            raise CloseConnection(f"produce to {topic!r} partition {request.partition}: {exc}") from exc
        except OSError as exc:
            self._failed_produce(topic)
            log.error("append to %s-%s failed: %s", topic, request.partition, exc)
            raise CloseConnection(f"produce to {topic}-{request.partition}: disk error") from exc

    def _log_for_read(self, topic: str, partition: int) -> Log | None:
        """The log a 0.7 fetch or offsets request reads: a replica's (up to its high
        watermark) for a replicated topic. Raises InvalidTopic or WrongPartition."""
        if self.replication is not None and self.replication.cluster.is_replicated(topic):
            return self.replication.replica_log(topic, partition)
        return self.logs.get_log(topic, partition)

    def _failed_produce(self, topic: str) -> None:
        self.stats.all_topics.failed_produce_requests += 1
        if self.logs.has_topic(topic):
            self.stats.topic(topic).failed_produce_requests += 1

    # -- fetch ---------------------------------------------------------------------------

    def _fetch(self, request: FetchRequest) -> list[Piece]:
        error, region = self._read(request)
        length = region.length if region is not None else 0
        header = encode_response_header(error, length)
        return [header, region] if region is not None else [header]

    def _multifetch(self, request: MultiFetchRequest) -> list[Piece]:
        parts: list[Piece] = []
        total = 0
        for fetch in request.fetches:
            error, region = self._read(fetch)
            length = region.length if region is not None else 0
            parts.append(encode_response_header(error, length))
            if region is not None:
                parts.append(region)
            total += 6 + length
        return [encode_response_header(NO_ERROR, total), *parts]  # the outer error is always 0

    def caught_up_logs(self, request: Kafka07Request) -> list[Log] | None:
        """The logs a fetch may wait on: those of every partition it asks for, when each
        exists and is asked at its flushed end (nothing new to send). None when anything is
        due at once: data, an error, a partition with no log yet, or not a fetch."""
        if isinstance(request, FetchRequest):
            fetches: tuple[FetchRequest, ...] | list[FetchRequest] = (request,)
        elif isinstance(request, MultiFetchRequest):
            fetches = request.fetches
        else:
            return None
        logs = []
        for fetch in fetches:
            try:
                log_ = self._log_for_read(fetch.topic, fetch.partition)
            except (InvalidTopic, WrongPartition):
                return None
            if log_ is None or fetch.max_size <= 0 or fetch.offset != log_.end_offset:
                return None
            logs.append(log_)
        return logs or None

    def _read(self, request: FetchRequest) -> tuple[int, FileRegion | None]:
        """(error code, region or None) for one fetch; 0.7 answers every problem with a code."""
        try:
            if request.max_size < 0:
                raise InvalidFetchSize(f"negative fetch size {request.max_size}")
            log_ = self._log_for_read(request.topic, request.partition)
            region = log_.read(request.offset, request.max_size) if log_ is not None else None
            if region is None and log_ is not None and request.offset == log_.end_offset:
                log_.flush_for_reader()  # a consumer waits for what is written: flush it now
        except (OffsetOutOfRange, WrongPartition, InvalidFetchSize, InvalidMessage) as exc:
            # InvalidMessage: the message at the offset is damaged on disk (logged once where found).
            self._failed_fetch(request.topic)
            return exc.code, None
        except (InvalidTopic, OSError) as exc:
            if isinstance(exc, OSError):
                log.error("fetch from %s-%s failed: %s", request.topic, request.partition, exc)
            self._failed_fetch(request.topic)
            return UnknownError.code, None
        if region is not None:
            self.stats.record_fetched(request.topic, region.length)
        return NO_ERROR, region

    def _failed_fetch(self, topic: str) -> None:
        self.stats.all_topics.failed_fetch_requests += 1
        if self.logs.has_topic(topic):
            self.stats.topic(topic).failed_fetch_requests += 1

    # -- offsets -------------------------------------------------------------------------

    def _offsets(self, request: OffsetRequest) -> list[Piece]:
        try:
            if request.max_offsets < 0:
                raise ValueError(f"negative maximum number of offsets {request.max_offsets}")
            log_ = self._log_for_read(request.topic, request.partition)
        except (InvalidTopic, WrongPartition, ValueError) as exc:
            raise CloseConnection(f"offsets of {request.topic!r} partition {request.partition}: {exc}") from exc
        if log_ is None:  # 0.7: a partition with no log yet has offset 0 and nothing before it
            offsets = [0] if request.time in (-1, -2) else []
        else:
            offsets = log_.offsets_before(request.time, request.max_offsets)
        return [encode_offsets_response(offsets)]


def _sets_in_one_segment(log_: Log, message_sets: list) -> int:
    """How many of ``message_sets``, appended in turn, go to the segment the first goes to.
    0.7 checks log.file.size before each append (its maybeRoll): a segment takes sets until
    it has passed that size, and the next starts a new one."""
    limit = log_.policy.file_size
    size = log_.newest_segment.size
    if size > limit:
        size = 0  # the first set's append rolls first
    for taken, message_set in enumerate(message_sets):
        if size > limit:
            return taken
        size += len(message_set)
    return len(message_sets)
