"""Where the fsyncs of the flush policy run: inline, or on one background thread.

An fsync of a 2 MB flush interval takes milliseconds; on the append path it would halve the
log's throughput and stall every connection of the reactor. So a log hands each flush to a
flusher as a ``FlushJob`` and keeps appending; the job's bytes become visible to readers only
when the log, on its own thread, finds the job finished (``Log`` reaps finished jobs in
submission order). ``ThreadFlusher`` is the one thread this package starts: the broker starts
and stops it with its services; nothing else in storage runs off the caller's thread.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Protocol


class FlushJob:
    """fsync of one segment up to ``size`` bytes, through a descriptor of its own.

    The duplicate descriptor keeps the job safe if retention or close shuts the segment's
    own descriptor (whose number the OS might hand to another file) before the job runs.
    """

    __slots__ = ("fd", "size", "error", "finished", "seconds", "log")

    def __init__(self, fd: int, size: int) -> None:
        self.fd, self.size = os.dup(fd), size
        self.error: OSError | None = None
        self.finished = threading.Event()
        self.seconds = 0.0  # how long the fsync took (LogFlushStats)
        self.log = None  # the Log that submitted it, for on_finished callbacks

    def run(self) -> None:
        """Do the fsync. Any thread; never raises (the error is kept for the log to see)."""
        started = time.perf_counter()
        try:
            os.fdatasync(self.fd)
            self.seconds = time.perf_counter() - started
        except OSError as exc:
            self.error = exc
        finally:
            os.close(self.fd)
            self.finished.set()


class Flusher(Protocol):
    def submit(self, job: FlushJob) -> None: ...

    def close(self) -> None: ...


class InlineFlusher:
    """Runs each job at once on the caller's thread (Kafka 0.7's way; tools and tests)."""

    def submit(self, job: FlushJob) -> None:
        job.run()

    def close(self) -> None:
        pass


class ThreadFlusher:
    """Runs jobs one at a time, in submission order, on a background thread."""

    def __init__(self, name: str = "log-flusher", on_finished: Callable[[FlushJob], object] | None = None) -> None:
        # on_finished(job) is called on the flusher thread after each job, e.g. to have the
        # reactor (reactor.callFromThread) publish the new flushed size and start the next.
        self._jobs: queue.SimpleQueue[FlushJob | None] = queue.SimpleQueue()
        self._on_finished = on_finished
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: FlushJob) -> None:
        self._jobs.put(job)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            job.run()
            if self._on_finished is not None:
                self._on_finished(job)

    def close(self) -> None:
        """Finish the queued jobs and stop the thread."""
        self._jobs.put(None)
        self._thread.join()
