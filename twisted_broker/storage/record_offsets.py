"""A partition log seen through modern offsets (docs/kafka-protocol.md §2): its end, lookups,
fetches, batch appends.

Everything answers over the visible part of the log only (flushed, or up to the high
watermark of a replica's log), except ``iter_batch_headers`` and ``next_offset``, which see
what is written. Each segment's entries are walked lazily by its OffsetIndex
(offset_index.py); a query walks what was appended since the last one.

A modern fetch is answered with pieces to send back to back: file regions (sendfile) for
stored batches, never read into Python, and bytes for runs of 0.7 entries, which are
re-encoded as magic-1 message sets (the only copy, and only of data the 0.7 protocol wrote).

File I/O only: no Twisted, no timers.
"""

from __future__ import annotations

import mmap
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence

from twisted_broker.errors import InvalidMessage, OffsetOutOfRange
from twisted_broker.codec.kafka.batch_header import read_header, stamp
from twisted_broker.codec.kafka.legacy_sets import encode_legacy_set
from twisted_broker.codec.kafka.record_batch import CorruptBatch, decode_batch
from twisted_broker.codec.kafka.record_compression import UnsupportedCompression
from twisted_broker.storage.stored_batch import batch_pieces, encode_stored_entry
from twisted_broker.storage.log import Log
from twisted_broker.storage.offset_index import PLAIN, STORED, Entry, walk, wrapper_count
from twisted_broker.storage.segment import Piece, Segment
from twisted_broker.codec.kafka07.message import Message
from twisted_broker.codec.kafka07.message_set import ValidatedMessageSet, expand_wrapper

_LEGACY_OVERHEAD = 34  # a magic-1 entry's bytes around its value (offset, size, crc, ..., key -1)


def _walked(log: Log, k: int) -> Segment:
    """Segment ``k`` with every entry it holds walked.

    Its first entry's first offset follows from the segment before it when that one has been
    walked (any modern query of the log does); one never walked is taken to end without a
    shift rather than walked whole (a gigabyte of 0.7 messages is seconds of walking): no
    modern client was ever given an offset from it, and only a wrapper compressing past its
    size in its very last bytes could shift the next segment.
    """
    segments = log.segments
    segment = segments[k]
    carry_in = segment.start
    if k > 0 and segment.offset_index.carry is None:
        before = segments[k - 1]
        if before.offset_index.carry is not None:
            before.offset_index.catch_up(before.fileno(), before.size, before.start)
            carry_in = before.offset_index.carry
    segment.offset_index.catch_up(segment.fileno(), segment.size, carry_in)
    return segment


def _entries(log: Log, k: int, position: int, carry: int, *,
             written: bool = False) -> Iterator[tuple[Segment, Entry]]:
    """The entries from file ``position`` of segment ``k`` on, up to the visible (or written) end."""
    segments = log.segments
    for index in range(k, len(segments)):
        segment = _walked(log, index)
        limit = segment.size if written else segment.visible_size
        if index > k:  # the segment's own first offset: its rows were walked from it
            first = segment.offset_index.first_offset
            position, carry = 0, max(carry, segment.start) if first is None else first
        if limit > position:
            with mmap.mmap(segment.fileno(), limit, access=mmap.ACCESS_READ) as mapped, \
                    memoryview(mapped) as view:
                for entry in walk(view, position, limit, segment.start, carry, segment.offset_index.time_of):
                    yield segment, entry
                    carry = entry.first + (entry.count or 1)
        if limit < segment.size:
            return  # the rest is not visible yet


def exact_count(segment: Segment, entry: Entry) -> int:
    """The entry's record count, inflating a 0.7 wrapper the walk did not need to open."""
    if entry.count is None:
        with mmap.mmap(segment.fileno(), entry.next_position, access=mmap.ACCESS_READ) as mapped:
            entry.count = wrapper_count(memoryview(mapped), entry.position, entry.next_position)
    return entry.count


def earliest(log: Log) -> int:
    """The modern offset of the log's first record (ListOffsets ``earliest``)."""
    index = log.segments[0].offset_index
    if index.first_offset is not None:
        return index.first_offset
    return index.start if index.carry is None else max(index.start, index.carry)


