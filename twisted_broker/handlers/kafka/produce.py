"""Produce (v3-7) of the modern listener: record batches into the logs the 0.7 port writes.

Each partition's record set is checked whole before anything of it is appended: magic 2
batches by their CRC32C and size (``kafka.max.batch.bytes``, not 0.7's max.message.size);
a magic 0/1 message set (older clients) is decoded and rebuilt as one magic 2 batch with its
keys and timestamps. Each batch is stamped with its base offset (docs/kafka-protocol.md §2:
the log's modern end) and the leader epoch, and stored as one 0.7 gzip wrapper (§3,
storage/record_offsets.py), so 0.7 consumers read its values.

Acknowledgement: acks=0 gets no answer; acks=1 once appended; acks=-1 (all) once the batch
is committed, i.e. visible to consumers, or error 7 at the request's timeout. On a replicated
topic that is when every in-sync replica has it (the high watermark passes it; refused up
front with 19 while the ISR is below ``min.insync.replicas``). A 0.7 topic has one copy whose
data is visible once flushed (``log.visibility``): acks=all asks for the flush at once (the
flusher groups concurrent requests into one fsync) and answers when it is published, so a
consumer started after the acknowledgement reads the batch, as with Kafka.

Idempotent producers (docs/kafka-protocol.md §5): InitProducerId hands out ids
(coordinator/producer/producer_ids.py); a batch with a producer id is checked against its
partition's table (coordinator/producer/producer_state.py) before it is appended: a retry
of one of the last five is acknowledged with the offset it was stored at and not stored
again.

Errors per partition (docs/kafka-protocol.md §7): 2 corrupt batch, 3 unknown topic or
partition, 6 not the leader, 10 batch too large, 19 too few in-sync replicas, 21 bad acks,
45 out-of-order sequence, 47 fenced producer epoch, 56 disk error, 59 unknown producer.
"""

from __future__ import annotations

import logging

from twisted.internet.defer import Deferred, DeferredList, fail, inlineCallbacks

from twisted_broker.coordinator.producer.producer_state import ProducerStates
from twisted_broker.codec.kafka import errors as kafka_errors
from twisted_broker.codec.kafka.legacy_sets import LegacySetError, decode_legacy_set
from twisted_broker.codec.kafka.protocol import Request
from twisted_broker.codec.kafka.record_batch import (
    CorruptBatch, batch_values, build_batch, check_batch, record_set_magic, split_batches,
)
from twisted_broker.codec.kafka.record_compression import UnsupportedCompression
from twisted_broker.codec.kafka07.replication_errors import RequestTimedOut
from twisted_broker.replication.replica_manager import ReplicaManager
from twisted_broker.handlers.kafka.partitions import PartitionError, PartitionFinder, Target, partition_answers
from twisted_broker.server.stats import BrokerStats
from twisted_broker.storage.log import Log
from twisted_broker.storage.record_offsets import append_batch, earliest, iter_batch_headers

log = logging.getLogger(__name__)

