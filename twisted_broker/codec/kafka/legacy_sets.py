"""Message sets of magic 0 and 1 as Kafka 0.8-0.10 framed them: decode produced ones, encode fetched ones.

Layout of one entry (big-endian); ``crc`` is the CRC32 of everything after it:

========  ======  ======  =====  ==========  ==================  =============  ===============
offset    size    crc     magic  attributes  timestamp           key            value
int64     int32   uint32  int8   int8        int64 (magic 1)     int32 n + n    int32 n + n
========  ======  ======  =====  ==========  ==================  =============  ===============

``attributes & 7`` is the codec (0 none, 1 gzip, 2 snappy, 3 lz4); a compressed entry is a
wrapper whose value is the compressed inner set. In a magic-1 wrapper the inner offsets are
relative (0..n-1) and the wrapper carries the last absolute one; clients sending Produce put
anything there, so decoding keeps the order and leaves offsets to the broker.

Encoding serves stored 0.7 entries to modern fetchers (D2): magic 1, uncompressed, key null.
Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import lz4.block

from twisted_broker.codec.kafka import record_compression
from twisted_broker.codec.kafka.record_compression import GZIP, LZ4, SNAPPY
from twisted_broker.codec.kafka07.compression import DEFAULT_MAX_BYTES, DecompressionError
from twisted_broker.codec.kafka07.crc import crc32

_PREFIX = struct.Struct(">qiIBB")  # offset, size, crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
NO_TIMESTAMP = -1
MAGIC_01_CODEC_MASK = 0x07
TIMESTAMP_LOG_APPEND = 0x08
MAX_DEPTH = 2  # a wrapper holds plain messages; Kafka itself never nests deeper


class LegacySetError(ValueError):
    """A malformed magic 0/1 message set; ``position`` is the byte where the fault was found."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"message set at byte {position}: {reason}")
        self.position = position
        self.reason = reason


@dataclass(frozen=True, slots=True)
class LegacyRecord:
    timestamp: int  # ms; -1 for magic 0 (no timestamp)
    key: bytes | None
    value: bytes | None
    magic: int


def decode_legacy_set(data: bytes | memoryview, *, max_bytes: int = DEFAULT_MAX_BYTES) -> list[LegacyRecord]:
    """The records of a produced magic 0/1 set, wrappers expanded, in order.

    A partial entry at the end is dropped (producers may send one, as 0.8 allowed). Raises
    LegacySetError for a bad CRC, magic, codec, length, or a wrapper that does not inflate
    (within ``max_bytes``) into a valid set.
    """
    records: list[LegacyRecord] = []
    _decode_into(memoryview(data), records, max_bytes, 0, 0)
    return records


def _decode_into(view: memoryview, records: list[LegacyRecord], max_bytes: int, depth: int, base: int) -> None:
    pos, end = 0, len(view)
    while end - pos >= 12:
        _offset, size = struct.unpack_from(">qi", view, pos)
        stop = pos + 12 + size
        if size < 14:
            raise LegacySetError(base + pos, f"message size {size} is below the 14-byte minimum")
        if stop > end:
            if depth:
                raise LegacySetError(base + pos, "inner message runs past the wrapper's set")
            return  # a partial tail, as a fetch-size cut leaves one
        _o, _s, crc, magic, attributes = _PREFIX.unpack_from(view, pos)
        if crc32(view[pos + 16:stop]) != crc:
            raise LegacySetError(base + pos, "CRC does not match")
        if magic not in (0, 1):
            raise LegacySetError(base + pos, f"magic {magic} in a message set")
        field = pos + 18
        timestamp = NO_TIMESTAMP
        if magic == 1:
            if stop - field < 16:
                raise LegacySetError(base + pos, "magic-1 message too short for its timestamp")
            (timestamp,) = _TIMESTAMP.unpack_from(view, field)
            field += 8
        key, field = _read_bytes(view, field, stop, base)
        value, field = _read_bytes(view, field, stop, base)
        if field != stop:
            raise LegacySetError(base + pos, f"{stop - field} bytes after the value")
        codec = attributes & MAGIC_01_CODEC_MASK
        if codec == 0:
            records.append(LegacyRecord(timestamp, key, value, magic))
        elif depth >= MAX_DEPTH - 1:
            raise LegacySetError(base + pos, "compressed message inside a compressed message")
        elif value is None:
            raise LegacySetError(base + pos, "compressed wrapper without a value")
        else:
            inner = _inflate(codec, value, magic, max_bytes, base + pos)
            _decode_into(memoryview(inner), records, max_bytes, depth + 1, base + pos)
        pos = stop
    if depth and pos != end:
        raise LegacySetError(base + pos, "trailing bytes in a wrapper's set")