def modern_end(log: Log) -> int:
    """The last visible record's offset + 1: ListOffsets ``latest`` and the high watermark."""
    segments = log.segments
    for k in range(len(segments) - 1, -1, -1):
        segment = segments[k]
        visible = segment.visible_size
        if not visible:
            continue
        _walked(log, k)
        index = segment.offset_index
        last = index.last
        if last is None or last.next_position != visible:
            position, first = index.row_before_position(visible - 1)
            last = None
            for found, entry in _entries(log, k, position, first):
                if found is not segment or entry.next_position > visible:
                    break
                last = entry
            if last is None:
                continue
        return last.first + exact_count(segment, last)
    return earliest(log)  # nothing visible: where the first record is or will be


def locate(log: Log, offset: int) -> tuple[int, Entry] | None:
    """(segment number, entry) of the visible entry holding modern ``offset``, or of the first
    one after it when ``offset`` falls between two entries; None at or past the end.
    Raises OffsetOutOfRange before the log's start."""
    if offset < earliest(log):
        raise OffsetOutOfRange(f"offset {offset} is before the start {earliest(log)} of {log.name}")
    segments = log.segments
    k = max(bisect_right([segment.start for segment in segments], offset) - 1, 0)
    _walked(log, k)
    first_here = segments[k].offset_index.first_offset
    if k > 0 and first_here is not None and offset < first_here:
        k -= 1  # records of the previous segment's last entry, shifted past this start
    position, carry = segments[k].offset_index.row_before_offset(offset)
    for segment, entry in _entries(log, k, position, carry):
        if offset < entry.first + 1 or offset < entry.first + exact_count(segment, entry):
            return segments.index(segment), entry
    return None


def read_modern(log: Log, offset: int, max_bytes: int) -> list[Piece]:
    """The pieces a modern fetch at ``offset`` sends, about ``max_bytes`` of them, at least
    one whole batch or entry whatever its size (KIP-74). Empty at the end of the log.

    Stored batches come as file regions of their pieces (the caller closes them), 0.7
    entries as magic-1 message sets. Raises OffsetOutOfRange before the log's start, and
    InvalidMessage if the first entry to send is damaged on disk (later damage ends the read).
    """
    located = locate(log, offset)
    if located is None:
        return []
    k, entry = located
    pieces: list[Piece] = []
    total = 0
    run: list[Entry] = []
    run_bytes = 0
    run_segment: Segment | None = None
    try:
        for segment, entry in _entries(log, k, entry.position, entry.first):
            if run and (entry.kind == STORED or segment is not run_segment):
                total += _send_run(run_segment, run, offset, max_bytes - total, pieces)
                run, run_bytes = [], 0
                if total >= max_bytes:
                    break
            if entry.kind == STORED:
                size = entry.header.size
                if pieces and total + size > max_bytes:
                    break
                region = segment.entry_region(entry.position, entry.next_position - entry.position)
                with region:
                    if region.length != entry.next_position - entry.position:
                        raise InvalidMessage(segment.start + entry.position, "stored batch cut short")
                    pieces += [region.sub(entry.position + at, length) for at, length in batch_pieces(size)]
                total += size
            else:
                # A 0.7 message grows by the magic-1 fields around its value; a wrapper's
                # records are counted exactly when the run is encoded.
                run_bytes += entry.next_position - entry.position + _LEGACY_OVERHEAD
                if (pieces or run) and total + run_bytes > max_bytes:
                    break
                run.append(entry)
                run_segment = segment
        if run:
            _send_run(run_segment, run, offset, max_bytes - total, pieces)
    except InvalidMessage:
        if not pieces:
            raise
    return pieces


def _send_run(segment: Segment, run: list[Entry], offset: int, budget: int, pieces: list[Piece]) -> int:
    """Append the 0.7 entries of ``run`` as one magic-1 set (within ``budget`` bytes, at least
    one entry if ``pieces`` is empty); return its size."""
    start = run[0].position
    try:
        region = segment.entry_region(start, run[-1].next_position - start)
    except InvalidMessage:
        if pieces:
            return budget  # damage ends the read after what was found
        raise
    with region:
        data = memoryview(region.read())
    parts, size = [], 0
    for entry in run:
        if entry.next_position - start > len(data):
            break  # verification cut the region before a damaged entry
        at = entry.position - start
        magic, attributes = data[at + 4], data[at + 5]
        body = data[at + (9 if magic == 0 else 10):entry.next_position - start]
        if entry.kind == PLAIN:
            values = [body]
        else:
            crc = int.from_bytes(data[at + 6:at + 10], "big")
            values = [m.payload for m in expand_wrapper(Message(magic, attributes, crc, bytes(body)))]
        encoded = encode_legacy_set((entry.first + i, entry.timestamp, bytes(v))
                                    for i, v in enumerate(values) if entry.first + i >= offset)
        if (parts or pieces) and size + len(encoded) > budget:
            break
        parts.append(encoded)
        size += len(encoded)
    if parts:
        pieces.append(b"".join(parts))
    return size


