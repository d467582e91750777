"""Modern offsets over a log's stored entries (MODERN.md D1), as the listener reads them.

TODO(issue 16): a stand-in until storage keeps the per-segment offset/time index D1
describes (written at append, rebuilt by recovery); then the three queries below become
storage's and this module goes. Until then the entries of each log are walked once, in the
reactor, as far as the visible end, and their (position, first offset, end offset, max
timestamp, stored batch size) kept in memory; later calls walk only what was appended since.
Retention (a new first segment) and truncation (a replica's) are noticed and handled.

- An entry at byte position P holding K records has offsets first .. first+K-1, where first
  = max(P, end of the previous entry): K = 1 for a 0.7 message, the inner count for a 0.7
  compressed wrapper, the batch's records_count for a stored batch.
- A 0.7 entry has no timestamp: it gets its segment file's modification time.
"""

from __future__ import annotations

import os
import weakref
from bisect import bisect_right
from dataclasses import dataclass, field

from twisted_broker.kafka_wire.legacy_sets import encode_legacy_set
from twisted_broker.kafka_wire.stored_batch import HEAD_BYTES, batch_pieces, is_stored_batch, read_stored_header
from twisted_broker.storage.log import Log
from twisted_broker.storage.segment import FileRegion
from twisted_broker.wire.message import Message
from twisted_broker.wire.message_set import expand_wrapper, iter_entries

WALK_BYTES = 4 << 20


@dataclass
class _Entries:
    positions: list[int] = field(default_factory=list)
    firsts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)  # max timestamp so far (ms)
    batch_sizes: list[int] = field(default_factory=list)  # 0: a 0.7 entry
    walked_to: int = -1  # byte position after the last entry walked


@dataclass(frozen=True, slots=True)
class Read:
    pieces: list  # bytes and FileRegions: the record set as a modern client reads it
    size: int


