"""Record batches (magic 2): their records decoded, built, CRC32C-checked.

A batch is the 61-byte header (batch_header.py) then ``records_count`` records, compressed
as a whole when the attributes name a codec (record_compression.py). A record::

    length VARINT (of what follows), attributes INT8 (unused), timestampDelta VARLONG,
    offsetDelta VARINT, keyLength VARINT (-1 null), key, valueLength VARINT (-1 null), value,
    headerCount VARINT, then per header: keyLength VARINT, key (UTF-8), valueLength VARINT, value

A record's offset is the batch's base offset plus its offset delta; its timestamp the
batch's first timestamp plus its delta, or the batch's max timestamp when the batch has
LogAppendTime. ``batch_values`` is the produce path's fast read: the values alone, no record
objects. Errors: CorruptBatch (Kafka's CORRUPT_MESSAGE) with the byte position for any
malformed batch, bad CRC or undecompressable records; UnsupportedCompression for codecs 5-7.
Pure: no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import crc32c

from twisted_broker.errors import Truncated
from twisted_broker.codec.kafka import record_compression
from twisted_broker.codec.kafka.batch_header import (
    COMPRESSION_MASK, CRC_START, HEADER, HEADER_SIZE, LENGTH_OVERHEAD, MAGIC,
    TIMESTAMP_TYPE_LOG_APPEND, TRANSACTIONAL, BatchHeader, BatchHeaderError, read_header,
)
from twisted_broker.codec.kafka.primitives import Buffer, Malformed, decode_varint, encode_varint
from twisted_broker.codec.kafka.record_values import RecordsOverrun, values_of
from twisted_broker.codec.kafka07.compression import DecompressionError

MAGIC_POSITION = 16  # the magic byte's position in a v0/v1 message set and in a v2 batch alike
_CRC = struct.Struct(">I")


class CorruptBatch(ValueError):
    """A record batch that is malformed, fails its CRC32C, or whose records cannot be read."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"corrupt record batch at byte {position}: {reason}")
        self.position = position


@dataclass(frozen=True, slots=True)
class Header:
    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int  # ms since the epoch
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = field(default=())


def record_set_magic(records: Buffer) -> int:
    """The magic of the first entry of a record set (0 or 1: a message set; 2: batches).

    Raises CorruptBatch when the set is too short to hold one.
    """
    if len(records) <= MAGIC_POSITION:
        raise CorruptBatch(0, f"record set of {len(records)} bytes holds no entry")
    return records[MAGIC_POSITION]


def split_batches(records: Buffer, allow_partial: bool = False) -> list[memoryview]:
    """The batches of a record set, as views of it (no copy).

    A fetch response may end inside a batch: ``allow_partial`` drops that tail (as clients
    do); otherwise (a produce request) it is CorruptBatch, as is any batch that is not magic 2.
    """
    view, batches, pos = memoryview(records), [], 0
    while pos < len(view):
        try:
            header = read_header(view, pos)
        except BatchHeaderError as exc:
            if allow_partial and _is_incomplete(view, pos):
                break
            raise CorruptBatch(pos, str(exc)) from None
        batches.append(view[pos:pos + header.size])
        pos += header.size
    return batches


def _is_incomplete(view: memoryview, pos: int) -> bool:
    if len(view) - pos < HEADER_SIZE:
        return True
    length = struct.unpack_from(">i", view, pos + 8)[0]
    return length + LENGTH_OVERHEAD > len(view) - pos


def crc_ok(batch: Buffer) -> bool:
    """Whether the batch's CRC32C matches its bytes from attributes to the end."""
    view = memoryview(batch)
    return crc32c.crc32c(view[CRC_START:]) == _CRC.unpack_from(view, 17)[0]


def check_batch(batch: Buffer) -> BatchHeader:
    """The header of a whole batch whose CRC32C is right. Raises CorruptBatch."""
    try:
        header = read_header(batch)
    except BatchHeaderError as exc:
        raise CorruptBatch(0, str(exc)) from None
    if header.size != len(batch):
        raise CorruptBatch(0, f"batch says {header.size} bytes, {len(batch)} given")
    if not crc_ok(batch):
        raise CorruptBatch(17, "CRC32C mismatch")
    return header


def records_bytes(batch: Buffer, header: BatchHeader | None = None,
                  max_bytes: int = record_compression.DEFAULT_MAX_BYTES) -> bytes | memoryview:
    """The batch's records section, decompressed. Raises CorruptBatch, UnsupportedCompression."""
    header = header or read_header(batch)
    body = memoryview(batch)[HEADER_SIZE:header.size]
    codec = header.attributes & COMPRESSION_MASK
    if not codec:
        return body
    try:
        return record_compression.decompress(codec, body, max_bytes)
    except DecompressionError as exc:
        raise CorruptBatch(HEADER_SIZE, str(exc)) from None


