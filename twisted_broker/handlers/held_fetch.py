"""Fetches held while their consumer is caught up (the broker's ``fetch.wait.max.ms``).

Kafka 0.7 answers a fetch at the flushed end of a log at once, with nothing; the consumer
then sleeps (``fetcher.backoff.ms``) and asks again, so a new message waits for its flush
and then for the consumer's next poll, and an idle consumer keeps the broker busy with
empty fetches. With ``fetch.wait.max.ms`` above 0 the broker instead holds a Fetch or
MultiFetch whose every partition is caught up until a flush publishes data in one of them,
or the wait runs out, and only then answers it, in the usual way. The bytes on the wire
stay 0.7's; only the moment of the answer changes, so unmodified 0.7 clients work (they
see their empty answer later, then sleep as they always did). 0, the default, is 0.7's
behaviour.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from twisted_broker.storage.log import Log

log = logging.getLogger(__name__)


class HeldFetch:
    """One held request: ``resume()`` runs once, when a flush of one of ``logs`` is
    published, or after ``wait_s`` seconds, unless cancelled first.

    Published where the broker hears of the flush (the fsync process's reply, storage/log.py's
    ``publish_flushed``), it is answered there, in the same reactor turn: no timer, no
    second turn. Published from inside another log call (a read that reaps a finished flush,
    an inline flusher's append), it is answered from the reactor's next step.
    """

    __slots__ = ("_logs", "_resume", "_timer")

    def __init__(self, clock, logs: Sequence[Log], resume: Callable[[], object], wait_s: float) -> None:
        self._logs = logs
        self._resume: Callable[[], object] | None = resume
        self._timer = clock.callLater(wait_s, self._fire)
        for log_ in logs:
            log_.watch_flush(self._published)

    def _published(self, at_once: bool) -> None:
        if at_once:
            if self._timer.active():
                self._timer.cancel()
            try:
                self._fire()
            except Exception:  # noqa: BLE001 - as the reactor does with a timer's: the other
                log.exception("answering a held fetch failed")  # watchers, flushes go on
        elif self._timer.active():
            # Inside the log's publishing, possibly in the middle of another connection's
            # request: only move the timer, answer from a clean reactor step.
            self._timer.reset(0)

    def _fire(self) -> None:
        resume, self._resume = self._resume, None
        self._unwatch()
        if resume is not None:
            resume()

    def cancel(self) -> None:
        """The connection went away: never resume."""
        self._resume = None
        if self._timer.active():
            self._timer.cancel()
        self._unwatch()

    def _unwatch(self) -> None:
        for log_ in self._logs:
            log_.unwatch_flush(self._published)
