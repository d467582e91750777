"""A replica's log (docs/replication.md §3, §6): readers see up to a high watermark that
replication publishes, flushed or not; the tail past it may be cut to match a leader.

Everything else is a 0.7 Log: segments, appends, flush policy, retention, recovery. Flushes
only make data durable here (``on_durable`` hears of them, for ``log.visibility=flushed``).
Like the rest of storage/, no Twisted and no timers.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Callable

from twisted_broker.errors import LogWriteError, OffsetOutOfRange
from twisted_broker.storage.checkpoints import sync_leader_epochs, write_leader_epochs
from twisted_broker.storage.log import Log
from twisted_broker.storage.segment import FileRegion, Segment
from twisted_broker.storage.verification import entry_length

log = logging.getLogger(__name__)


class ReplicaLog(Log):
    publishes_flushes = False

    def __init__(self, *args, high_watermark: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Called when a flush made more data durable (the leader's own flushed end may move).
        self.on_durable: Callable[[], object] | None = None
        self._epochs_unsynced = False  # its epoch file was written without an fsync (write_epochs)
        self.high_watermark = min(max(high_watermark, self.first_offset), self.written_end)
        for segment in self._segments:  # opened files show all they hold: hide the uncommitted
            visible = min(max(self.high_watermark - segment.start, 0), segment.size)
            segment.hide_from(visible)
            segment.publish(visible)

    def write_epochs(self, data: bytes) -> None:
        """Replace the leader-epoch file. While the log holds nothing it is not fsynced (a
        broker taking up hundreds of replicas paid four fsyncs each: issue 23); the first
        append makes it durable first, so no byte is ever durable before the epoch that
        wrote it. Raises OSError."""
        empty = self.written_end == 0
        write_leader_epochs(self.directory, data, durable=not empty)
        self._epochs_unsynced = empty

    def append(self, messages) -> int:
        if self._epochs_unsynced:
            try:
                sync_leader_epochs(self.directory)
            except OSError as exc:
                self.append_error = LogWriteError(exc.errno, f"{self.name}: fsync of its leader epochs failed: {exc}")
                raise self.append_error from exc
            self._epochs_unsynced = False
        return super().append(messages)

    @property
    def end_offset(self) -> int:
        """The high watermark: where a caught-up consumer fetches."""
        if self._pending:
            self._reap()
        return self.high_watermark

    def read(self, offset: int, max_size: int) -> FileRegion | None:
        """As Log.read, up to the high watermark; an offset between it and the written end
        gets None, not OffsetOutOfRange: that data will be committed, or cut.

        Unlike 0.7's log, an offset that is not the start of an entry gets OffsetOutOfRange,
        never raw bytes from the middle of one: after a truncation a consumer's offset may
        fall inside the entries copied since from a new leader."""
        if self.first_offset <= offset <= self.written_end and not self._entry_starts_at(offset):
            raise OffsetOutOfRange(f"offset {offset} of {self.name} is not the start of a message "
                                   f"(cut by a truncation to the leader's log?)")
        if self.high_watermark <= offset <= self.written_end and offset >= self.first_offset:
            if max_size < 0:
                raise ValueError(f"negative fetch size {max_size}")
            return None
        return super().read(offset, max_size)

    def read_written(self, offset: int, max_size: int) -> FileRegion | None:
        """Like ``read``, but up to everything written, committed or not: what a leader sends
        its followers. None at the written end. Raises OffsetOutOfRange or InvalidMessage.

        The region holds at least the first whole entry, whatever ``max_size`` (as Kafka's
        fetches do since KIP-74): a stored batch with its values deflated beside it can be
        larger than any follower's fetch size, and a follower given part of an entry can only
        ask again, forever, while it drops out of the ISR."""
        if self._pending:
            self._reap()
        index = bisect_right(self._starts, offset) - 1
        if index < 0 or offset > self.written_end:
            raise OffsetOutOfRange(f"offset {offset} is outside [{self.first_offset}, {self.written_end}] of {self.name}")
        segment = self._segments[index]
        while offset >= segment.start + segment.size:
            if index == len(self._segments) - 1 or max_size <= 0:
                return None
            index += 1  # an empty segment left by a cut: its successor starts at the same offset
            segment = self._segments[index]
        position = offset - segment.start
        length = entry_length(segment.fileno(), position) if max_size > 0 else None
        if length is not None and max_size < 4 + length <= segment.size - position:
            max_size = 4 + length
        return segment.region(position, max_size, written=True)

    def _entry_starts_at(self, offset: int) -> bool:
        if self._pending:
            self._reap()
        index = bisect_right(self._starts, offset) - 1
        segment = self._segments[index]
        while offset - segment.start >= segment.size and index < len(self._segments) - 1:
            index += 1  # an empty segment left by a cut: its successor starts at the same offset
            segment = self._segments[index]
        return segment.entry_starts_at(offset - segment.start)

    def publish_to(self, offset: int) -> None:
        """Let readers see up to ``offset`` (a message boundary, at most the written end);
        wakes held fetches. The high watermark never moves back here."""
        offset = min(offset, self.written_end)
        if offset <= self.high_watermark:
            return
        index = max(bisect_right(self._starts, self.high_watermark) - 1, 0)
        for segment in self._segments[index:]:
            if segment.start >= offset:
                break
            segment.publish(min(offset - segment.start, segment.size))
        self.high_watermark = offset
        self._wake_watchers(False)

    def truncate_to(self, offset: int) -> int:
        """Cut everything at and after ``offset`` (a message boundary on the leader's log
        too): a replica's truncation by leader epoch. Returns the bytes cut. Waits for
        pending flushes first. Raises ValueError for an offset before the log's start, and
        LogWriteError if the disk fails."""
        if offset < self.first_offset:
            raise ValueError(f"cannot cut {self.name} at {offset}, before its start {self.first_offset}")
        end = self.written_end
        if offset >= end:
            return 0
        self.flush()
        while len(self._segments) > 1 and self._segments[-1].start > offset:
            self._segments.pop().delete()
            self._starts.pop()
        newest = self._segments[-1]
        newest.truncate(offset - newest.start)
        self.high_watermark = min(self.high_watermark, offset)
        newest.hide_from(max(self.high_watermark - newest.start, 0))
        self.unflushed_messages = 0
        log.warning("%s: cut %d bytes at offset %d to match its leader's log", self.name, end - offset, offset)
        return end - offset

    def restart_at(self, offset: int) -> None:
        """Drop everything and start empty at ``offset``: a follower whose log ends before the
        start of its leader's (retention deleted what it lacks) can only continue from there.
        Raises LogWriteError if the disk fails."""
        self.flush()
        for segment in self._segments:
            segment.delete()
        self._segments[:] = [Segment(self.directory, offset, now=self._now(), truncate=True)]
        self._starts[:] = [offset]
        self.high_watermark = offset
        self.unflushed_messages = 0
        log.warning("%s: restarted empty at offset %d, the start of its leader's log", self.name, offset)

    def _flushed(self, at_once: bool) -> None:
        if self.on_durable is not None:
            self.on_durable()