def decode_batch(batch: Buffer, verify: bool = True,
                 max_bytes: int = record_compression.DEFAULT_MAX_BYTES) -> tuple[BatchHeader, list[Record]]:
    """The header and the records of one whole batch (``verify``: its CRC32C first).

    Raises CorruptBatch (bad CRC, framing, counts, decompression) or UnsupportedCompression.
    """
    header = check_batch(batch) if verify else read_header(batch)
    data = records_bytes(batch, header, max_bytes)
    log_append = bool(header.attributes & TIMESTAMP_TYPE_LOG_APPEND)
    records, pos = [], 0
    try:
        for _ in range(header.records_count):
            length, pos = decode_varint(data, pos)
            end = pos + length
            if length < 0 or end > len(data):
                raise CorruptBatch(HEADER_SIZE, f"record of {length} bytes overruns the batch")
            pos += 1  # attributes: no record-level attribute is defined
            timestamp_delta, pos = decode_varint(data, pos)
            offset_delta, pos = decode_varint(data, pos)
            key, pos = _read_bytes(data, pos)
            value, pos = _read_bytes(data, pos)
            count, pos = decode_varint(data, pos)
            headers = []
            for _ in range(count):
                header_key, pos = _read_bytes(data, pos)
                header_value, pos = _read_bytes(data, pos)
                if header_key is None:
                    raise CorruptBatch(HEADER_SIZE, "record header with a null key")
                headers.append(Header(header_key.decode("utf-8"), header_value))
            if pos != end:
                raise CorruptBatch(HEADER_SIZE, f"record declares {length} bytes, holds {length + pos - end}")
            timestamp = header.max_timestamp if log_append else header.first_timestamp + timestamp_delta
            records.append(Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers)))
    except (Truncated, Malformed, UnicodeDecodeError) as exc:
        raise CorruptBatch(HEADER_SIZE, f"records: {exc}") from None
    if pos != len(data):
        raise CorruptBatch(HEADER_SIZE, f"{len(data) - pos} bytes after the last record")
    return header, records


def _read_bytes(data: Buffer, pos: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(data, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(data):
        raise Truncated(pos, length, len(data) - pos)
    return bytes(data[pos:end]), end


def batch_values(batch: Buffer, header: BatchHeader | None = None,
                 max_bytes: int = record_compression.DEFAULT_MAX_BYTES) -> list[bytes | None]:
    """The records' values in order (None for a null value): the 0.7 view of a batch.

    Skips keys and headers without decoding them. Does not check the CRC (check_batch does,
    once, at produce). Raises CorruptBatch or UnsupportedCompression.
    """
    header = header or read_header(batch)
    # bytes, not a view: indexing and slicing bytes is about twice as fast, worth one copy.
    data = bytes(records_bytes(batch, header, max_bytes))
    try:
        return values_of(data, header.records_count)  # record_values.py: compiled when built
    except (RecordsOverrun, IndexError, Truncated, Malformed) as exc:
        raise CorruptBatch(HEADER_SIZE, f"records: {exc}") from None


def encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, key: bytes | None,
                  value: bytes | None, headers: tuple[Header, ...] | list = ()) -> None:
    """Append one record (its length prefix included) to ``out``."""
    body = bytearray(b"\x00")  # attributes
    encode_varint(timestamp_delta, body)
    encode_varint(offset_delta, body)
    _write_bytes(key, body)
    _write_bytes(value, body)
    encode_varint(len(headers), body)
    for item in headers:
        header_key, header_value = (item.key, item.value) if isinstance(item, Header) else item
        _write_bytes(header_key.encode("utf-8"), body)
        _write_bytes(header_value, body)
    encode_varint(len(body), out)
    out += body


def _write_bytes(data: bytes | None, out: bytearray) -> None:
    if data is None:
        encode_varint(-1, out)
    else:
        encode_varint(len(data), out)
        out += data


def build_batch(records: list[Record] | list[tuple], *, base_offset: int = 0,
                compression: int = record_compression.NO_COMPRESSION, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1, partition_leader_epoch: int = -1,
                log_append_time: bool = False, transactional: bool = False) -> bytes:
    """A batch of ``records``: Record objects, or ``(timestamp, key, value, headers)`` tuples
    (offsets then follow their order from ``base_offset``). Raises ValueError when empty.

    Offset deltas are the records' offsets less ``base_offset``; timestamps are relative to
    the first record's, as Kafka's builder writes them.
    """
    if not records:
        raise ValueError("a record batch holds one record at least")
    items = [(r.offset - base_offset, r.timestamp, r.key, r.value, r.headers) if isinstance(r, Record)
             else (index, r[0], r[1], r[2], r[3] if len(r) > 3 else ())
             for index, r in enumerate(records)]
    first_timestamp = items[0][1]
    body = bytearray()
    for offset_delta, timestamp, key, value, headers in items:
        encode_record(body, offset_delta, timestamp - first_timestamp, key, value, headers)
    if compression:
        body = record_compression.compress(compression, body)
    attributes = compression | (TIMESTAMP_TYPE_LOG_APPEND if log_append_time else 0) | (TRANSACTIONAL if transactional else 0)
    batch = bytearray(HEADER.pack(
        base_offset, HEADER_SIZE - LENGTH_OVERHEAD + len(body), partition_leader_epoch, MAGIC, 0,
        attributes, items[-1][0], first_timestamp, max(item[1] for item in items),
        producer_id, producer_epoch, base_sequence, len(items)))
    batch += body
    _CRC.pack_into(batch, 17, crc32c.crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)
