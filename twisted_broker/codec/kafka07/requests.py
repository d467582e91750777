"""Kafka 0.7 requests: their type ids and body layouts (spec 1.3-1.4).

Every request is ``int32 size`` (framing.py), ``int16 request type``, then the body:

==============  ==========================================================================
Produce (0)     topic string16, partition int32, message set size int32, message set
Fetch (1)       topic string16, partition int32, offset int64, max size int32
MultiFetch (2)  count int16, then count x Fetch body
MultiProduce(3) count int16, then count x Produce body
Offsets (4)     topic string16, partition int32, time int64, max number of offsets int32
==============  ==========================================================================

``decode`` takes a buffer and a position and returns ``(value, next position)``, raising
Truncated; ``encode`` returns the body without the request type. ``decode_request`` reads a
whole frame and refuses trailing garbage, so a request is either understood or refused.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from twisted_broker.errors import Truncated
from twisted_broker.codec.kafka07.primitives import INT16, INT32, Buffer, decode_short_string, encode_short_string, unpack_at

PRODUCE_TYPE = 0
FETCH_TYPE = 1
MULTIFETCH_TYPE = 2
MULTIPRODUCE_TYPE = 3
OFFSETS_TYPE = 4
# The Offsets request's special times (0.7's OffsetRequest.LatestTime / EarliestTime).
LATEST_TIME = -1
EARLIEST_TIME = -2
REQUEST_NAMES = {PRODUCE_TYPE: "produce", FETCH_TYPE: "fetch", MULTIFETCH_TYPE: "multifetch",
                 MULTIPRODUCE_TYPE: "multiproduce", OFFSETS_TYPE: "offsets"}

_FETCH = struct.Struct(">iqi")  # partition, offset, max size
_OFFSETS = struct.Struct(">iqi")  # partition, time, max number of offsets
_PRODUCE = struct.Struct(">ii")  # partition, message set size


class UnknownRequestType(ValueError):
    def __init__(self, request_type: int) -> None:
        super().__init__(f"unknown request type {request_type}")
        self.request_type = request_type


class TrailingBytes(ValueError):
    """A request body longer than its fields: 0.7 would misread the next request."""


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    topic: str
    partition: int  # -1: the broker picks a random partition
    messages: memoryview | bytes  # the message set, as sent

    @classmethod
    def decode(cls, buf: Buffer, pos: int) -> tuple["ProduceRequest", int]:
        # The usual request, read inline (one of these per message a producer sends one at a
        # time); anything short or odd takes the checked path below, which says what is wrong.
        (length,) = INT16.unpack_from(buf, pos) if len(buf) - pos >= 2 else (-1,)
        head = pos + 2 + length
        if length >= 0 and len(buf) - head >= 8:
            partition, size = _PRODUCE.unpack_from(buf, head)
            if 0 <= size <= len(buf) - head - 8:
                topic = str(buf[pos + 2:head], "utf-8")
                return cls(topic, partition, memoryview(buf)[head + 8:head + 8 + size]), head + 8 + size
        topic, pos = decode_short_string(buf, pos)
        partition, size = unpack_at(_PRODUCE, buf, pos)
        pos += _PRODUCE.size
        if size < 0 or len(buf) - pos < size:
            raise Truncated(pos, max(size, 0), len(buf) - pos)
        return cls(topic, partition, memoryview(buf)[pos:pos + size]), pos + size

    def encode(self) -> bytes:
        return encode_short_string(self.topic) + _PRODUCE.pack(self.partition, len(self.messages)) + bytes(self.messages)


@dataclass(frozen=True, slots=True)
class FetchRequest:
    topic: str
    partition: int
    offset: int  # a byte offset in the partition's log
    max_size: int

    @classmethod
    def decode(cls, buf: Buffer, pos: int) -> tuple["FetchRequest", int]:
        (length,) = INT16.unpack_from(buf, pos) if len(buf) - pos >= 2 else (-1,)
        head = pos + 2 + length
        if length >= 0 and len(buf) - head >= _FETCH.size:  # the usual request, read inline
            return cls(str(buf[pos + 2:head], "utf-8"), *_FETCH.unpack_from(buf, head)), head + _FETCH.size
        topic, pos = decode_short_string(buf, pos)
        partition, offset, max_size = unpack_at(_FETCH, buf, pos)
        return cls(topic, partition, offset, max_size), pos + _FETCH.size

    def encode(self) -> bytes:
        return encode_short_string(self.topic) + _FETCH.pack(self.partition, self.offset, self.max_size)


@dataclass(frozen=True, slots=True)
class OffsetRequest:
    topic: str
    partition: int
    time: int  # ms since the epoch; -1 latest, -2 earliest
    max_offsets: int

    @classmethod
    def decode(cls, buf: Buffer, pos: int) -> tuple["OffsetRequest", int]:
        (length,) = INT16.unpack_from(buf, pos) if len(buf) - pos >= 2 else (-1,)
        head = pos + 2 + length
        if length >= 0 and len(buf) - head >= _OFFSETS.size:  # the usual request, read inline
            return cls(str(buf[pos + 2:head], "utf-8"), *_OFFSETS.unpack_from(buf, head)), head + _OFFSETS.size
        topic, pos = decode_short_string(buf, pos)
        partition, time, max_offsets = unpack_at(_OFFSETS, buf, pos)
        return cls(topic, partition, time, max_offsets), pos + _OFFSETS.size

    def encode(self) -> bytes:
        return encode_short_string(self.topic) + _OFFSETS.pack(self.partition, self.time, self.max_offsets)


@dataclass(frozen=True, slots=True)
class MultiFetchRequest:
    fetches: tuple[FetchRequest, ...]

    @classmethod
    def decode(cls, buf: Buffer, pos: int) -> tuple["MultiFetchRequest", int]:
        parts, pos = _decode_many(FetchRequest, buf, pos)
        return cls(parts), pos

    def encode(self) -> bytes:
        return _encode_many(self.fetches)


@dataclass(frozen=True, slots=True)
class MultiProduceRequest:
    produces: tuple[ProduceRequest, ...]

    @classmethod
    def decode(cls, buf: Buffer, pos: int) -> tuple["MultiProduceRequest", int]:
        parts, pos = _decode_many(ProduceRequest, buf, pos)
        return cls(parts), pos

    def encode(self) -> bytes:
        return _encode_many(self.produces)


def _decode_many(part, buf: Buffer, pos: int) -> tuple[tuple, int]:
    (count,) = unpack_at(INT16, buf, pos)
    pos += 2
    if count < 0:
        raise Truncated(pos - 2, 0, len(buf) - pos)
    parts = []
    for _ in range(count):
        value, pos = part.decode(buf, pos)
        parts.append(value)
    return tuple(parts), pos


def _encode_many(parts: tuple) -> bytes:
    if len(parts) > 0x7FFF:
        raise ValueError(f"{len(parts)} parts do not fit an int16 count")
    return INT16.pack(len(parts)) + b"".join(part.encode() for part in parts)


Kafka07Request = ProduceRequest | FetchRequest | MultiFetchRequest | MultiProduceRequest | OffsetRequest
REQUEST_CLASSES = {PRODUCE_TYPE: ProduceRequest, FETCH_TYPE: FetchRequest, MULTIFETCH_TYPE: MultiFetchRequest,
                   MULTIPRODUCE_TYPE: MultiProduceRequest, OFFSETS_TYPE: OffsetRequest}
REQUEST_TYPES = {cls: request_type for request_type, cls in REQUEST_CLASSES.items()}


def decode_request(frame: Buffer, classes: dict[int, type] = REQUEST_CLASSES) -> Kafka07Request:
    """Decode one frame body (type + request). Raises UnknownRequestType, Truncated,
    TrailingBytes or UnicodeDecodeError: 0.7 closes the connection for all of them.

    ``classes`` is the table of request types served (replication adds its own to 0.7's)."""
    (request_type,) = INT16.unpack_from(frame, 0) if len(frame) >= 2 else unpack_at(INT16, frame, 0)
    cls = classes.get(request_type)
    if cls is None:
        raise UnknownRequestType(request_type)
    request, pos = cls.decode(frame, 2)
    if pos != len(frame):
        raise TrailingBytes(f"{len(frame) - pos} bytes after the {cls.__name__} (type {request_type})")
    return request


def encode_request(request: Kafka07Request, request_type: int | None = None) -> bytes:
    """The whole request as sent: size, type (0.7's for its requests), body."""
    body = INT16.pack(REQUEST_TYPES[type(request)] if request_type is None else request_type) + request.encode()
    return INT32.pack(len(body)) + body
