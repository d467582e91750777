"""The minimal Kafka 0.7 encoder of spec section 7 (``shared/spec/kafka07-wire-and-storage.md``),
shared by the integration tests that speak the wire protocol over raw sockets.

It is deliberately independent of ``twisted_broker.codec.kafka07``: it is the spec's own encoder, used as
an oracle, so the broker's codecs are never tested against themselves. Do not import from
``twisted_broker`` here.

Beyond the spec's few lines it has what the tests need: magic-0 messages, a chosen codec or a
wrong CRC, every request type, and the fetch response a broker should send back.
"""

from __future__ import annotations

import struct
import zlib

MB = 1 << 20


# --- messages and message sets ------------------------------------------------------------

def message(payload: bytes, magic: int = 1, codec: int = 0, crc: int | None = None) -> bytes:
    """One message without its length; ``crc`` overrides the correct CRC32 of ``payload``."""
    crc = zlib.crc32(payload) & 0xFFFFFFFF if crc is None else crc
    if magic == 0:
        return struct.pack(">BI", 0, crc) + payload
    return struct.pack(">BBI", 1, codec, crc) + payload


def message_set(*messages: bytes) -> bytes:
    """A message set of already encoded messages (each from ``message``)."""
    return b"".join(struct.pack(">i", len(m)) + m for m in messages)


def message_set_of(*payloads: bytes) -> bytes:
    """A message set of plain magic-1 messages, one per payload."""
    return message_set(*(message(p) for p in payloads))


# --- requests -----------------------------------------------------------------------------

def string16(text: str) -> bytes:
    # The spec's encoder says ascii; UTF-8 is what 0.7 writes and gives the same bytes for
    # every ASCII name.
    raw = text.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def request(request_type: int, body: bytes) -> bytes:
    return struct.pack(">ih", 2 + len(body), request_type) + body


def produce_body(topic: str, partition: int, messages: bytes) -> bytes:
    return string16(topic) + struct.pack(">ii", partition, len(messages)) + messages


def produce(topic: str, partition: int, messages: bytes) -> bytes:
    return request(0, produce_body(topic, partition, messages))


def fetch_body(topic: str, partition: int = 0, offset: int = 0, max_size: int = MB) -> bytes:
    return string16(topic) + struct.pack(">iqi", partition, offset, max_size)


def fetch(topic: str, partition: int = 0, offset: int = 0, max_size: int = MB) -> bytes:
    return request(1, fetch_body(topic, partition, offset, max_size))


def multifetch(*parts: tuple[str, int, int, int]) -> bytes:
    return request(2, struct.pack(">h", len(parts)) + b"".join(fetch_body(*part) for part in parts))


def multiproduce(*parts: tuple[str, int, bytes]) -> bytes:
    return request(3, struct.pack(">h", len(parts)) + b"".join(produce_body(*part) for part in parts))


def offsets(topic: str, partition: int = 0, time_ms: int = -1, max_offsets: int = 1) -> bytes:
    return request(4, string16(topic) + struct.pack(">iqi", partition, time_ms, max_offsets))


# --- responses ----------------------------------------------------------------------------

def fetch_response(messages: bytes, error: int = 0) -> bytes:
    """A whole Fetch response as sent, size field included."""
    return struct.pack(">ih", 2 + len(messages), error) + messages
