"""The high watermark checkpoint (``replication-offset-checkpoint``), written off the reactor.

Writing it replaces the file atomically: a temporary file, an fsync, a rename, an fsync of the
directory (storage/checkpoints.py). Two fsyncs cost 1-2 ms on this machine's disk, and more
while the fsync process flushes the logs on the same disk; done on the reactor thread once a
second, they stopped every connection for that long (issue 24's tail). Kafka writes the same
file from a scheduler thread (``replica.high.watermark.checkpoint.interval.ms``). So a write
runs through ``run_blocking`` (tap.py: Twisted's thread pool; None: inline, which the
simulation and the unit tests use, deterministic).

Rules:
- one write at a time; a save asked while one is in flight is skipped (the next tick has the
  newer offsets), and one that failed is tried again at the next save;
- ``save(..., at_once=True)`` (the broker stopping) writes inline, on the caller's thread; a
  lock keeps it and a thread's write from touching the temporary file together, and each
  write carries a number, so a write older than the one last done is skipped: the file never
  goes back to older offsets than the last written.

A stale checkpoint is safe: it is what a longer interval gives (a restarted replica truncates
to the epochs it fetches and takes the high watermark from its leader, docs/replication.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from twisted.internet.defer import Deferred

from twisted_broker.storage.checkpoints import write_high_watermarks

log = logging.getLogger(__name__)

RunBlocking = Callable[..., Deferred]  # run_blocking(function, *args): a Deferred of its result


class HighWatermarkCheckpoints:
    """``replication-offset-checkpoint`` of ``log_dir`` (see the module's docstring)."""

    def __init__(self, log_dir: str, run_blocking: RunBlocking | None = None) -> None:
        self.log_dir = log_dir
        self._run_blocking = run_blocking
        self._lock = threading.Lock()  # held by whichever thread writes the file
        self._written = 0  # number of the last write done (under the lock)
        self._numbered = 0  # number of the last write asked for (reactor thread)
        self._in_flight = False
        self.saved: Mapping[tuple[str, int], int] = {}  # what the file holds, as far as the reactor knows

    def save(self, offsets: Mapping[tuple[str, int], int], *, at_once: bool = False) -> None:
        """Write ``offsets`` unless the file holds them already (an idle broker fsyncs nothing)."""
        if not offsets or offsets == self.saved or (self._in_flight and not at_once):
            return
        self._numbered += 1
        if at_once or self._run_blocking is None:
            self._finish(offsets, self._attempt(offsets, self._numbered))
            return
        self._in_flight = True
        self._run_blocking(self._write, offsets, self._numbered).addBoth(self._landed, offsets)

    def _attempt(self, offsets, number: int) -> object:
        try:
            return self._write(offsets, number)
        except OSError as exc:
            return exc

    def _write(self, offsets, number: int) -> bool:
        """Write the file (any thread); False if a newer write was done first."""
        with self._lock:
            if number <= self._written:
                return False
            write_high_watermarks(self.log_dir, offsets)
            self._written = number
            return True

    def _landed(self, result, offsets) -> None:
        self._in_flight = False
        self._finish(offsets, getattr(result, "value", result))  # a Failure's exception

    def _finish(self, offsets, result) -> None:
        if isinstance(result, BaseException):
            log.error("writing the high watermark checkpoint failed: %s", result)
        elif result:
            self.saved = offsets