def record_for_time(log: Log, timestamp: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first visible record with a timestamp at or after
    ``timestamp`` (ms), or None if there is none: ListOffsets by time (v1 answers both).

    Inside a stored batch whose max timestamp reaches it, the records are decoded (that batch
    only) to find the first that does. A 0.7 entry's timestamp is its append time
    (offset_index.py).
    """
    return _record_for_time(log, timestamp, _record_timestamps)


def offset_for_time(log: Log, timestamp: int,
                    record_timestamps: Callable[[bytes], Sequence[int]] | None = None) -> int | None:
    """record_for_time's offset; ``record_timestamps(batch)``, if given, decodes a batch's
    records' timestamps in order instead of codec/kafka's decoder."""
    found = _record_for_time(log, timestamp, record_timestamps or _record_timestamps)
    return None if found is None else found[0]


def _record_timestamps(batch: bytes) -> list[int]:
    return [record.timestamp for record in decode_batch(batch, verify=False)[1]]


def _record_for_time(log: Log, timestamp: int, record_timestamps) -> tuple[int, int] | None:
    segments = log.segments
    for k, segment in enumerate(segments):
        _walked(log, k)
        index = segment.offset_index
        if index.max_timestamp < timestamp or not segment.visible_size:
            continue
        position, carry = index.row_before_time(timestamp)
        for found_segment, entry in _entries(log, k, position, carry):
            if entry.timestamp < timestamp:
                continue
            if entry.kind == STORED:
                return _first_record_at(found_segment, entry, timestamp, record_timestamps)
            return entry.first, entry.timestamp
        return None
    return None


def _first_record_at(segment: Segment, entry: Entry, timestamp: int, record_timestamps) -> tuple[int, int]:
    with segment.entry_region(entry.position, entry.next_position - entry.position) as region:
        data = memoryview(region.read())
    batch = b"".join(data[at:at + n] for at, n in batch_pieces(entry.header.size))
    try:
        stamps = record_timestamps(batch)
    except (CorruptBatch, UnsupportedCompression):
        stamps = []  # its header said a record is late enough; which one is unknowable
    return next(((entry.first + delta, time) for delta, time in enumerate(stamps) if time >= timestamp),
                (entry.first, entry.header.max_timestamp))


def iter_batch_headers(log: Log, offset: int | None = None) -> Iterator[tuple[int, object]]:
    """(first offset, BatchHeader) of each stored batch written at or after byte ``offset``
    (default: the log's start), committed or not: what a new leader rebuilds producer state from."""
    offset = log.first_offset if offset is None else offset
    segments = log.segments
    k = max(bisect_right([segment.start for segment in segments], offset) - 1, 0)
    index = _walked(log, k).offset_index
    position, carry = index.row_before_position(offset - segments[k].start)
    for segment, entry in _entries(log, k, position, carry, written=True):
        if entry.kind == STORED and segment.start + entry.position >= offset:
            yield entry.first, entry.header


def next_offset(log: Log) -> int:
    """The first offset the next appended entry gets: the base offset to stamp a batch with."""
    newest = _walked(log, len(log.segments) - 1)
    return max(log.written_end, newest.offset_index.carry)


def append_batch(log: Log, batch: bytearray, values: Sequence[bytes | None], leader_epoch: int) -> int:
    """Stamp ``batch`` (base offset, leader epoch), store it with its records' ``values`` (docs/kafka-protocol.md §3)
    and append it; return its base offset. Raises LogWriteError as Log.append does."""
    base = next_offset(log)
    stamp(batch, base, leader_epoch)
    header = read_header(batch)
    entry = encode_stored_entry(batch, values)
    log.append_indexed(ValidatedMessageSet(memoryview(entry), header.records_count),
                       lambda position, end: Entry(position, end, base, header.records_count, header.max_timestamp,
                                                   STORED, header))
    return base
