"""A record batch (magic 2) stored as one 0.7 gzip wrapper: build it, recognise it, find its pieces.

Layout (docs/kafka-protocol.md, decision D2), positions relative to the entry's first byte:

======  =========================================================================
0       int32 length of what follows (0.7's entry framing)
4       magic 1, attributes 1 (gzip), uint32 CRC32 of the payload (0.7's message)
10      payload: gzip members, each
          1f 8b 08, FLG 04 (FEXTRA), MTIME 0 (4), XFL 0, OS ff       10 bytes
          XLEN (LE16) = LEN + 4, subfield id 'T' 'B', LEN (LE16)      6 bytes
          LEN bytes of the batch (at most 65531: XLEN is 16 bits)
          deflate data, CRC32 (LE32) and ISIZE (LE32) of what it inflates to
        members 1..N-1: 65531 batch bytes each, an empty deflate stream (03 00), crc 0, size 0
        member N: the rest of the batch, then the level-1 deflate of a 0.7 message set of the
        records' values (one uncompressed magic-1 message per record; a null value is empty),
        or stored deflate blocks past a sample that level 1 does not shrink (see below)
======  =========================================================================

A 0.7 consumer inflates the members (readers skip FEXTRA and concatenate members) and sees one
message per record. A modern fetch sends the batch's bytes, which sit in the file as the
members' FEXTRA data, with sendfile: ``batch_pieces`` gives their ranges. A user's own gzip
has FLG 0 (Java's GZIPOutputStream, Python's gzip), so FLG 04 with the 'TB' subfield cannot
clash with it.

Deflating the values was once most of a modern produce's cost in the broker (on 2026-12-07,
after the sampling below and with the values read and framed by compiled code, it was 9%
of a batched produce's samples), and level 1 is slow exactly where it gains least: on bytes
with few repeats (hex, base64, encrypted or already compressed values) zlib-ng's level 1
runs at ~140 MB/s and keeps 85-100% of them, while on
JSON-like text it runs at ~1 GB/s and keeps ~13%. So the first SAMPLE_BYTES of a set are
deflated at level 1 and, if they keep more than STORE_ABOVE of their size, the rest goes in
stored blocks (level 0, ~2 GB/s): the same deflate stream to every reader, up to a few percent
larger on the disk than level 1 would make it for such values, and 5-10x cheaper to write.

Pure: no I/O. The values are decoded by the caller (codec/kafka/record_batch.py).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

from twisted_broker.codec.kafka.batch_header import HEADER, HEADER_SIZE, LENGTH_OVERHEAD, MAGIC, BatchHeader
from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.crc import crc32
from twisted_broker.codec.kafka07.message import ENTRY_HEADER_1, MAGIC_1
from twisted_broker.codec.kafka.record_values import values_message_set

try:  # zlib-ng deflates 2-3x faster at level 1 (installed with the package; see codec/kafka07/crc.py)
    from zlib_ng import zlib_ng as deflate_library
except ModuleNotFoundError:
    deflate_library = zlib

MEMBER_HEADER = b"\x1f\x8b\x08\x04\x00\x00\x00\x00\x00\xff"  # ID1 ID2 CM FLG MTIME(4) XFL OS
SUBFIELD_ID = b"TB"
_EXTRA = struct.Struct("<H2sH")  # XLEN, subfield id, LEN
_TRAILER = struct.Struct("<II")  # CRC32, ISIZE
MAX_PIECE_BYTES = 0xFFFF - 4  # 65531: XLEN counts the 4-byte subfield header too
EMPTY_DEFLATE = b"\x03\x00"  # a final fixed-Huffman block holding only its end code
ENTRY_HEADER_BYTES = ENTRY_HEADER_1.size  # 10: length, magic, attributes, crc
PIECE_OFFSET = len(MEMBER_HEADER) + _EXTRA.size  # 16: a member's batch bytes start here
MEMBER_OVERHEAD = PIECE_OFFSET + len(EMPTY_DEFLATE) + _TRAILER.size  # 26 around a full member's data
# Bytes at the start of a stored entry that hold its batch header: what a reader fetches to
# recognise a stored batch and read its counts without touching the rest.
HEAD_BYTES = ENTRY_HEADER_BYTES + PIECE_OFFSET + HEADER_SIZE  # 87
VALUES_LEVEL = 1  # deflate level of the values: 0.7 consumers read them, fast beats small
SAMPLE_BYTES = 16 * 1024  # of the values' set deflated first, to decide the rest
MIN_SAMPLE_BYTES = 1024  # a smaller set is deflated whole: no decision is worth its cost
STORE_ABOVE = 0.75  # a sample keeping more of its size than this: the rest is stored
_EMPTY_MEMBER_TAIL = EMPTY_DEFLATE + _TRAILER.pack(0, 0)


class StoredBatchError(ValueError):
    """The bytes claimed to be a stored batch are not laid out as one."""


def encode_stored_entry(batch: bytes | bytearray | memoryview, values: Sequence[bytes | None]) -> bytes:
    """The 0.7 entry (length prefix included) that stores ``batch`` and carries ``values``.

    ``batch`` is the whole record batch, already stamped (base offset, leader epoch): the
    0.7 CRC covers the stamped bytes. ``values`` are its records' values in order (None for a
    null value). Raises ValueError for an empty batch.
    """
    view = memoryview(batch)
    if not len(view):
        raise ValueError("cannot store an empty batch")
    parts = []
    for start in range(0, len(view) - MAX_PIECE_BYTES, MAX_PIECE_BYTES):
        parts += (MEMBER_HEADER, _EXTRA.pack(MAX_PIECE_BYTES + 4, SUBFIELD_ID, MAX_PIECE_BYTES),
                  view[start:start + MAX_PIECE_BYTES], _EMPTY_MEMBER_TAIL)
    last = view[(len(view) - 1) // MAX_PIECE_BYTES * MAX_PIECE_BYTES:]
    message_set = values_message_set(values)  # codec/kafka/record_values.py: compiled when built
    parts += (MEMBER_HEADER, _EXTRA.pack(len(last) + 4, SUBFIELD_ID, len(last)), last,
              *deflate_values(message_set), _TRAILER.pack(crc32(message_set), len(message_set) & 0xFFFFFFFF))
    # One copy of the entry: its CRC over the parts, its header joined in front of them.
    crc = 0
    for part in parts:
        crc = crc32(part, crc)
    return b"".join([ENTRY_HEADER_1.pack(sum(map(len, parts)) + 6, MAGIC_1, GZIP, crc), *parts])


def deflate_values(message_set: bytes) -> list[bytes]:
    """The raw deflate stream of ``message_set``, in parts: level 1, or stored blocks past a
    sample that level 1 does not shrink below STORE_ABOVE of its size (module docstring)."""
    sample = min(SAMPLE_BYTES, len(message_set) // 4)
    if sample < MIN_SAMPLE_BYTES:
        # One call instead of a compressor's compress and flush: a modern Produce of one
        # record pays ~3 µs less (issue 24). For a few KiB zlib-ng may choose other blocks
        # than the compressor would; either is one valid raw deflate stream.
        return [deflate_library.compress(message_set, VALUES_LEVEL, -15)]
    packer = deflate_library.compressobj(VALUES_LEVEL, zlib.DEFLATED, -15)
    view = memoryview(message_set)
    # A sync flush ends the sample's blocks on a byte boundary, not final: another
    # compressor's stream may follow (a reader sees one stream; stored blocks refer to nothing).
    head = packer.compress(view[:sample]) + packer.flush(zlib.Z_SYNC_FLUSH)
    if len(head) > sample * STORE_ABOVE:
        # the stdlib's level 0 copies faster than zlib-ng's (~2.5 against ~1.5 GB/s here)
        packer = zlib.compressobj(0, zlib.DEFLATED, -15)
    return [head, packer.compress(view[sample:]), packer.flush()]


def is_stored_batch(head: bytes | memoryview) -> bool:
    """True if the entry starting ``head`` (at least its first 26 bytes) is a stored batch."""
    return (len(head) >= ENTRY_HEADER_BYTES + PIECE_OFFSET
            and head[4] == MAGIC_1 and head[5] & 0x03 == GZIP
            and head[ENTRY_HEADER_BYTES:ENTRY_HEADER_BYTES + 4] == MEMBER_HEADER[:4]
            and head[ENTRY_HEADER_BYTES + 12:ENTRY_HEADER_BYTES + 14] == SUBFIELD_ID)


def read_stored_header(head: bytes | memoryview) -> BatchHeader:
    """The batch header of a stored entry from its first HEAD_BYTES bytes (not the values).

    Raises StoredBatchError if the entry is not a stored batch or its header is damaged.
    """
    if len(head) < HEAD_BYTES or not is_stored_batch(head):
        raise StoredBatchError("not a stored record batch")
    start = ENTRY_HEADER_BYTES + PIECE_OFFSET
    _xlen, _id, first_piece = _EXTRA.unpack_from(head, ENTRY_HEADER_BYTES + len(MEMBER_HEADER))
    # Only the header is at hand, not the batch: read_header would want the whole batch.
    header = BatchHeader._make(HEADER.unpack_from(head, start))
    if header.magic != MAGIC or header.batch_length < HEADER_SIZE - LENGTH_OVERHEAD:
        raise StoredBatchError(f"stored batch header: magic {header.magic}, length {header.batch_length}")
    if first_piece != min(header.size, MAX_PIECE_BYTES):
        raise StoredBatchError(f"first piece of {first_piece} bytes for a batch of {header.size}")
    return header


def batch_pieces(batch_size: int) -> list[tuple[int, int]]:
    """(position in the entry, length) of each piece of a stored batch of ``batch_size`` bytes.

    Sent back to back they are the batch. The layout is fixed by ``encode_stored_entry``, so
    the ranges follow from the size alone (no read of the members' headers).
    """
    pieces = []
    position = ENTRY_HEADER_BYTES + PIECE_OFFSET
    for start in range(0, batch_size, MAX_PIECE_BYTES):
        pieces.append((position, min(MAX_PIECE_BYTES, batch_size - start)))
        position += MAX_PIECE_BYTES + MEMBER_OVERHEAD
    return pieces


def stored_pieces(entry: bytes | memoryview) -> list[memoryview]:
    """The batch pieces of a whole stored entry, found by walking its members' headers.

    For tools and tests that hold an entry in memory; the broker uses ``batch_pieces``.
    Raises StoredBatchError if a member is not laid out as ``encode_stored_entry`` writes it.
    """
    view = memoryview(entry)
    if not is_stored_batch(view):
        raise StoredBatchError("not a stored record batch")
    end = 4 + int.from_bytes(view[:4], "big")
    position, pieces = ENTRY_HEADER_BYTES, []
    while True:
        if view[position:position + len(MEMBER_HEADER)] != MEMBER_HEADER:
            raise StoredBatchError(f"no stored-batch member header at entry position {position}")
        xlen, subfield, length = _EXTRA.unpack_from(view, position + len(MEMBER_HEADER))
        if subfield != SUBFIELD_ID or xlen != length + 4 or position + PIECE_OFFSET + length > end:
            raise StoredBatchError(f"bad FEXTRA at entry position {position}")
        pieces.append(view[position + PIECE_OFFSET:position + PIECE_OFFSET + length])
        following = position + PIECE_OFFSET + length + len(_EMPTY_MEMBER_TAIL)
        if (length == MAX_PIECE_BYTES and following < end
                and view[position + PIECE_OFFSET + length:following] == _EMPTY_MEMBER_TAIL
                and view[following:following + 4] == MEMBER_HEADER[:4]):
            position = following
            continue
        return pieces