class ModernLogReader:
    def __init__(self) -> None:
        self._logs: weakref.WeakKeyDictionary[Log, _Entries] = weakref.WeakKeyDictionary()

    def start(self, log: Log) -> int:
        """The first offset of the log (ListOffsets earliest)."""
        entries = self._walk(log)
        return entries.firsts[0] if entries.firsts else log.first_offset

    def end(self, log: Log) -> int:
        """The last visible record's offset + 1 (ListOffsets latest, the high watermark)."""
        entries = self._walk(log)
        return entries.ends[-1] if entries.ends else log.first_offset

    def offset_for_time(self, log: Log, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp_ms``; None if none."""
        entries = self._walk(log)
        index = bisect_right(entries.timestamps, timestamp_ms - 1)
        if index == len(entries.positions):
            return None
        if not entries.batch_sizes[index]:
            return entries.firsts[index], entries.timestamps[index]
        from twisted_broker.kafka_wire.record_batch import decode_batch

        batch = b"".join(self._piece_bytes(log, entries, index))
        for record in decode_batch(batch, verify=False)[1]:
            if record.timestamp >= timestamp_ms:
                return record.offset, record.timestamp
        return entries.ends[index], entries.timestamps[index]  # cannot happen: max timestamp >= T

    def read(self, log: Log, offset: int, max_bytes: int) -> Read:
        """The records from ``offset`` (the entry holding it first, whole even past
        ``max_bytes``, as Kafka sends a first batch larger than the limit), at most
        ``max_bytes`` after it. The caller checks ``offset`` against start and end."""
        entries = self._walk(log)
        index = bisect_right(entries.ends, offset)
        pieces, size = [], 0
        while index < len(entries.positions):
            batch_size = entries.batch_sizes[index]
            if batch_size:
                sent = self._batch_regions(log, entries, index)
            else:
                sent = [self._legacy_set(log, entries, index)]
            length = sum(p.length if isinstance(p, FileRegion) else len(p) for p in sent)
            if pieces and size + length > max_bytes:
                for piece in sent:
                    if isinstance(piece, FileRegion):
                        piece.close()
                break
            pieces.extend(sent)
            size += length
            index += 1
        return Read(pieces, size)

    # -- reading entries --------------------------------------------------------------------------

    def _entry_region(self, log: Log, position: int, length: int) -> FileRegion:
        region = log.read(position, length)
        if region is None or region.length < length:
            raise OSError(f"{log.name}: the entry at {position} is no longer visible")
        return region

    def _batch_regions(self, log: Log, entries: _Entries, index: int) -> list[FileRegion]:
        position = entries.positions[index]
        pieces = batch_pieces(entries.batch_sizes[index])
        whole = self._entry_region(log, position, pieces[-1][0] + pieces[-1][1])
        try:
            return [FileRegion(whole._descriptor, whole.position + start, length) for start, length in pieces]
        finally:
            whole.close()

    def _piece_bytes(self, log: Log, entries: _Entries, index: int) -> list[bytes]:
        regions = self._batch_regions(log, entries, index)
        try:
            return [region.read() for region in regions]
        finally:
            for region in regions:
                region.close()

    def _legacy_set(self, log: Log, entries: _Entries, index: int) -> bytes:
        """A 0.7 entry as the magic-1 message set a modern client reads (D2): built in Python."""
        position = entries.positions[index]
        with self._entry_region(log, position, entries.positions[index + 1] - position
                                if index + 1 < len(entries.positions) else entries.walked_to - position) as region:
            data = region.read()
        messages = _messages(data)
        first, timestamp = entries.firsts[index], entries.timestamps[index]
        return encode_legacy_set((first + i, timestamp, bytes(m.payload)) for i, m in enumerate(messages))

    # -- walking ----------------------------------------------------------------------------------

    def _walk(self, log: Log) -> _Entries:
        entries = self._logs.get(log)
        end = log.end_offset
        if entries is None or not log.first_offset <= entries.walked_to <= end:  # new, truncated, or all retained
            entries = self._logs[log] = _Entries(walked_to=log.first_offset)
        elif entries.positions and entries.positions[0] < log.first_offset:
            _drop_before(entries, log.first_offset)
        while entries.walked_to < end:
            region = log.read(entries.walked_to, WALK_BYTES)
            if region is None:
                break
            with region:
                data = region.read()
            if len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                # One entry larger than WALK_BYTES: read it whole.
                with log.read(entries.walked_to, 4 + int.from_bytes(data[:4], "big")) as region:
                    data = region.read()
            mtime_ms = _mtime_ms(log, entries.walked_to)
            _add_entries(entries, data, mtime_ms)
        return entries


def _add_entries(entries: _Entries, data: bytes, mtime_ms: int) -> None:
    view, pos = memoryview(data), 0
    base = entries.walked_to
    while len(data) - pos >= 4:
        size = int.from_bytes(data[pos:pos + 4], "big")
        if pos + 4 + size > len(data):
            break
        head = view[pos:pos + min(HEAD_BYTES, 4 + size)]
        timestamp, batch_size = mtime_ms, 0
        if is_stored_batch(head):
            header = read_stored_header(head)
            count, timestamp, batch_size = header.records_count, header.max_timestamp, header.size
        elif data[pos + 5] & 0x03:
            count = len(_messages(view[pos:pos + 4 + size]))
        else:
            count = 1
        first = max(base + pos, entries.ends[-1] if entries.ends else 0)
        entries.positions.append(base + pos)
        entries.firsts.append(first)
        entries.ends.append(first + count)
        entries.timestamps.append(max(timestamp, entries.timestamps[-1] if entries.timestamps else timestamp))
        entries.batch_sizes.append(batch_size)
        pos += 4 + size
    entries.walked_to = base + pos


def _messages(entry) -> list[Message]:
    messages = []
    for _offset, _next, message in iter_entries(entry):
        messages.extend(expand_wrapper(message) if message.codec else [message])
    return messages


def _drop_before(entries: _Entries, position: int) -> None:
    cut = bisect_right(entries.positions, position - 1)
    for values in (entries.positions, entries.firsts, entries.ends, entries.timestamps, entries.batch_sizes):
        del values[:cut]


def _mtime_ms(log: Log, position: int) -> int:
    segments = log.segments
    starts = [segment.start for segment in segments]
    segment = segments[max(bisect_right(starts, position) - 1, 0)]
    try:
        return int(os.stat(segment.path).st_mtime * 1000)
    except OSError:
        return 0

