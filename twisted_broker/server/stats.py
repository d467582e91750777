"""The statistics the Kafka 0.7 broker publishes as JMX beans, kept for the admin site and debug port.

- ``RequestStats`` is 0.7's SocketServerStats: per request type, counts, a rate over the last
  ``monitoring.period.secs`` window, average and maximum handling time; bytes read and written.
- ``TopicStats`` is BrokerTopicStat, kept per topic and for all topics together: messages and
  bytes in, bytes out, failed produce and fetch requests.
- Flush statistics (LogFlushStats) and per-log figures are read from the logs themselves; the
  per-log message rate (for the admin console; no 0.7 bean) is counted per appended message set.

Nothing here is thread-safe: the reactor thread updates and reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from twisted_broker.storage.log import Log
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.wire.requests import REQUEST_NAMES

LOG_RATE_WINDOW_S = 60.0


class WindowedCounter:
    """Counts events and reports their rate over the last complete window (0.7's SnapshotStats)."""

    def __init__(self, window_seconds: float, now: Callable[[], float]) -> None:
        self._window, self._now = window_seconds, now
        self._window_start = now()
        self._current = 0
        self._previous_rate = 0.0
        self.total = 0

    def add(self, count: int = 1) -> None:
        self._roll()
        self._current += count
        self.total += count

    def rate(self) -> float:
        """Events per second in the last full window (or the current one, before the first ends)."""
        self._roll()
        elapsed = self._now() - self._window_start
        if self._previous_rate or elapsed >= self._window:
            return self._previous_rate
        return self._current / max(elapsed, 1.0)  # not a burst's rate over microseconds

    def _roll(self) -> None:
        now = self._now()
        if now - self._window_start >= self._window:
            windows = int((now - self._window_start) // self._window)
            self._previous_rate = self._current / self._window if windows == 1 else 0.0
            self._current = 0
            self._window_start += windows * self._window


@dataclass
class RequestTypeStats:
    counter: WindowedCounter
    total_seconds: float = 0.0
    max_seconds: float = 0.0

    def snapshot(self) -> dict:
        count = self.counter.total
        return {"count": count, "per_second": self.counter.rate(),
                "avg_ms": self.total_seconds / count * 1000 if count else 0.0,
                "max_ms": self.max_seconds * 1000}


class RequestStats:
    """SocketServerStats: request counts, rates and times per type; bytes read and written."""

    def __init__(self, window_seconds: float, now: Callable[[], float]) -> None:
        self.now = now
        self._by_type = {request_type: RequestTypeStats(WindowedCounter(window_seconds, now))
                         for request_type in REQUEST_NAMES}
        self.bytes_read = WindowedCounter(window_seconds, now)
        self.bytes_written = WindowedCounter(window_seconds, now)
        self.connections = 0
        self.connections_total = 0

    def record(self, request_type: int, seconds: float) -> None:
        stats = self._by_type[request_type]
        stats.counter.add()
        stats.total_seconds += seconds
        if seconds > stats.max_seconds:
            stats.max_seconds = seconds

    def snapshot(self) -> dict:
        return {"requests": {REQUEST_NAMES[t]: s.snapshot() for t, s in self._by_type.items()},
                "bytes_read": self.bytes_read.total, "bytes_read_per_second": self.bytes_read.rate(),
                "bytes_written": self.bytes_written.total,
                "bytes_written_per_second": self.bytes_written.rate(),
                "connections": self.connections, "connections_total": self.connections_total}


@dataclass
class TopicStats:
    """BrokerTopicStat of one topic, or of all topics together."""

    messages_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    failed_produce_requests: int = 0
    failed_fetch_requests: int = 0

    def snapshot(self) -> dict:
        return dict(self.__dict__)


@dataclass
class BrokerStats:
    requests: RequestStats
    all_topics: TopicStats = field(default_factory=TopicStats)
    topics: dict[str, TopicStats] = field(default_factory=dict)
    # (topic, partition) -> messages appended, over the last minute as the console's byte rate.
    log_messages: dict[tuple[str, int], WindowedCounter] = field(default_factory=dict)

    def appended(self, topic: str, partition: int, count: int) -> None:
        """Count a message set appended to a log: one call per set, not per message."""
        counter = self.log_messages.get((topic, partition))
        if counter is None:
            counter = self.log_messages[(topic, partition)] = WindowedCounter(LOG_RATE_WINDOW_S, self.requests.now)
        counter.add(count)

    def topic(self, name: str) -> TopicStats:
        stats = self.topics.get(name)
        if stats is None:
            stats = self.topics[name] = TopicStats()
        return stats


def log_snapshot(log: Log) -> dict:
    """The per-log figures 0.7 exposes (LogStats): size, segments, current offset, appended messages."""
    return {"topic": log.topic, "partition": log.partition, "size": log.size,
            "segments": len(log.segments), "first_offset": log.first_offset,
            "current_offset": log.end_offset, "messages_appended": log.messages_appended}


def flush_snapshot(logs: Iterable[Log]) -> dict:
    """LogFlushStats over all logs: how many fsyncs, their average and maximum time."""
    logs = list(logs)
    count = sum(log.flush_count for log in logs)
    total = sum(log.flush_seconds_total for log in logs)
    return {"flushes": count, "avg_ms": total / count * 1000 if count else 0.0,
            "max_ms": max((log.flush_seconds_max for log in logs), default=0.0) * 1000}


def broker_snapshot(stats: BrokerStats, logs: LogManager) -> dict:
    """Every statistic of the broker, as plain data for the admin site, debug port and metrics."""
    return {"socket_server": stats.requests.snapshot(),
            "all_topics": stats.all_topics.snapshot(),
            "topics": {name: topic.snapshot() for name, topic in sorted(stats.topics.items())},
            "log_flush": flush_snapshot(logs.logs()),
            "logs": [{**log_snapshot(log), "messages_per_second": _log_rate(stats, log)}
                     for log in sorted(logs.logs(), key=lambda log: (log.topic, log.partition))]}


def _log_rate(stats: BrokerStats, log: Log) -> float:
    counter = stats.log_messages.get((log.topic, log.partition))
    return counter.rate() if counter is not None else 0.0  # nothing appended since the start
