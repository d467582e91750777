"""The values of a record batch's records, read without decoding the rest (issue 24).

A modern Produce stores each batch with its records' values as 0.7 messages
(storage/stored_batch.py), so the broker reads every record's value: one loop over the
records, which profiling showed to be 47% of the broker's time under confluent-kafka's
batched produce. This module holds that loop alone, typed so that mypyc can compile it
(``make`` builds ``record_values.*.so`` beside this file; Python then imports the compiled
module before this source). This source stays the reference: without the build it is what
runs, and the tests run both on the same batches (tests/unit/codec/kafka/test_record_values.py).

``values_message_set`` then writes those values as the 0.7 message set the stored batch
carries (13% of the same profile, once the values were read compiled).

A record (Kafka's DefaultRecord): varint length, attributes (1 byte), varint timestamp
delta, varint offset delta, varint key length and key, varint value length and value,
varint header count and headers. Lengths are zigzag varints; -1 is null.
"""

from __future__ import annotations

import struct

from twisted_broker.codec.kafka.primitives import decode_varint
from twisted_broker.codec.kafka07.crc import crc32

_ENTRY_1 = struct.Struct(">iBBI")  # a 0.7 entry's length, magic 1, attributes (none), CRC


class RecordsOverrun(ValueError):
    """A record whose fields run past its length, or past the records' bytes."""


def values_of(data: bytes, count: int) -> list[bytes | None]:
    """The values of the ``count`` records that ``data`` (the batch's records, uncompressed)
    holds exactly, in order (None for a null value). Raises RecordsOverrun, or IndexError
    for records cut short (Truncated or Malformed from a varint of three bytes or more)."""
    values: list[bytes | None] = []
    pos = 0
    size = len(data)
    # Unrolled by hand for the interpreter (this runs once per produced record): one- and
    # two-byte varints inline, longer ones by primitives' decode_varint; the deltas skipped.
    for _ in range(count):
        byte = data[pos]
        if byte < 0x80:
            pos += 1
            end = pos + ((byte >> 1) ^ -(byte & 1))
        elif data[pos + 1] < 0x80:  # records of 64 to 8191 bytes
            raw = (byte & 0x7F) | (data[pos + 1] << 7)
            pos += 2
            end = pos + ((raw >> 1) ^ -(raw & 1))
        else:
            length, pos = decode_varint(data, pos)
            end = pos + length
        if end <= pos or end > size:
            raise RecordsOverrun(f"record at {pos} overruns the batch")
        pos += 1  # attributes
        while data[pos] & 0x80:  # timestamp delta
            pos += 1
        pos += 1
        while data[pos] & 0x80:  # offset delta
            pos += 1
        pos += 1
        byte = data[pos]
        if byte < 0x80:
            pos += 1 + (byte >> 1 if not byte & 1 else 0)  # a null (-1) key skips nothing
        else:
            key_length, pos = decode_varint(data, pos)
            if key_length > 0:
                pos += key_length
        byte = data[pos]
        if byte < 0x80:
            value_length = (byte >> 1) ^ -(byte & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            raw = (byte & 0x7F) | (data[pos + 1] << 7)
            value_length = (raw >> 1) ^ -(raw & 1)
            pos += 2
        else:
            value_length, pos = decode_varint(data, pos)
        if value_length < 0:
            values.append(None)
        else:
            if pos + value_length > end:
                raise RecordsOverrun("record value overruns its record")
            values.append(data[pos:pos + value_length])
        pos = end
    if pos != size:
        raise RecordsOverrun(f"{size - pos} bytes after the last record")
    return values


def values_message_set(values: list[bytes | None]) -> bytes:
    """``values`` as a 0.7 message set: one magic-1, uncompressed message each (a null value
    as an empty payload), as codec/kafka07's ``encode_message_set`` writes them."""
    parts: list[bytes] = []
    pack = _ENTRY_1.pack
    for value in values:
        payload = b"" if value is None else value
        parts.append(pack(6 + len(payload), 1, 0, crc32(payload)))
        parts.append(payload)
    return b"".join(parts)