def _read_bytes(view: memoryview, pos: int, stop: int, base: int) -> tuple[bytes | None, int]:
    if stop - pos < 4:
        raise LegacySetError(base + pos, "length field runs past the message")
    (length,) = _LENGTH.unpack_from(view, pos)
    pos += 4
    if length < 0:
        return None, pos
    if pos + length > stop:
        raise LegacySetError(base + pos, f"field of {length} bytes runs past the message")
    return bytes(view[pos:pos + length]), pos + length


def _inflate(codec: int, payload: bytes, magic: int, max_bytes: int, position: int) -> bytes:
    if codec not in (GZIP, SNAPPY, LZ4):  # zstd came with magic 2 only
        raise LegacySetError(position, f"unknown compression codec {codec}")
    try:
        if codec == LZ4 and magic == 0:
            return _lz4_frame_blocks(payload, max_bytes)
        return record_compression.decompress(codec, payload, max_bytes)
    except DecompressionError as exc:
        raise LegacySetError(position, str(exc)) from None


_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK = struct.Struct("<I")


def _lz4_frame_blocks(payload: bytes, max_bytes: int) -> bytes:
    """An LZ4 frame read block by block, its descriptor checksum ignored: Kafka before 0.10
    computed it over the magic number too (KAFKA-3160), so lz4's frame reader refuses it."""
    if len(payload) < 7 or payload[:4] != _LZ4_MAGIC:
        raise DecompressionError("lz4: not an LZ4 frame")
    flags = payload[4]
    block_max = 1 << (8 + 2 * ((payload[5] >> 4) & 0x07))
    pos = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0) + 1
    out = bytearray()
    while True:
        if len(payload) - pos < 4:
            raise DecompressionError("lz4: frame is truncated")
        (size,) = _LZ4_BLOCK.unpack_from(payload, pos)
        pos += 4
        if size == 0:
            return bytes(out)
        stored, size = size & 0x80000000, size & 0x7FFFFFFF
        block = payload[pos:pos + size]
        if len(block) < size:
            raise DecompressionError("lz4: block is truncated")
        try:
            # Linked blocks (the default) may refer to the previous 64 KiB of output.
            out += block if stored else lz4.block.decompress(
                block, uncompressed_size=block_max, dict=bytes(out[-65536:]))
        except lz4.block.LZ4BlockError as exc:
            raise DecompressionError(f"lz4: {exc}") from None
        if len(out) > max_bytes:
            raise DecompressionError(f"lz4: expands past {max_bytes} bytes")
        pos += size + (4 if flags & 0x10 else 0)


def encode_legacy_set(records: Iterable[tuple[int, int, bytes | None]]) -> bytes:
    """A magic-1, uncompressed message set of ``(offset, timestamp ms, value)``, keys null."""
    parts = []
    pack_prefix = struct.Struct(">BBqi").pack  # magic, attributes, timestamp, key length -1
    for offset, timestamp, value in records:
        if value is None:
            body = pack_prefix(1, 0, timestamp, -1) + b"\xff\xff\xff\xff"
        else:
            body = pack_prefix(1, 0, timestamp, -1) + _LENGTH.pack(len(value)) + value
        parts.append(struct.pack(">qiI", offset, len(body) + 4, crc32(body)))
        parts.append(body)
    return b"".join(parts)
