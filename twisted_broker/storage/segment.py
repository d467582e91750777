"""One segment file of a partition log, and the file regions that reads hand out.

A segment is ``<start offset, 20 digits>.kafka``: message-set bytes only, no header, no index
(spec 4.1-4.2); ``<start>.index`` beside it holds modern offsets (offset_index.py). Byte ``p`` of the file has log offset ``start + p``.

Three sizes matter: ``size`` is what has been written, ``flushed_size`` what has been fsynced,
``visible_size`` what readers may see. Under 0.7's rule the log publishes each flush, so the
last two move together (0.7's high-water mark: visible only once on disk); a replicated log
publishes its high watermark instead (docs/replication.md §6), whatever has been flushed.

Reads are cut at a message boundary. Boundaries are known from appends (and recovery), kept
sparsely in memory (one every ``INDEX_INTERVAL_BYTES``, like Kafka 0.8's index interval), and
otherwise found by walking length fields from a known boundary: the walk is at most one
interval plus one message when the index covers the region, and indexes what it walks.

Bytes loaded from disk are CRC-checked the first time a fetch reaches them (verification.py):
a damaged message is never served; fetches stop before it and a fetch at it raises
InvalidMessage, logged once per damaged message.
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from bisect import bisect_right

from twisted_broker.errors import InvalidMessage, LogWriteError
from twisted_broker.storage.offset_index import OffsetIndex
from twisted_broker.storage.verification import (
    VerifiedRanges, entry_length, looks_like_damaged_boundary, scan_entries,
)
from twisted_broker.codec.kafka07.crc import crc32

log = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".kafka"
INDEX_INTERVAL_BYTES = 4096
MAX_DAMAGE_RECORDS = 1024  # per segment; real damage is a handful, see _record_damage
WALK_WINDOW_BYTES = 64 * 1024
_LENGTH = struct.Struct(">i")
_MIN_ENTRY = 5


def segment_file_name(start: int) -> str:
    return f"{start:020d}{SEGMENT_SUFFIX}"


def parse_segment_file_name(name: str) -> int | None:
    """The start offset a segment file name carries, or None if it is not a segment file."""
    if not name.endswith(SEGMENT_SUFFIX):
        return None
    digits = name[:-len(SEGMENT_SUFFIX)]
    # 0.7 accepts any digit count; isascii() because str.isdigit() also takes digits int() refuses ("²").
    return int(digits) if digits.isascii() and digits.isdigit() else None


class SharedDescriptor:
    """A duplicate of a segment's descriptor, shared by the regions handed out from it.

    It closes when the last region using it closes. Shared, not one per region: a MultiFetch
    may name one partition 32,767 times, and a peer that then never reads its response
    would otherwise pin that many descriptors (and the broker could open no file).
    """

    __slots__ = ("fd", "users")

    def __init__(self, fd: int) -> None:
        self.fd, self.users = os.dup(fd), 0

    def release(self) -> None:
        self.users -= 1
        if self.users == 0:
            os.close(self.fd)
            self.fd = -1


class FileRegion:
    """``length`` bytes at ``position`` of an open file, for streaming with sendfile or pread.

    It reads through a duplicate of the segment's descriptor (a SharedDescriptor): retention
    may unlink and close the segment while the region is being sent, and the region stays
    readable until ``close()``.
    """

    __slots__ = ("_descriptor", "fd", "position", "length")

    def __init__(self, descriptor: SharedDescriptor, position: int, length: int) -> None:
        descriptor.users += 1
        self._descriptor = descriptor
        self.fd, self.position, self.length = descriptor.fd, position, length

    def sub(self, position: int, length: int) -> "FileRegion":
        """Another region of the same file (a piece of this one), open until its own close."""
        return FileRegion(self._descriptor, position, length)

    def read(self) -> bytes:
        """The region's bytes. For tests and small tools only: the broker streams regions."""
        return os.pread(self.fd, self.length, self.position)

    def close(self) -> None:
        if self.fd >= 0:
            self.fd = -1
            self._descriptor.release()

    def __enter__(self) -> "FileRegion":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


