"""Where the fsyncs of the flush policy run: inline, or on one background thread (the third
place, a process of their own, is process_flusher.py, the broker's default).

An fsync of a 2 MB flush interval takes milliseconds; on the append path it would halve the
log's throughput and stall every connection of the reactor. So a log hands each flush to a
flusher (``submit``, which returns the job) and keeps appending; the job's bytes become
visible to readers only when the log, on its own thread, publishes what the job reports as
durable (``Log`` publishes jobs in submission order). ``ThreadFlusher`` is the one thread this
package starts, and ``ProcessFlusher`` the one process: the broker starts and stops the one
``log.flush.worker`` names with its services; nothing else in storage runs off the caller's
thread.

A job fsyncs what the segment holds when its fsync *starts*, not when it was submitted, and
the log may ask a running job for one more round (``request_more``): the flusher thread then
fsyncs again at once. Under a steady stream of appends this keeps one fsync after another
going on the flusher thread, without a round trip through the reactor between them; each
round's durable size is reported as it finishes.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)


def timed_fdatasync(fd: int) -> float:
    """fdatasync ``fd``; return the seconds it took. Raises OSError."""
    started = time.perf_counter()
    os.fdatasync(fd)
    return time.perf_counter() - started


class RoundFigures:
    """A job's per-round figures for LogFlushStats; the log counts them as it publishes."""

    __slots__ = ()  # the attributes are the subclasses' slots

    def count_round(self, seconds: float) -> None:
        self.rounds += 1
        self.seconds += seconds
        self.seconds_max = max(self.seconds_max, seconds)


class FlushJob(RoundFigures):
    """fsyncs of one segment, through a descriptor of its own, in one or more rounds.

    ``written()`` (the segment's size) is read at the start of each round: the bytes written
    by then are durable when the round's fdatasync returns, and appends end on message
    boundaries, so every ``size`` it reports is one. The duplicate descriptor keeps the job
    safe if retention or close shuts the segment's own descriptor (whose number the OS might
    hand to another file) before the job runs.
    """

    __slots__ = ("fd", "_written", "_lock", "_again", "_closing", "size", "error", "finished",
                 "rounds", "seconds", "seconds_max", "counted_rounds", "counted_seconds", "log")

    def __init__(self, fd: int, written: Callable[[], int], owner: object = None) -> None:
        self.fd = os.dup(fd)
        self._written = written
        self._lock = threading.Lock()
        self._again = False  # a round was asked for after the current one read ``written()``
        self._closing = False  # the last round has begun its end: no more can be asked for
        self.size = 0  # durable bytes so far (0: no round finished yet)
        self.error: OSError | None = None
        self.finished = threading.Event()
        self.rounds, self.seconds, self.seconds_max = 0, 0.0, 0.0
        self.counted_rounds, self.counted_seconds = 0, 0.0
        self.log = owner  # the Log that submitted it, for the flusher's callbacks

    def request_more(self) -> bool:
        """Ask for another round covering what has been written since this one began.

        False once the job is ending: the caller must submit a new job.
        """
        with self._lock:
            if self._closing:
                return False
            self._again = True
            return True

    def wait(self) -> None:
        """Until the job has ended (on a thread other than the flusher's)."""
        self.finished.wait()

    def run(self, on_round: Callable[[FlushJob], object] | None = None) -> None:
        """Do the rounds; ``on_round(job)`` after each. Any thread; never raises (an error
        is kept for the log to see, and ends the job)."""
        try:
            while True:
                with self._lock:
                    self._again = False
                    size = self._written()
                try:
                    seconds = timed_fdatasync(self.fd)
                except OSError as exc:
                    self.error = exc
                    return
                self.count_round(seconds)
                with self._lock:
                    self.size = size
                    if not self._again or self._written() == size:
                        self._closing = True
                        return
                if on_round is not None:
                    on_round(self)
        finally:
            with self._lock:
                self._closing = True
            os.close(self.fd)
            self.finished.set()
            if on_round is not None:
                on_round(self)


class Flusher(Protocol):
    def submit(self, fd: int, written: Callable[[], int], owner: object = None) -> FlushJob:
        """Start a job fsyncing ``fd`` up to ``written()``; ``owner`` is kept as ``job.log``."""

    def close(self) -> None: ...


class InlineFlusher:
    """Runs each job at once on the caller's thread (Kafka 0.7's way; tools and tests)."""

    def submit(self, fd: int, written: Callable[[], int], owner: object = None) -> FlushJob:
        job = FlushJob(fd, written, owner)
        job.run()
        return job

    def close(self) -> None:
        pass


class ThreadFlusher:
    """Runs jobs one at a time, in submission order, on a background thread."""

    def __init__(self, name: str = "log-flusher", on_flushed: Callable[[FlushJob], object] | None = None) -> None:
        # on_flushed(job) is called on the flusher thread after each round of a job, e.g. to
        # have the reactor (reactor.callFromThread) publish the new durable size.
        self._jobs: queue.SimpleQueue[FlushJob | None] = queue.SimpleQueue()
        self._on_flushed = on_flushed
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fd: int, written: Callable[[], int], owner: object = None) -> FlushJob:
        job = FlushJob(fd, written, owner)
        self._jobs.put(job)
        return job

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job.run(self._on_flushed)
            except Exception:  # noqa: BLE001 - a bug in a callback must not stop every later flush
                log.exception("flusher: %s failed", job)

    def close(self) -> None:
        """Finish the queued jobs and stop the thread."""
        self._jobs.put(None)
        self._thread.join()
