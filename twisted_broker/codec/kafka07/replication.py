"""Replication's request types on the 0.7 port (docs/replication.md §5). Pure codecs.

No 0.7 client sends these types (0.7 uses 0-4), so they extend the port without changing a
byte of 0.7's layouts. Each request is ``int32 size``, ``int16 type``, then the body; each
response is ``int32 size``, ``int16 error`` (always 0: errors are per partition), then:

==================  ==========================================================================
ReplicaFetch (100)  replica int32, max wait ms int32, min bytes int32, session id int32,
                    session epoch int32, count int16, then per partition listed: topic
                    string16, partition int32, leader epoch int32, offset int64, max bytes
                    int32, flushed offset int64 (the follower's durable end); then forgotten
                    count int16, (topic string16, partition int32) x count
  response          (its header's error: the session's, 70 or 71) session id int32, then
                    parts: size int32, topic string16, partition int32, error int16, high
                    watermark int64, log end int64, epoch count int16, (epoch int32, start
                    offset int64) x count, message set bytes (the rest of the part: streamed
                    from the segment, as a 0.7 fetch)
EpochEndOffset      replica int32, count int16, then per partition: topic string16, partition
(101)               int32, current leader epoch int32, asked epoch int32
  response          count int32, then per partition: error int16, epoch int32, end offset int64
ProduceAck (102)    required acks int16 (0, 1, -1 = every in-sync replica), timeout ms int32,
                    then a MultiProduce body (count int16, produce bodies)
  response          count int32, then per produce: topic string16, partition int32, error
                    int16, offset int64 (where the set was appended; -1 if it was not)
Metadata (103)      count int16, topic string16 x count (none: every replicated topic)
  response          broker count int32, (id int32, host string16, port int32) x count, topic
                    count int32, then per topic: topic string16, error int16, partition count
                    int32, then per partition: partition int32, leader int32 (-1: none),
                    leader epoch int32, replica count int32, ids int32..., isr count int32,
                    ids int32...
==================  ==========================================================================
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from twisted_broker.errors import Truncated
from twisted_broker.codec.kafka07.primitives import (
    INT16, INT32, Buffer, decode_short_string, encode_short_string, unpack_at,
)
from twisted_broker.codec.kafka07.requests import REQUEST_CLASSES, REQUEST_NAMES, MultiProduceRequest, encode_request

REPLICA_FETCH = 100
EPOCH_END_OFFSET = 101
PRODUCE_ACK = 102
REPLICA_METADATA = 103
NOT_REPLICATED = 3  # a topic's error in a Metadata answer: a 0.7 topic, whose partitions are per broker
REPLICATION_REQUEST_NAMES = {REPLICA_FETCH: "replica-fetch", EPOCH_END_OFFSET: "epoch-end-offset",
                             PRODUCE_ACK: "produce-ack", REPLICA_METADATA: "metadata"}

_FETCH_HEAD = struct.Struct(">iiiii")  # replica, max wait ms, min bytes, session id, session epoch
_FETCH_PART = struct.Struct(">iiqiq")  # partition, leader epoch, offset, max bytes, flushed offset
_FETCH_ANSWER = struct.Struct(">ihqqh")  # partition, error, high watermark, log end, epoch count
_FORGOTTEN = struct.Struct(">i")  # partition
# Session epochs (docs/replication.md §5, fetch sessions): a one-off fetch, a new session.
SESSIONLESS = -1
NEW_SESSION = 0
_EPOCH_ENTRY = struct.Struct(">iq")  # epoch, start offset
_EPOCH_HEAD = struct.Struct(">i")  # replica
_EPOCH_PART = struct.Struct(">iii")  # partition, current leader epoch, asked epoch
_EPOCH_ANSWER = struct.Struct(">hiq")  # error, epoch, end offset
_ACK_HEAD = struct.Struct(">hi")  # required acks, timeout ms
_ACK_ANSWER = struct.Struct(">ihq")  # partition, error, offset
_BROKER = struct.Struct(">i")
_PARTITION_META = struct.Struct(">iii")  # partition, leader, leader epoch


def _topic_parts(buf: Buffer, pos: int, fmt: struct.Struct, make) -> tuple[tuple, int]:
    """An int16 count, then that many ``topic string16`` + ``fmt`` parts, each ``make(topic, *fields)``."""
    count, pos = _count(buf, pos, INT16)
    parts = []
    for _ in range(count):
        topic, pos = decode_short_string(buf, pos)
        parts.append(make(topic, *unpack_at(fmt, buf, pos)))
        pos += fmt.size
    return tuple(parts), pos


def _count(buf: Buffer, pos: int, fmt: struct.Struct = INT32) -> tuple[int, int]:
    (count,) = unpack_at(fmt, buf, pos)
    if count < 0:
        raise Truncated(pos, 0, len(buf) - pos)
    return count, pos + fmt.size


@dataclass(frozen=True, slots=True)
class ReplicaFetchPartition:
    topic: str
    partition: int
    leader_epoch: int  # the epoch the follower believes its leader has
    offset: int  # the follower's log end: it holds everything before
    max_bytes: int
    flushed_offset: int  # the follower's durable end (log.visibility=flushed)


@dataclass(frozen=True, slots=True)
class ReplicaFetchRequest:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    partitions: tuple[ReplicaFetchPartition, ...]  # listed: all (a full fetch) or those that changed
    session_id: int = 0
    session_epoch: int = SESSIONLESS
    forgotten: tuple[tuple[str, int], ...] = ()

    @classmethod
    def decode(cls, buf: Buffer, pos: int) -> tuple[ReplicaFetchRequest, int]:
        replica, wait, min_bytes, session_id, session_epoch = unpack_at(_FETCH_HEAD, buf, pos)
        parts, pos = _topic_parts(buf, pos + _FETCH_HEAD.size, _FETCH_PART, ReplicaFetchPartition)
        forgotten, pos = _topic_parts(buf, pos, _FORGOTTEN, lambda topic, partition: (topic, partition))
        return cls(replica, wait, min_bytes, parts, session_id, session_epoch, forgotten), pos

    def encode(self) -> bytes:
        return b"".join((
            _FETCH_HEAD.pack(self.replica_id, self.max_wait_ms, self.min_bytes, self.session_id, self.session_epoch),
            INT16.pack(len(self.partitions)),
            *(encode_short_string(p.topic) + _FETCH_PART.pack(p.partition, p.leader_epoch, p.offset, p.max_bytes,
                                                               p.flushed_offset) for p in self.partitions),
            INT16.pack(len(self.forgotten)),
            *(encode_short_string(topic) + _FORGOTTEN.pack(partition) for topic, partition in self.forgotten)))


def encode_replica_fetch_part_header(topic: str, partition: int, error: int, high_watermark: int, log_end: int,
                                     epochs: list[tuple[int, int]], message_bytes: int) -> bytes:
    """One partition's answer up to its message set, which the broker streams after it."""
    body = encode_short_string(topic) + _FETCH_ANSWER.pack(partition, error, high_watermark, log_end, len(epochs)) \
        + b"".join(_EPOCH_ENTRY.pack(epoch, start) for epoch, start in epochs)
    return INT32.pack(len(body) + message_bytes) + body


