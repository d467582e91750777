"""One segment's index of modern offsets and timestamps (D1), beside it as ``<start>.index``.

How this works: every stored entry at log offset P holding K records has the modern offsets
first(P) .. first(P)+K-1, first(P) = max(P, end of the entry before). K is 1 for a 0.7
message, the records_count of a stored batch (its header, stored_batch.py), the inner count
of a 0.7 compressed wrapper (a gzip wrapper's ISIZE / 9 bounds it: when that cannot reach
the next entry's offset the wrapper is not opened). Walking a segment's entries in order
gives every first; the index keeps a row every ``ROW_INTERVAL_BYTES`` of log: (file position
of an entry, its first offset, the largest record timestamp up to it and in it), so a lookup
walks at most one interval from a row.

The walk is lazy: an append only notes its wall-clock time (a 0.7 entry's timestamp, D1),
once per interval, and the rows are walked when a modern query first needs them (then
written to the file, so the next run starts from them). The 0.7 produce path thus pays
nothing per message: a walk costs about as much as the append itself, and most logs are
never read by a modern client. Rows are placed by the bytes alone (the first entry at least
an interval past the previous row), so a leader, its followers and a recovered log that hold
the same bytes hold the same rows; only the 0.7 entries' timestamps are local (appends this
run, else the segment file's mtime).

File I/O only (no Twisted, no timers). The file is not fsynced at append: a crash leaves
it behind (walked again from its last row) or ahead of a truncated segment (cut at open).
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from array import array
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

from twisted_broker.errors import InvalidMessage
from twisted_broker.codec.kafka.batch_header import TIMESTAMP_TYPE_LOG_APPEND, BatchHeader
from twisted_broker.codec.kafka.legacy_sets import NO_TIMESTAMP
from twisted_broker.storage.stored_batch import (
    HEAD_BYTES, StoredBatchError, is_stored_batch, read_stored_header,
)
from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.message import Message
from twisted_broker.codec.kafka07.message_set import expand_wrapper

log = logging.getLogger(__name__)

INDEX_SUFFIX = ".index"
ROW = struct.Struct(">qqq")  # file position, first offset, max timestamp (ms) up to its entry
ROW_INTERVAL_BYTES = 4096
PLAIN, WRAPPER, STORED = "0.7 message", "0.7 wrapper", "stored batch"
_HEAD = struct.Struct(">iBB")  # length, magic, attributes (magic 1; magic 0's crc starts there)
_CRC_1 = struct.Struct(">I")  # a magic-1 entry's crc, at byte 6
_MIN_INNER_BYTES = 9  # the smallest inner 0.7 entry (magic 0): bounds a wrapper's count by ISIZE


@dataclass(slots=True)
class Entry:
    """A stored entry as the walk found it. ``count`` is None for a 0.7 wrapper not opened
    (its records cannot reach the next entry's offset); ``exact_count`` opens it."""

    position: int  # in the segment file
    next_position: int
    first: int  # modern offset of its first record
    count: int | None
    timestamp: int  # max record timestamp (ms): a batch's maxTimestamp, a 0.7 entry's append time
    kind: str
    header: BatchHeader | None = None  # a stored batch's


def wrapper_count(view, position: int, next_position: int) -> int:
    """The records of the 0.7 wrapper at ``position``, counted by inflating it (1 if damaged:
    verification fences it before anyone is served its bytes)."""
    magic, attributes, (crc,) = view[position + 4], view[position + 5], _CRC_1.unpack_from(view, position + 6)
    try:
        return len(expand_wrapper(Message(magic, attributes, crc, bytes(view[position + 10:next_position]))))
    except InvalidMessage:
        return 1


def walk(view, position: int, end: int, start: int, carry: int, time_of, *,
         rows_from: int | None = None) -> Iterator[Entry]:
    """The entries of a segment's bytes ``view`` from ``position`` (a boundary) to ``end``.

    ``carry`` is the least first offset the entry at ``position`` may have; ``time_of(p)`` the
    append time of a 0.7 entry at file position p. Stops early at a length that frames no
    entry (damage: verification.py answers fetches there).

    With ``rows_from`` (the file position of the next row), the walk that places rows: a 0.7
    message is yielded only at a row point, before a compressed entry, or as the last one
    (no object per message: a first walk covers every message of a 0.7 log).
    """
    unpack = _HEAD.unpack_from
    every = rows_from is None
    next_row = 0 if every else rows_from
    skipped: Entry | None = None  # the latest 0.7 message not yielded
    while end - position >= 9:  # the smallest entry: magic 0, empty payload
        size, magic, attributes = unpack(view, position)
        following = position + 4 + size
        if size < 5 or following > end:
            break
        offset = start + position
        first = offset if carry <= offset else carry
        if magic == 0 or not attributes & 3:
            carry = first + 1
            if every or position >= next_row:
                next_row = position + ROW_INTERVAL_BYTES
                skipped = None
                yield Entry(position, following, first, 1, time_of(position), PLAIN)
            else:
                skipped = (position, following, first)
        else:
            entry = _wrapper_entry(view, position, following, first, start, attributes, time_of)
            if entry is None:
                break
            if skipped is not None:
                yield Entry(*skipped, 1, time_of(skipped[0]), PLAIN)
                skipped = None
            if position >= next_row:
                next_row = position + ROW_INTERVAL_BYTES
            yield entry
            carry = first + (entry.count or 1)
        position = following
    if skipped is not None:
        yield Entry(*skipped, 1, time_of(skipped[0]), PLAIN)


def _wrapper_entry(view, position: int, following: int, first: int, start: int, attributes: int,
                   time_of) -> Entry | None:
    """The entry of a compressed 0.7 message: a stored batch or a 0.7 wrapper (None: damaged)."""
    if is_stored_batch(view[position:position + 26]):
        try:
            header = read_stored_header(view[position:position + HEAD_BYTES])
        except StoredBatchError:
            return None
        timestamp = (time_of(position) if header.attributes & TIMESTAMP_TYPE_LOG_APPEND
                     else header.max_timestamp)
        return Entry(position, following, first, header.records_count, timestamp, STORED, header)
    count = None
    if attributes & 3 != GZIP or int.from_bytes(view[following - 4:following], "little") \
            // _MIN_INNER_BYTES >= start + following - first:
        count = wrapper_count(view, position, following)
    return Entry(position, following, first, count, time_of(position), WRAPPER)


class OffsetIndex:
    """The rows of one segment, in memory and in ``<start>.index``. One thread uses it."""

    def __init__(self, segment_path: str, start: int, *, truncate: bool = False) -> None:
        self.path = segment_path[:segment_path.rfind(".")] + INDEX_SUFFIX
        self.start = start
        self.positions, self.firsts, self.times = array("q"), array("q"), array("q")
        self._marks, self._mark_times = array("q"), array("d")  # appends this run: position, s
        self.walked = 0  # file position up to which entries are walked (a boundary)
        self.carry: int | None = None  # least first offset of the entry at ``walked``; None: unknown
        self.max_timestamp = NO_TIMESTAMP  # of the walked entries
        self.last: Entry | None = None  # the last walked entry, when walked this run
        try:
            self.default_ms = int(os.stat(segment_path).st_mtime * 1000)
        except FileNotFoundError:
            self.default_ms = NO_TIMESTAMP
        # No descriptor is kept: a broker holds many segments, most never read by a modern
        # client, and the file is only read here and appended to when rows are walked.
        if truncate:
            self.delete()
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            data = b""
        size = len(data)
        previous = (-1, -1, NO_TIMESTAMP)
        kept = 0
        for position, first, timestamp in ROW.iter_unpack(data[:size - size % ROW.size]):
            # Rows only grow; anything else is a file from another life of this segment.
            if (position <= previous[0] or first <= previous[1] or timestamp < previous[2]
                    or first < self.start + position or (kept == 0 and position != 0)):
                log.warning("%s: row %d is out of order; the rows after it are walked again", self.path, kept)
                break
            self._add_row(position, first, timestamp)
            previous = (position, first, timestamp)
            kept += 1
        if kept * ROW.size != size:
            self._cut_file(kept)
        self._rows_in_file = kept
        self._resume_at_last_row()

    def _resume_at_last_row(self) -> None:
        if self.positions:
            self.walked, self.carry, self.max_timestamp = self.positions[-1], self.firsts[-1], self.times[-1]
        else:
            self.walked, self.carry, self.max_timestamp = 0, None, NO_TIMESTAMP
        self.last = None

    def _add_row(self, position: int, first: int, timestamp: int) -> None:
        self.positions.append(position)
        self.firsts.append(first)
        self.times.append(timestamp)

    # -- the segment's calls ---------------------------------------------------------------

    def appended(self, position: int, now: float) -> None:
        """Note an append at file ``position`` at ``now`` (s): the 0.7 path's whole cost here."""
        marks = self._marks
        if not marks or position - marks[-1] >= ROW_INTERVAL_BYTES:
            marks.append(position)
            self._mark_times.append(now)

    def truncate(self, size: int) -> None:
        """Forget rows and marks at or past file position ``size`` (the segment was cut)."""
        keep = bisect_right(self.positions, size - 1) if size > 0 else 0
        if keep < len(self.positions):
            del self.positions[keep:], self.firsts[keep:], self.times[keep:]
            if self._rows_in_file > keep:
                self._cut_file(keep)
                self._rows_in_file = keep
        marks = bisect_right(self._marks, size - 1) if size > 0 else 0
        del self._marks[marks:], self._mark_times[marks:]
        if self.walked > size or (self.last is not None and self.last.next_position > size):
            self._resume_at_last_row()

    def _cut_file(self, rows: int) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            os.ftruncate(fd, rows * ROW.size)
            os.fsync(fd)  # rows past a cut must not come back over the bytes appended next
        finally:
            os.close(fd)

    def follow(self, previous: "OffsetIndex", previous_size: int) -> None:
        """Take the least first offset of this (new) segment from the one before it, if that
        one is walked to its end; otherwise a query will walk it (it may then be gone to
        retention only if no modern client ever asked: nobody saw an offset it shifted)."""
        if self.carry is None and previous.carry is not None and previous.walked == previous_size:
            self.carry = max(self.start, previous.carry)

    def close(self) -> None:
        """Write the rows noted since the last walk (no descriptor is kept)."""
        try:
            self.write_rows()
        except OSError as exc:  # the rows are walked again next time: not worth failing a close
            log.warning("%s: rows not written (%s); they will be walked again", self.path, exc)

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    # -- walking ---------------------------------------------------------------------------

    def time_of(self, position: int) -> int:
        """A 0.7 entry's timestamp: the time of the append that wrote it (to a row interval),
        or the segment file's mtime for bytes written before this run."""
        index = bisect_right(self._marks, position) - 1
        return int(self._mark_times[index] * 1000) if index >= 0 else self.default_ms

    def catch_up(self, fd: int, size: int, carry_in: int) -> None:
        """Walk the entries of the segment file ``fd`` from the last walked one to ``size``;
        ``carry_in`` is the least first offset of the segment's first entry."""
        if self.carry is None:
            self.carry = max(self.start, carry_in)
        if self.walked < size:
            with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mapped, memoryview(mapped) as view:
                self._walk_to(view, size)
        self.write_rows()

    def write_rows(self) -> None:
        """Append the rows not yet in the file to it."""
        written = self._rows_in_file
        if written == len(self.positions):
            return
        new_rows = b"".join(ROW.pack(*row) for row in zip(
            self.positions[written:], self.firsts[written:], self.times[written:]))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, new_rows)
        finally:
            os.close(fd)
        self._rows_in_file = len(self.positions)

    def note_appended(self, entry: Entry) -> None:
        """Take in an entry the broker has just appended right after the walked ones (a
        stored batch whose header it knows), sparing the next query a walk of it."""
        if self.walked == entry.position and self.carry is not None:
            self._note(entry)  # else entries before it are not walked yet: a walk will find it

    def _walk_to(self, view, end: int) -> None:
        positions = self.positions
        next_row = positions[-1] + ROW_INTERVAL_BYTES if positions else 0
        for entry in walk(view, self.walked, end, self.start, self.carry, self.time_of, rows_from=next_row):
            self._note(entry)

    def _note(self, entry: Entry) -> None:
        positions = self.positions
        # A row's timestamp covers its own entry too: 0.7 messages the walk did not yield
        # were appended no later than this one, and a bound from above is all a search needs.
        self.max_timestamp = max(self.max_timestamp, entry.timestamp)
        if not positions or entry.position - positions[-1] >= ROW_INTERVAL_BYTES:
            self._add_row(entry.position, entry.first, self.max_timestamp)
        self.walked, self.carry, self.last = entry.next_position, entry.first + (entry.count or 1), entry

    def row_before_position(self, position: int) -> tuple[int, int]:
        """(file position, first offset) of the last row at or before ``position``: where a
        walk to it starts ((0, least first offset) while the segment has no rows)."""
        return self._row(bisect_right(self.positions, position) - 1)

    def row_before_offset(self, offset: int) -> tuple[int, int]:
        """As row_before_position, for the last row whose first offset is at most ``offset``."""
        return self._row(bisect_right(self.firsts, offset) - 1)

    def row_before_time(self, timestamp: int) -> tuple[int, int]:
        """As row_before_position, for the last row before which every record is older than
        ``timestamp``: the first record at or after it is at or past that row."""
        return self._row(bisect_right(self.times, timestamp - 1) - 1)

    def _row(self, index: int) -> tuple[int, int]:
        if not self.positions:
            return 0, self.start if self.carry is None else max(self.start, self.carry)
        index = max(index, 0)
        return self.positions[index], self.firsts[index]

    @property
    def first_offset(self) -> int | None:
        """The modern offset of the segment's first entry, if walked."""
        return self.firsts[0] if self.positions else None
