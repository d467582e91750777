"""A partition's log: its segments, append with roll and flush policy, reads and offsets.

Offsets are byte positions in the partition (spec 4.2). The segment list is kept sorted by
start; a read binary-searches it (spec 4.3). Appends go to the newest segment, which rolls when
it has grown past ``file_size`` or was first written more than ``roll_ms`` ago (0.7.2 checks
before each append, so a segment overshoots by up to one message set). Appended bytes become
visible to reads and to offsets requests only when a flush (fsync) makes them durable: after
``flush_interval_messages`` messages, when the broker's timer finds the last flush older
than ``flush_interval_ms``, or at once when a reader waits at the visible end
(``flush_for_reader``, ``watch_flush``; group commit: one fsync in flight per log).

A replica's log (replica_log.py) publishes a high watermark instead of its flushes;
``visible_at_append`` (``log.visibility=committed`` on a 0.7 topic) publishes each append at
once, flushed or not.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from twisted_broker.errors import LogWriteError, OffsetOutOfRange
from twisted_broker.storage.flusher import FlushJob, Flusher, InlineFlusher
from twisted_broker.storage.offsets_before import offsets_before
from twisted_broker.storage.segment import FileRegion, Segment
from twisted_broker.codec.kafka07.message_set import ValidatedMessageSet

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LogPolicy:
    """The per-topic settings of one log (0.7's global keys with their per-topic maps applied)."""

    file_size: int = 1024 * 1024 * 1024  # log.file.size
    roll_ms: int = 168 * 3600 * 1000  # log.roll.hours
    flush_interval_messages: int = 500  # log.flush.interval
    flush_interval_ms: int = 3000  # log.default.flush.interval.ms / topic.flush.intervals.ms
    retention_ms: int = 168 * 3600 * 1000  # log.retention.hours
    retention_bytes: int = -1  # log.retention.size; -1 = no size limit


class Log:
    """The log of one topic-partition. Used from one thread; raises LogWriteError on disk errors."""

    def __init__(self, directory: str, topic: str, partition: int, segments: list[Segment], *,
                 policy: LogPolicy, now: Callable[[], float], flusher: Flusher | None = None) -> None:
        self.directory, self.topic, self.partition = directory, topic, partition
        self.policy = policy
        self._now = now
        self._flusher = flusher or InlineFlusher()
        self._pending: deque[tuple[Segment, FlushJob]] = deque()
        self._segments = segments
        self._starts = [segment.start for segment in segments]
        self.unflushed_messages = 0
        self.last_flush_time = now()
        self.messages_appended = 0
        self.flush_count = 0
        self.flush_seconds_total = 0.0
        self.flush_seconds_max = 0.0
        # Set when the disk failed in a way that leaves the newest segment in doubt (a failed
        # fsync, or a failed write that could not be cut back): the log then refuses writes.
        self.write_error: LogWriteError | None = None
        # The last append that failed on disk, even one cut back cleanly (a full disk): the
        # log may take the next write, but replication gives the partition up at once, as
        # Kafka takes a failed log dir offline (replication/log_failures.py).
        self.append_error: LogWriteError | None = None
        # One-shot callbacks for the next time flushed data is published (held fetches).
        self._flush_watchers: list[Callable[[], object]] = []
        # log.visibility=committed on a 0.7 topic: readers see each append at once.
        self.visible_at_append = False

    # -- reading -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(self._segments)

    @property
    def newest_segment(self) -> Segment:
        """The segment appends go to (``segments[-1]`` without copying the list)."""
        return self._segments[-1]

    @property
    def first_offset(self) -> int:
        return self._segments[0].start

    publishes_flushes = True  # a replica's log publishes its high watermark instead (replica_log.py)

    @property
    def end_offset(self) -> int:
        """The offset just past the visible data: where a caught-up consumer fetches."""
        if self._pending:
            self._reap()
        return self._segments[-1].end

    @property
    def written_end(self) -> int:
        """The offset just past everything appended, visible or not (a replica's log end)."""
        newest = self._segments[-1]
        return newest.start + newest.size

    @property
    def flushed_end(self) -> int:
        """The offset just past the durable data."""
        if self._pending:
            self._reap()
        newest = self._segments[-1]
        return newest.start + newest.flushed_size

    @property
    def size(self) -> int:
        """Flushed bytes held in all segments."""
        if self._pending:
            self._reap()
        return sum(segment.flushed_size for segment in self._segments)

    def read(self, offset: int, max_size: int) -> FileRegion | None:
        """The flushed bytes at ``offset``, at most ``max_size``, as a file region to stream.

        Returns None when ``offset`` is the flushed end (nothing new). The region never spans
        two segments and is cut at a message boundary. Raises OffsetOutOfRange for an offset
        before the first segment or past the flushed end (spec 4.3), ValueError for a negative
        ``max_size``, InvalidMessage if the message at ``offset`` is damaged on disk (the region
        of an earlier offset ends before such a message). The caller closes the region.
        """
        if max_size < 0:
            raise ValueError(f"negative fetch size {max_size}")
        if self._pending:
            self._reap()
        segments = self._segments
        index = bisect_right(self._starts, offset) - 1
        if index < 0 or offset > segments[-1].end:
            raise OffsetOutOfRange(f"offset {offset} is outside [{self.first_offset}, {self.end_offset}] of {self.name}")
        segment = segments[index]
        if offset >= segment.end:
            if index == len(segments) - 1:
                return None  # the flushed end of the log
            # Past this segment's flushed end but before the next segment: only possible for
            # an offset inside an unflushed tail, which consumers must not see.
            raise OffsetOutOfRange(f"offset {offset} is not in a flushed segment of {self.name}")
        if max_size == 0:
            return None
        return segment.region(offset - segment.start, max_size)

    def offsets_before(self, time_ms: int, max_count: int) -> list[int]:
        """Offsets of segment starts last written at or before ``time_ms``, newest first;
        -1 is latest (the flushed end), -2 earliest (spec 4.4; storage/offsets_before.py)."""
        if self._pending:
            self._reap()
        return offsets_before(self._segments, self.end_offset, self._now(), time_ms, max_count)

    # -- writing -------------------------------------------------------------------------

    def append(self, messages: ValidatedMessageSet) -> int:
        """Append a validated message set; return the offset it was written at.

        Starts a flush when ``flush_interval_messages`` messages have accumulated. Raises
        LogWriteError if the disk fails (nothing of this set is kept) or the log refuses writes.
        """
        if self._pending:
            self._reap()
        if self.write_error is not None:
            raise LogWriteError(self.write_error.errno, f"{self.name} refuses writes after a disk error: {self.write_error}")
        now = self._now()
        self._maybe_roll(now)
        segment = self._segments[-1]
        offset = segment.start + segment.size
        if len(messages.buffer):
            try:
                segment.append(messages.buffer, now)
            except LogWriteError as exc:
                self.append_error = exc
                if segment.damaged:
                    self.write_error = exc
                raise
        if self.visible_at_append:
            segment.publish(segment.size)
            self._wake_watchers(False)
        self.messages_appended += messages.message_count
        self.unflushed_messages += messages.message_count
        if self.unflushed_messages >= self.policy.flush_interval_messages:
            self.start_flush()
        elif self._flush_watchers:
            self.flush_for_reader()  # a reader waits for it: now, whatever the policy's count
        return offset

    def append_indexed(self, messages: ValidatedMessageSet, entry: Callable[[int, int], object]) -> int:
        """Append as ``append`` does, and note what was appended in its segment's offset index
        (``entry(position, end position)`` in the segment file: an offset_index.Entry), so
        that modern offset lookups need not walk it. Returns the offset it was written at."""
        offset = self.append(messages)
        segment = self._segments[-1]
        position = offset - segment.start
        segment.offset_index.note_appended(entry(position, position + len(messages.buffer)))
        return offset

    def start_flush(self) -> None:
        """Have everything written so far fsynced by the flusher; don't wait for it.

        A request made while a job is running is granted by that job's next round, which the
        flusher starts as soon as the current fsync returns (group commit). So a flush policy
        of every message costs one fsync per fsync time, not one per message queued.
        """
        segment = self._segments[-1]
        if segment.size > segment.flushed_size and not (
                self._pending and self._pending[-1][0] is segment and self._pending[-1][1].request_more()):
            self._submit(segment)
        self.unflushed_messages = 0
        self.last_flush_time = self._now()

    def _submit(self, segment: Segment) -> None:
        job = self._flusher.submit(segment.fileno(), lambda: segment.size, self)
        self._pending.append((segment, job))
        if job.finished.is_set():  # an inline flusher: publish at once
            self._reap()

    def flush(self) -> None:
        """fsync everything written and make it visible before returning. Raises LogWriteError."""
        self.start_flush()
        for _segment, job in self._pending:
            job.wait()  # nothing asks for more rounds while this thread waits
        self._reap()
        if self.write_error is not None:
            raise self.write_error

    def publish_flushed(self) -> None:
        """Publish finished fsyncs now: where the broker hears of them, outside any log call."""
        if self._pending:
            self._reap(True)

    def flush_for_reader(self) -> None:
        """A reader waits at the visible end: fsync what is written now (in a flush in flight's
        next round), not at the policy's count or tick; not where readers wait for no flush."""
        if self.publishes_flushes and not self.visible_at_append and self.write_error is None:
            self.start_flush()

    def watch_flush(self, callback: Callable[[bool], object]) -> None:
        """Call ``callback(at_once)`` once, the next time a flush makes more data visible;
        the flush it waits for is asked for now, and one after every append while it waits.
        ``at_once`` True: from ``publish_flushed``, outside any other log call: it may answer
        there and then. False: inside the log call that found the flush (a read, an append,
        the flush timer): it must only schedule work, not read or write this log itself."""
        self._flush_watchers.append(callback)
        self.flush_for_reader()

    def unwatch_flush(self, callback: Callable[[bool], object]) -> None:
        if callback in self._flush_watchers:
            self._flush_watchers.remove(callback)

    def _reap(self, at_once: bool = False) -> None:
        """Publish what the flusher has made durable, oldest job first, so visibility only
        moves forward; drop the jobs that have finished (``at_once``: see watch_flush).

        A failed fsync is recorded, not raised: after it the kernel may have dropped the dirty
        pages, so nothing past the durable size can be trusted and the log refuses writes.
        """
        pending = self._pending
        published = False
        while pending:
            segment, job = pending[0]
            finished = job.finished.is_set()  # before the size: a finished job's size is final
            size = job.size
            if size > segment.flushed_size:
                segment.flushed(size, publish=self.publishes_flushes)
                published = True
            self._count_rounds(job)
            if not finished:
                break
            pending.popleft()
            if job.error is not None:
                error = job.error
                self.write_error = LogWriteError(error.errno, f"{segment.path}: fsync failed: {error.strerror}")
                log.error("%s: %s; the log refuses writes from now on", self.name, self.write_error)
                pending.clear()
                break
        if published:
            self._flushed(at_once)

    def _flushed(self, at_once: bool) -> None:
        """More data is durable (and, under 0.7's rule, visible)."""
        self._wake_watchers(at_once)

    def _wake_watchers(self, at_once: bool) -> None:
        if self._flush_watchers:
            watchers, self._flush_watchers = self._flush_watchers, []
            for callback in watchers:
                callback(at_once)

    def _count_rounds(self, job: FlushJob) -> None:
        rounds, seconds = job.rounds, job.seconds
        if rounds != job.counted_rounds:
            self.flush_count += rounds - job.counted_rounds
            self.flush_seconds_total += seconds - job.counted_seconds
            self.flush_seconds_max = max(self.flush_seconds_max, job.seconds_max)
            job.counted_rounds, job.counted_seconds = rounds, seconds

    def flush_if_due(self) -> bool:
        """Publish finished flushes; start one if data waits and the last is ``flush_interval_ms`` old."""
        if self._pending:
            self._reap()
        segment = self._segments[-1]
        if segment.size == segment.flushed_size:
            return False
        if (self._now() - self.last_flush_time) * 1000 < self.policy.flush_interval_ms:
            return False
        self.start_flush()
        return True

    def _maybe_roll(self, now: float) -> None:
        newest = self._segments[-1]
        if newest.size > self.policy.file_size or (
                newest.first_append_time is not None
                and (now - newest.first_append_time) * 1000 > self.policy.roll_ms):
            self.roll()

    def roll(self) -> Segment:
        """Flush the newest segment and start a new one at the end offset.

        The flush is waited for (once per segment): only the newest segment may then hold
        unflushed bytes, which keeps reads and offsets simple.
        """
        self.flush()
        end = self.written_end  # in a replica's log, more than what is visible
        # A stale file of that name (from a crash after a roll) holds nothing we kept: truncate.
        segment = Segment(self.directory, end, now=self._now(), truncate=True, previous=self._segments[-1])
        self._segments.append(segment)
        self._starts.append(end)
        log.info("rolled %s: new segment at offset %d", self.name, end)
        return segment

    # -- retention -----------------------------------------------------------------------

    def delete_old_segments(self, now: float) -> list[Segment]:
        """Delete the segments that retention (time, then size) lets go; return them (spec 4.7).

        The newest segment is deleted only after a roll has put an empty segment at the end
        offset, so the partition keeps its offsets; if it is already empty it is kept and
        touched instead.
        """
        if self._pending:
            self._reap()
        segments = self._segments
        expire_before = now - self.policy.retention_ms / 1000
        count = 0
        while count < len(segments) and segments[count].modified_time < expire_before:
            count += 1
        if self.policy.retention_bytes >= 0:
            # Over what the time pass keeps: 0.7 runs the size pass after the time pass.
            excess = sum(segment.flushed_size for segment in segments[count:]) - self.policy.retention_bytes
            if excess >= 0:
                for segment in segments[count:]:
                    if excess - segment.flushed_size < 0:
                        break
                    excess -= segment.flushed_size
                    count += 1
        if count == 0:
            return []
        if count == len(segments):
            if segments[-1].size == 0:
                segments[-1].touch(now)
                count -= 1
            else:
                self.roll()
        doomed = segments[:count]
        del segments[:count]
        del self._starts[:count]
        for segment in doomed:
            segment.delete()
        return doomed

    def close(self) -> None:
        """Flush and close every segment."""
        try:
            if self.write_error is None:
                self.flush()
        finally:
            for segment in self._segments:
                segment.close()