@dataclass(frozen=True, slots=True)
class ReplicaFetchAnswer:
    topic: str
    partition: int
    error: int
    high_watermark: int
    log_end: int
    epochs: tuple[tuple[int, int], ...]
    messages: memoryview


def decode_replica_fetch_response(body: Buffer) -> tuple[int, list[ReplicaFetchAnswer]]:
    """The session id and the per-partition answers of a ReplicaFetch response body (after
    its error code)."""
    view = memoryview(body)
    (session_id,) = unpack_at(INT32, view, 0)
    answers, pos = [], INT32.size
    while pos < len(view):
        (size,) = unpack_at(INT32, view, pos)
        end = pos + 4 + size
        if end > len(view):
            raise Truncated(pos, 4 + size, len(view) - pos)
        topic, at = decode_short_string(view[:end], pos + 4)
        partition, error, hw, log_end, count = unpack_at(_FETCH_ANSWER, view[:end], at)
        at += _FETCH_ANSWER.size
        if count < 0 or at + count * _EPOCH_ENTRY.size > end:
            raise Truncated(at, count * _EPOCH_ENTRY.size, end - at)
        epochs = tuple(_EPOCH_ENTRY.unpack_from(view, at + i * _EPOCH_ENTRY.size) for i in range(count))
        at += count * _EPOCH_ENTRY.size
        answers.append(ReplicaFetchAnswer(topic, partition, error, hw, log_end, epochs, view[at:end]))
        pos = end
    return session_id, answers