# What a read hands out for a response: bytes, or a file region the connection streams.
Piece = bytes | FileRegion


class Segment:
    """An open segment file. Not thread-safe: one thread (the reactor's) uses it."""

    def __init__(self, directory: str, start: int, *, now: float, truncate: bool = False,
                 file_name: str | None = None, previous: "Segment | None" = None) -> None:
        self.start = start
        # file_name: a loaded file's own name, which may have fewer than 20 digits (spec 4.1).
        self.path = os.path.join(directory, file_name or segment_file_name(start))
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | (os.O_TRUNC if truncate else 0)
        self._fd = os.open(self.path, flags, 0o644)
        stat = os.fstat(self._fd)
        self.size = stat.st_size
        self.flushed_size = self.visible_size = self.size
        # Retention and offsets-before-time go by last write; a loaded file's is its mtime.
        self.modified_time = stat.st_mtime if self.size else now
        self.first_append_time: float | None = None
        self.deleted = False
        # True when a failed write could not be cut back off the file: its tail is in doubt.
        self.damaged = False
        self._index = array("q", [0])  # known message boundaries (file positions), sorted
        self._readers: SharedDescriptor | None = None  # the regions' descriptor while any is open
        # File ranges known to hold valid entries (appended here, or scanned), and the damaged
        # messages found in the others: file position -> reason (verification.py).
        self.verified = VerifiedRanges()
        self.damaged_messages: dict[int, str] = {}
        self._unrecorded_damage = ""
        if self.size:
            self._index.append(self.size)
        # Modern offsets and timestamps (offset_index.py), its file truncated with this one's.
        self.offset_index = OffsetIndex(self.path, start, truncate=truncate)
        self.offset_index.truncate(self.size)  # rows of bytes a crash took back
        if previous is not None:  # a roll: the first offset here may follow from the last there
            self.offset_index.follow(previous.offset_index, previous.size)

    @property
    def end(self) -> int:
        """Log offset just past the visible data."""
        return self.start + self.visible_size

    def append(self, data: memoryview, now: float) -> None:
        """Write ``data`` (whole message-set entries) at the end. Raises LogWriteError.

        A failed write is cut back off the file, so the segment never keeps half a batch.
        """
        before = self.size
        try:
            written = 0
            while written < len(data):
                written += os.write(self._fd, data[written:])
        except OSError as exc:
            try:
                os.ftruncate(self._fd, before)
            except OSError as truncate_exc:
                self.damaged = True
                raise LogWriteError(truncate_exc.errno, f"{self.path}: cannot cut back a failed write: {truncate_exc}") from exc
            raise LogWriteError(exc.errno, f"{self.path}: {exc.strerror}") from exc
        self.size = before + written
        self.offset_index.appended(before, now)
        self.verified.add(before, self.size)  # the broker validated every entry it appends
        if self.first_append_time is None:
            self.first_append_time = now
        self.modified_time = now
        if self.size - self._index[-1] >= INDEX_INTERVAL_BYTES:
            self._index.append(self.size)

    def fileno(self) -> int:
        """The descriptor appends go to (a flusher fsyncs a duplicate of it)."""
        return self._fd

    def flushed(self, size: int, *, publish: bool = True) -> None:
        """Record that a flush made ``size`` bytes durable; publish them to readers too,
        unless the log publishes a high watermark instead."""
        if size > self.flushed_size:
            self.flushed_size = size
        if publish:
            self.publish(size)

    def publish(self, size: int) -> None:
        """Let readers see the first ``size`` bytes (a message boundary)."""
        if size > self.visible_size:
            self.visible_size = size
            if size > self._index[-1]:
                self._index.append(size)  # appends end on boundaries: a caught-up reader's next offset

    def hide_from(self, size: int) -> None:
        """Readers may see no more than ``size`` bytes (a replica's log opened: its high watermark)."""
        self.visible_size = min(self.visible_size, size)

    def truncate(self, size: int) -> None:
        """Cut the file to ``size`` bytes (a boundary): recovery, a replica's truncation."""
        os.ftruncate(self._fd, size)
        os.fsync(self._fd)
        self.size = self.flushed_size = self.visible_size = size
        self.verified.cut(size)
        self.offset_index.truncate(size)
        del self._index[bisect_right(self._index, size):]
        if self._index[-1] != size:
            self._index.append(size)

    def region(self, position: int, max_bytes: int, *, written: bool = False) -> FileRegion:
        """The flushed bytes from ``position``, at most ``max_bytes``, cut at a message boundary.

        If not even the first message fits in ``max_bytes``, the region is the raw
        ``max_bytes`` (0.7's behaviour): the client then sees an incomplete first message and
        reports that its fetch size is too small, instead of polling an empty answer forever.

        Bytes not yet known to be valid are CRC-checked first; the region ends before a damaged
        message, and InvalidMessage is raised if it would start with one. ``written``: up to
        what is written, visible or not (a leader serving its followers)."""
        if position in self.damaged_messages:
            raise self._damage_error(position)
        available = self.size if written else self.visible_size
        limit = min(position + max_bytes, available)
        end = limit if limit == available else self._last_boundary(position, limit)
        if end <= position:
            end = limit
            if position < limit and self.verified.covered_until(position) == position:
                self._check_entry_at(position)
        elif (verified := self.verified.covered_until(position)) < end:
            end = self._verify(position, verified, end)
        return self._region(position, end)

    def entry_region(self, position: int, length: int, *, written: bool = False) -> FileRegion:
        """The whole entries in ``length`` bytes at ``position``, a boundary the caller walked
        to (offset_index.py): CRC-checked as ``region`` checks, cut before a damaged entry;
        InvalidMessage if the first is damaged. Nothing is read into memory but the check."""
        if position in self.damaged_messages:
            raise self._damage_error(position)
        end = min(position + length, self.size if written else self.visible_size)
        if (verified := self.verified.covered_until(position)) < end:
            end = self._verify(position, verified, end)
        return self._region(position, end)

    def _region(self, position: int, end: int) -> FileRegion:
        readers = self._readers
        if readers is None or readers.fd < 0:
            readers = self._readers = SharedDescriptor(self._fd)
        return FileRegion(readers, position, end - position)

    def _check_entry_at(self, position: int) -> None:
        """Raise InvalidMessage if the entry at ``position``, which no region could start with,
        is a damaged message rather than one too big for the fetch or a misaligned offset."""
        if self._index[bisect_right(self._index, position) - 1] == position:  # a known boundary
            length = entry_length(self._fd, position)
            if length is None or length < 5 or position + 4 + length > self.visible_size:
                self._record_damage(position, f"its length field ({length}) frames no message")
                raise self._damage_error(position)
        elif looks_like_damaged_boundary(self._fd, position, self.visible_size):
            self._record_damage(position, "its CRC does not match its payload")
            raise self._damage_error(position)

    def _verify(self, position: int, start: int, end: int) -> int:
        """Check ``[start, end)`` (``start`` a boundary); return where the region must end."""
        if start not in self.damaged_messages:
            valid, error = scan_entries(self._fd, start, end)
            self.verified.add(start, start + valid)
            if error is None:
                return end
            start += valid
            self._record_damage(start, error.reason)
        if start == position:
            raise self._damage_error(position)
        return start

    def _record_damage(self, position: int, reason: str) -> None:
        length = entry_length(self._fd, position)
        following = position + 4 + length if length is not None and length >= 5 else None
        if following is not None and following <= self.flushed_size:
            after = f"the next message starts at offset {self.start + following}"
        else:
            after = "its length field is damaged too, so the next message cannot be located"
        if len(self.damaged_messages) >= MAX_DAMAGE_RECORDS:
            # A fetch at a misaligned offset of a loaded segment looks like damage too: a
            # client sending random offsets must not grow this (or the log) without bound.
            self._unrecorded_damage = reason
            return
        self.damaged_messages[position] = reason
        # Logged once: the position is remembered, and no later fetch scans it again.
        log.error("%s: damaged message at offset %d (file position %d): %s; fetches stop before "
                  "it and a fetch at it gets InvalidMessage; %s", self.path, self.start + position,
                  position, reason, after)

    def _damage_error(self, position: int) -> InvalidMessage:
        reason = self.damaged_messages.get(position, self._unrecorded_damage)
        return InvalidMessage(self.start + position, f"{self.path}: damaged on disk ({reason})")

    def _last_boundary(self, position: int, limit: int) -> int:
        """The last message boundary in ``(position, limit]``, or ``position`` if none is found."""
        index = self._index
        known = index[bisect_right(index, limit) - 1]
        if known > position:
            start = known
        elif known == position or self._starts_message(position, limit):
            start = position
        else:
            return position  # not a message start: answer raw bytes, as 0.7 does
        found, end = self._walk(start, limit)
        if end > (found[-1] if found else start):
            # The region's end is where this reader (a sequential consumer) fetches next:
            # knowing it spares that fetch the check of an unknown offset.
            found.append(end)
        if found:
            # Every known boundary ≤ limit is ≤ start, so the new ones slot in right after start.
            slot = bisect_right(index, start)
            index[slot:slot] = array("q", found)
        return end

    def entry_starts_at(self, position: int) -> bool:
        """Whether a written entry starts at ``position``: walked from the known boundary before
        it, or, that far in a loaded file, an entry whose CRC matches (as reads trust one)."""
        index = self._index
        known = index[bisect_right(index, position) - 1]
        if known == position or position >= self.size or position - known > 16 * WALK_WINDOW_BYTES:
            return position in (known, self.size) or self._starts_message(position, self.size)
        found, end = self._walk(known, position)
        slot = bisect_right(index, known)
        index[slot:slot] = array("q", found)
        return end == position

    def _starts_message(self, position: int, limit: int) -> bool:
        # Trusted only with a plausible length and a matching CRC: a misaligned offset almost never has both.
        header = os.pread(self._fd, 4, position)
        if len(header) < 4:
            return False
        (size,) = _LENGTH.unpack(header)
        if size < _MIN_ENTRY or position + 4 + size > limit:
            return False
        body = os.pread(self._fd, size, position + 4)
        if body[0] == 1 and size >= 6:
            return crc32(memoryview(body)[6:]) == int.from_bytes(body[2:6], "big")
        if body[0] == 0:
            return crc32(memoryview(body)[5:]) == int.from_bytes(body[1:5], "big")
        return False

    def _walk(self, position: int, limit: int) -> tuple[list[int], int]:
        """Follow length fields from a boundary; return new index points and the last boundary ≤ limit."""
        found: list[int] = []
        last_indexed = position
        window, window_start = b"", position
        unpack = _LENGTH.unpack_from
        while limit - position >= 4:
            offset = position - window_start
            if offset + 4 > len(window):
                window_start, offset = position, 0
                window = os.pread(self._fd, min(WALK_WINDOW_BYTES, limit - position), position)
                if len(window) < 4:
                    break
            (size,) = unpack(window, offset)
            following = position + 4 + size
            if size < _MIN_ENTRY or following > limit:
                break
            position = following
            if position - last_indexed >= INDEX_INTERVAL_BYTES:
                found.append(position)
                last_indexed = position
        return found, position

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.offset_index.close()

    def delete(self) -> None:
        """Close and unlink the file. Regions already handed out stay readable."""
        self.close()
        self.deleted = True
        self.offset_index.delete()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def touch(self, now: float) -> None:
        self.modified_time = now
        os.utime(self.path, (now, now))

    def __repr__(self) -> str:
        return f"Segment({self.path!r}, size={self.size}, flushed={self.flushed_size}, visible={self.visible_size})"