ACKS = (0, 1, -1)
PRODUCED = {"base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1}  # until appended


class BadRecords(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


class ProduceRequests:
    """The Produce handler; ``clock`` times acks=all waits and stamps records of magic 0 sets,
    which have no time."""

    def __init__(self, partitions: PartitionFinder, stats: BrokerStats, *, max_batch_bytes: int, clock,
                 producer_ids, replicas: ReplicaManager | None = None) -> None:
        self.partitions = partitions
        self.replicas = replicas  # this broker's replicas (commits, appends); None without ZooKeeper
        self.stats = stats
        self.max_batch_bytes = max_batch_bytes
        self.clock = clock
        self.producer_ids = producer_ids  # coordinator/producer/producer_ids.py: ZooKeeper's or log.dir's
        self.producers = ProducerStates()
        self._epochs: dict[tuple[str, int], int] = {}  # the leader epoch each table was built in

    def init_producer_id(self, request: Request):
        """A new producer id at epoch 0. A transactional id asks for transactions, which this
        broker does not have: error 35, as docs/kafka-protocol.md says."""
        if request.body["transactional_id"] is not None:
            return {"throttle_time_ms": 0, "error_code": kafka_errors.UNSUPPORTED_VERSION, "producer_id": -1,
                    "producer_epoch": -1}
        return self.producer_ids.init_producer_id().addCallback(lambda result: {
            "throttle_time_ms": 0, "error_code": result.error, "producer_id": result.producer_id,
            "producer_epoch": result.producer_epoch})

    def produce(self, request: Request) -> Deferred:
        """The answer; the Deferred's ``writes_done`` is true once every append of the request
        is done and only its acknowledgements wait (network/kafka.py then handles the requests
        behind it meanwhile: librdkafka sends one acks=all Produce per partition, pipelined).
        Never for an idempotent producer's batches: those are served one request at a time, as
        Kafka serves every request (the nemesis of 2026-12-06 saw two such batches, both
        appended before a refusal after the append, stored again by the producer's retries)."""
        body = request.body
        if body["acks"] in (0, 1) and all(self.partitions.layout_known(topic["name"], part["index"])
                                          for topic in body["topic_data"] for part in topic["partition_data"]):
            try:  # nothing to wait for: the answer itself, not a Deferred of it
                return self._produce_now(request)
            except Exception:  # noqa: BLE001 - answered as a failed Deferred answer is (the connection closes)
                return fail()
        done: list = []
        answer = self._produce(request, done)
        answer.writes_done = done.__len__
        return answer

    def _produce_now(self, request: Request):
        """``_produce`` for acks 0 and 1 when every partition's layout is known: no waits."""
        body = request.body
        acks, answers = body["acks"], []
        for topic, part, answer in partition_answers(body["topic_data"], answers, PRODUCED, asked="partition_data",
                                                     index="index", answered="partition_responses"):
            if body.get("transactional_id") is not None:
                answer["error_code"] = kafka_errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                continue
            try:
                target = self.partitions.for_write_now(topic["name"], part["index"], acks)
            except PartitionError as exc:
                answer["error_code"] = exc.code
                continue
            except OSError as exc:  # the log's directory could not be made
                _storage_error(topic, part, answer, exc)
                continue
            self._append_part(request, topic, part, answer, target)
        return None if acks == 0 else {"responses": answers, "throttle_time_ms": 0}

    def _append_part(self, request: Request, topic: dict, part: dict, answer: dict, target: Target):
        """Check and append one partition's records, filling in ``answer``; returns its batches
        (None: refused, the error in ``answer``)."""
        try:
            batches = self._batches(part["records"])
            answer["base_offset"] = self._append(target, batches)
            answer["log_start_offset"] = earliest(target.log)
        except BadRecords as exc:
            answer["error_code"] = exc.code
            log.warning("refused produce to %s-%d from %s: %s", topic["name"], part["index"], request.client_id, exc)
            return None
        except PartitionError as exc:
            answer["error_code"] = exc.code
            return None
        except OSError as exc:
            _storage_error(topic, part, answer, exc)
            return None
        return batches

    @inlineCallbacks
    def _produce(self, request: Request, done: list):
        body = request.body
        acks, timeout_ms = body["acks"], body["timeout_ms"]
        answers, waits = [], []
        idempotent = False
        for topic, part, answer in partition_answers(body["topic_data"], answers, PRODUCED, asked="partition_data",
                                                     index="index", answered="partition_responses"):
            if acks not in ACKS:
                answer["error_code"] = kafka_errors.INVALID_REQUIRED_ACKS
                continue
            if body.get("transactional_id") is not None:
                answer["error_code"] = kafka_errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                continue
            try:
                target = yield self.partitions.for_write(topic["name"], part["index"], acks)
            except PartitionError as exc:
                answer["error_code"] = exc.code
                continue
            except OSError as exc:
                _storage_error(topic, part, answer, exc)
                continue
            batches = self._append_part(request, topic, part, answer, target)
            if batches is None:
                continue
            idempotent = idempotent or any(header.producer_id >= 0 for _batch, header, _values in batches)
            if acks == -1 and target.replica is not None:
                waits.append((answer, self.replicas.wait_for_commit(target.replica, target.replica.log.written_end,
                                                                    timeout_ms)))
            elif acks == -1:
                waits.append((answer, wait_visible(target.log, target.log.written_end, timeout_ms, self.clock)))
        if not idempotent:
            done.append(True)
        if waits:
            results = yield DeferredList([waiting for _, waiting in waits], consumeErrors=True)
            for (answer, _), (ok, value) in zip(waits, results):
                if not ok:
                    error = value.value
                    answer["error_code"] = getattr(error, "code", RequestTimedOut.code)
        if acks == 0:
            return None
        return {"responses": answers, "throttle_time_ms": 0}

    # -- checking ------------------------------------------------------------------------

    def _batches(self, records) -> list[tuple[bytearray, object, list]]:
        """The record set as (batch, header, values), all checked before any is appended; a
        magic 0/1 set rebuilt as one batch. Raises BadRecords."""
        if records is None or not len(records):
            raise BadRecords(kafka_errors.CORRUPT_MESSAGE, "no records")
        try:
            if record_set_magic(records) < 2:
                batch, header = self._converted(records)
                return [(batch, header, batch_values(batch, header))]
            checked = []
            for batch in split_batches(records):
                header = check_batch(batch)
                if header.size > self.max_batch_bytes:
                    raise BadRecords(kafka_errors.MESSAGE_TOO_LARGE,
                                     f"batch of {header.size} bytes, kafka.max.batch.bytes={self.max_batch_bytes}")
                if header.is_transactional or header.is_control:
                    raise BadRecords(kafka_errors.UNSUPPORTED_FOR_MESSAGE_FORMAT, "transactions are not supported")
                checked.append((bytearray(batch), header,
                                batch_values(batch, header, max_bytes=self.max_batch_bytes * 10)))
            return checked
        except (CorruptBatch, LegacySetError) as exc:
            raise BadRecords(kafka_errors.CORRUPT_MESSAGE, str(exc)) from None
        except UnsupportedCompression as exc:
            raise BadRecords(kafka_errors.UNSUPPORTED_COMPRESSION_TYPE, str(exc)) from None

    def _converted(self, records) -> tuple[bytearray, object]:
        if len(records) > self.max_batch_bytes:
            raise BadRecords(kafka_errors.MESSAGE_TOO_LARGE, f"message set of {len(records)} bytes")
        legacy = decode_legacy_set(records, max_bytes=self.max_batch_bytes * 10)
        if not legacy:
            raise BadRecords(kafka_errors.CORRUPT_MESSAGE, "no complete message")
        now = int(self.clock.seconds() * 1000)
        batch = bytearray(build_batch([(r.timestamp if r.timestamp >= 0 else now, r.key, r.value) for r in legacy]))
        return batch, check_batch(batch)

    # -- appending -------------------------------------------------------------------------

    def _append(self, target: Target, batches) -> int:
        """Stamp, store and append each batch; returns the first one's base offset. A retried
        batch of an idempotent producer is acknowledged with its stored offset, not stored
        again; one out of sequence raises BadRecords with its error (45, 47, 59)."""
        log_ = target.log
        first = None
        count = size = 0
        for batch, header, values in batches:
            producers = self._producers(target) if header.producer_id >= 0 else None
            if producers is not None:
                verdict = producers.check(header.producer_id, header.producer_epoch, header.base_sequence,
                                          header.last_sequence)
                if verdict.error:
                    raise BadRecords(verdict.error, f"producer {header.producer_id}: {verdict.outcome}")
                if verdict.base_offset >= 0:  # a duplicate
                    first = verdict.base_offset if first is None else first
                    continue
            base = append_batch(log_, batch, values, target.leader_epoch)
            if producers is not None:
                producers.record_header(header, base)
            first = base if first is None else first
            count += len(values)
            size += len(batch)
        topic = target.replica.topic if target.replica is not None else log_.topic
        # Counted before replication hears of it, in the order of the 0.7 paths
        # (ReplicationRequests.append).
        self.stats.produced(topic, log_.partition, count, size)
        if target.replica is not None and count:
            self.replicas.appended(target.replica)
        return first

    def _producers(self, target: Target):
        """The idempotent producers' table of the partition: built from its stored batches the
        first time, and again in each new leader term (a follower's log may have changed)."""
        log_ = target.log
        key = (log_.topic, log_.partition)
        if self._epochs.get(key, target.leader_epoch) != target.leader_epoch:
            self.producers.forget(key)
        self._epochs[key] = target.leader_epoch
        return self.producers.table(key, lambda: iter_batch_headers(log_))


def _storage_error(topic: dict, part: dict, answer: dict, exc: OSError) -> None:
    log.error("append to %s-%d failed: %s", topic["name"], part["index"], exc)
    answer["error_code"] = kafka_errors.KAFKA_STORAGE_ERROR


def wait_visible(log_: Log, end: int, timeout_ms: int, clock) -> Deferred:
    """Fires once ``log_`` shows consumers everything before ``end`` (acks=all on a 0.7
    topic); fails with RequestTimedOut after ``timeout_ms``. Asks for the flush at once."""
    visible: Deferred = Deferred()
    deadline = clock.seconds() + max(timeout_ms, 0) / 1000
    timer = None

    def published(at_once: bool = False) -> None:
        if at_once:  # where the broker heard of the flush (storage/log.py's watch_flush)
            if timer.active():
                timer.cancel()
            settle()
        elif timer.active():  # inside the log's publishing: settle from a clean reactor step
            timer.reset(0)

    def settle() -> None:
        nonlocal timer
        log_.unwatch_flush(published)
        if log_.end_offset >= end:
            visible.callback(None)
        elif clock.seconds() >= deadline:
            visible.errback(RequestTimedOut(f"{log_.name}: not flushed within {timeout_ms} ms"))
        else:
            timer = clock.callLater(deadline - clock.seconds(), settle)
            log_.watch_flush(published)

    log_.start_flush()
    settle()
    return visible