@dataclass(frozen=True, slots=True)
class EpochQuery:
    topic: str
    partition: int
    current_leader_epoch: int
    epoch: int


@dataclass(frozen=True, slots=True)
class EpochEndOffsetRequest:
    replica_id: int
    queries: tuple[EpochQuery, ...]

    @classmethod
    def decode(cls, buf: Buffer, pos: int) -> tuple[EpochEndOffsetRequest, int]:
        (replica,) = unpack_at(_EPOCH_HEAD, buf, pos)
        queries, pos = _topic_parts(buf, pos + _EPOCH_HEAD.size, _EPOCH_PART, EpochQuery)
        return cls(replica, queries), pos

    def encode(self) -> bytes:
        return _EPOCH_HEAD.pack(self.replica_id) + INT16.pack(len(self.queries)) + b"".join(
            encode_short_string(q.topic) + _EPOCH_PART.pack(q.partition, q.current_leader_epoch, q.epoch)
            for q in self.queries)


def encode_epoch_end_offsets(answers: list[tuple[int, int, int]]) -> bytes:
    """The response body after the error code: ``(error, epoch, end offset)`` per query."""
    return INT32.pack(len(answers)) + b"".join(_EPOCH_ANSWER.pack(*a) for a in answers)


def decode_epoch_end_offsets(body: Buffer) -> list[tuple[int, int, int]]:
    count, pos = _count(body, 0)
    answers = []
    for _ in range(count):
        answers.append(unpack_at(_EPOCH_ANSWER, body, pos))
        pos += _EPOCH_ANSWER.size
    return answers


@dataclass(frozen=True, slots=True)
class ProduceAckRequest:
    required_acks: int
    timeout_ms: int
    produce: MultiProduceRequest

    @classmethod
    def decode(cls, buf: Buffer, pos: int) -> tuple[ProduceAckRequest, int]:
        acks, timeout = unpack_at(_ACK_HEAD, buf, pos)
        produce, pos = MultiProduceRequest.decode(buf, pos + _ACK_HEAD.size)
        return cls(acks, timeout, produce), pos

    def encode(self) -> bytes:
        return _ACK_HEAD.pack(self.required_acks, self.timeout_ms) + self.produce.encode()


def encode_produce_acks(answers: list[tuple[str, int, int, int]]) -> bytes:
    """The response body after the error code: ``(topic, partition, error, offset)`` per produce."""
    return INT32.pack(len(answers)) + b"".join(
        encode_short_string(topic) + _ACK_ANSWER.pack(partition, error, offset)
        for topic, partition, error, offset in answers)


def decode_produce_acks(body: Buffer) -> list[tuple[str, int, int, int]]:
    count, pos = _count(body, 0)
    answers = []
    for _ in range(count):
        topic, pos = decode_short_string(body, pos)
        answers.append((topic, *unpack_at(_ACK_ANSWER, body, pos)))
        pos += _ACK_ANSWER.size
    return answers


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    topics: tuple[str, ...]

    @classmethod
    def decode(cls, buf: Buffer, pos: int) -> tuple[MetadataRequest, int]:
        count, pos = _count(buf, pos, INT16)
        topics = []
        for _ in range(count):
            topic, pos = decode_short_string(buf, pos)
            topics.append(topic)
        return cls(tuple(topics)), pos

    def encode(self) -> bytes:
        return INT16.pack(len(self.topics)) + b"".join(map(encode_short_string, self.topics))


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int  # -1: none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic: str
    error: int
    partitions: tuple[PartitionMetadata, ...]


@dataclass(frozen=True, slots=True)
class Metadata:
    brokers: tuple[tuple[int, str, int], ...]  # (id, host, port)
    topics: tuple[TopicMetadata, ...]


def _ids(ids: tuple[int, ...]) -> bytes:
    return INT32.pack(len(ids)) + struct.pack(f">{len(ids)}i", *ids)


def _decode_ids(buf: Buffer, pos: int) -> tuple[tuple[int, ...], int]:
    count, pos = _count(buf, pos)
    if len(buf) - pos < 4 * count:
        raise Truncated(pos, 4 * count, len(buf) - pos)
    return struct.unpack_from(f">{count}i", buf, pos), pos + 4 * count


def encode_metadata(metadata: Metadata) -> bytes:
    """The response body after the error code."""
    parts = [INT32.pack(len(metadata.brokers))]
    for broker_id, host, port in metadata.brokers:
        parts += [_BROKER.pack(broker_id), encode_short_string(host), INT32.pack(port)]
    parts.append(INT32.pack(len(metadata.topics)))
    for topic in metadata.topics:
        parts += [encode_short_string(topic.topic), INT16.pack(topic.error), INT32.pack(len(topic.partitions))]
        for p in topic.partitions:
            parts += [_PARTITION_META.pack(p.partition, p.leader, p.leader_epoch), _ids(p.replicas), _ids(p.isr)]
    return b"".join(parts)


def decode_metadata(body: Buffer) -> Metadata:
    count, pos = _count(body, 0)
    brokers = []
    for _ in range(count):
        (broker_id,) = unpack_at(_BROKER, body, pos)
        host, pos = decode_short_string(body, pos + 4)
        (port,) = unpack_at(INT32, body, pos)
        brokers.append((broker_id, host, port))
        pos += 4
    count, pos = _count(body, pos)
    topics = []
    for _ in range(count):
        topic, pos = decode_short_string(body, pos)
        (error,) = unpack_at(INT16, body, pos)
        partition_count, pos = _count(body, pos + 2)
        partitions = []
        for _ in range(partition_count):
            partition, leader, epoch = unpack_at(_PARTITION_META, body, pos)
            replicas, pos = _decode_ids(body, pos + _PARTITION_META.size)
            isr, pos = _decode_ids(body, pos)
            partitions.append(PartitionMetadata(partition, leader, epoch, replicas, isr))
        topics.append(TopicMetadata(topic, error, tuple(partitions)))
    return Metadata(tuple(brokers), tuple(topics))


ReplicationRequest = ReplicaFetchRequest | EpochEndOffsetRequest | ProduceAckRequest | MetadataRequest
REPLICATION_REQUEST_CLASSES = {REPLICA_FETCH: ReplicaFetchRequest, EPOCH_END_OFFSET: EpochEndOffsetRequest,
                               PRODUCE_ACK: ProduceAckRequest, REPLICA_METADATA: MetadataRequest}
REPLICATION_REQUEST_TYPES = {cls: request_type for request_type, cls in REPLICATION_REQUEST_CLASSES.items()}
# What a replicating broker's port decodes: 0.7's five types and replication's.
ALL_REQUEST_CLASSES = {**REQUEST_CLASSES, **REPLICATION_REQUEST_CLASSES}
ALL_REQUEST_NAMES = {**REQUEST_NAMES, **REPLICATION_REQUEST_NAMES}


def encode_replication_request(request: ReplicationRequest) -> bytes:
    """The whole request as sent: size, type, body."""
    return encode_request(request, REPLICATION_REQUEST_TYPES[type(request)])
