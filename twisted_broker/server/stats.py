"""The statistics the Kafka 0.7 broker publishes as JMX beans, kept for the admin site and debug port.

- ``RequestStats`` is 0.7's SocketServerStats: per request type, counts, a rate over the last
  ``monitoring.period.secs`` window, average and maximum handling time; bytes read and written.
  The modern listener keeps one of its own, named by Kafka's API names (its api keys reuse 0.7's
  type numbers), which ``broker_snapshot`` adds as ``kafka_listener``.
- ``TopicStats`` is BrokerTopicStat, kept per topic and for all topics together: messages and
  bytes in, bytes and (estimated, see ``record_fetched``) messages out, failed produce and
  fetch requests.
- ``ConnectionStats`` is one open Kafka-protocol connection as ZooKeeper's ``cons`` shows its
  sessions: requests, bytes, last activity. ``RequestStats`` keeps the open ones.
- Flush statistics (LogFlushStats) and per-log figures are read from the logs themselves; the
  per-log message rate (for the admin console; no 0.7 bean) is counted per appended message set.
- ``replication_snapshot`` reads replication's own counters and each replica's role, ISR,
  high watermark and lag (docs/replication.md) as plain data, as ``broker_snapshot`` does the
  0.7 beans.

Nothing here is thread-safe: the reactor thread updates and reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from twisted_broker.storage.log import Log
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.codec.kafka07.replication import ALL_REQUEST_NAMES
from twisted_broker.codec.kafka07.requests import REQUEST_NAMES

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
        if self._now() - self._window_start >= self._window:  # per event: no call unless it rolls
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


@dataclass(eq=False)
class ConnectionStats:
    """The figures of one open Kafka-protocol connection (the debug port's ``cons``).

    The protocol counts into it; ``queued`` and ``reading`` ask the protocol about now: the
    complete requests waiting behind the one being served, and whether it reads its socket
    (not while a response streams to a pipelining peer or a big request waits for the budget).
    Times are seconds of the stats' clock.
    """

    host: str
    port: int
    established_s: float
    last_activity_s: float
    requests: int = 0  # received and handled (a held fetch counts once it is answered)
    responses: int = 0  # sent: produce requests have none
    bytes_received: int = 0
    bytes_sent: int = 0
    last_request: str = "NA"  # the last request's type as REQUEST_NAMES spells it; ZooKeeper's NA before one
    queued: Callable[[], int] = lambda: 0
    reading: Callable[[], bool] = lambda: True


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
    """SocketServerStats: request counts, rates and times per type; bytes read and written.

    ``names`` spells the types (0.7's and replication's by default); the types of ``always``
    are listed from the start (0.7's by default), the others once a request of theirs is served.
    """

    def __init__(self, window_seconds: float, now: Callable[[], float], *,
                 names: Mapping[int, str] = ALL_REQUEST_NAMES, always: Iterable[int] = REQUEST_NAMES) -> None:
        self.now = now
        self._window_seconds = window_seconds
        self._names = names
        self._by_type = {request_type: RequestTypeStats(WindowedCounter(window_seconds, now))
                         for request_type in always}
        self.bytes_read = WindowedCounter(window_seconds, now)
        self.bytes_written = WindowedCounter(window_seconds, now)
        self.now = now
        self.started_s = now()  # made with the broker: its uptime starts here
        self.connections_total = 0
        # SASL logins refused (security/sasl.py's REFUSED: bad credentials or a bad token),
        # on the listeners of today's clients (docs/security.md, "Failures").
        self.failed_authentications = 0
        # Quotas (docs/security.md): (quota type, user, client id of the rate's entity) ->
        # [throttled answers, their throttle times' sum in ms]; connections refused by
        # max.connections.per.ip.
        self.throttles: dict[tuple[str, str, str], list[int]] = {}
        self.refused_connections: Callable[[], int] = lambda: 0
        # Insertion-ordered, so ``cons`` lists connections oldest first.
        self.open_connections: dict[ConnectionStats, None] = {}

    def connection_opened(self, host: str, port: int) -> ConnectionStats:
        """Count a new connection and return the figures its protocol keeps until it closes."""
        now = self.now()
        connection = ConnectionStats(host, port, established_s=now, last_activity_s=now)
        self.open_connections[connection] = None
        self.connections_total += 1
        return connection

    def connection_closed(self, connection: ConnectionStats) -> None:
        self.open_connections.pop(connection, None)

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self.open_connections)

    def throttled(self, quota_type: str, user: str, client_id: str, throttle_ms: int) -> None:
        """Count one answer throttled by a quota of ``quota_type`` (produce, fetch)."""
        figures = self.throttles.setdefault((quota_type, user, client_id), [0, 0])
        figures[0] += 1
        figures[1] += throttle_ms

    def record(self, request_type: int, seconds: float, count: int = 1) -> None:
        """Count ``count`` requests of one type served in ``seconds`` (a run served at once
        counts each at their average for the maximum)."""
        stats = self._by_type.get(request_type)
        if stats is None:
            stats = self._by_type[request_type] = RequestTypeStats(WindowedCounter(self._window_seconds, self.now))
        stats.counter.add(count)
        stats.total_seconds += seconds
        if seconds > stats.max_seconds * count:
            stats.max_seconds = seconds / count

    def snapshot(self) -> dict:
        names = self._names
        return {"requests": {names.get(t, str(t)): s.snapshot() for t, s in self._by_type.items()},
                "bytes_read": self.bytes_read.total, "bytes_read_per_second": self.bytes_read.rate(),
                "bytes_written": self.bytes_written.total,
                "bytes_written_per_second": self.bytes_written.rate(),
                "connections": self.connections, "connections_total": self.connections_total,
                "failed_authentications": self.failed_authentications,
                "refused_connections": self.refused_connections(),
                "throttles": [{"quota": quota, "user": user, "client_id": client_id, "throttled": count,
                               "throttle_time_ms": total_ms}
                              for (quota, user, client_id), (count, total_ms) in sorted(self.throttles.items())]}


@dataclass
class TopicStats:
    """BrokerTopicStat of one topic, or of all topics together."""

    messages_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    messages_out: float = 0.0  # an estimate: see record_fetched
    failed_produce_requests: int = 0
    failed_fetch_requests: int = 0

    def snapshot(self) -> dict:
        return {**self.__dict__, "messages_out": round(self.messages_out)}


@dataclass
class BrokerStats:
    requests: RequestStats
    all_topics: TopicStats = field(default_factory=TopicStats)
    topics: dict[str, TopicStats] = field(default_factory=dict)
    # (topic, partition) -> messages appended, over the last minute as the console's byte rate.
    log_messages: dict[tuple[str, int], WindowedCounter] = field(default_factory=dict)

    def produced(self, topic: str, partition: int, messages: int, size: int) -> None:
        """Count what one produce appended to a partition: its topic's and all topics'
        messages and bytes in, and the partition's message rate. The one place every produce
        path (0.7, replicated 0.7, ProduceAck, today's Produce) counts its appends."""
        stats = self.topics.get(topic) or self.topic(topic)
        stats.messages_in += messages
        stats.bytes_in += size
        all_topics = self.all_topics
        all_topics.messages_in += messages
        all_topics.bytes_in += size
        counter = self.log_messages.get((topic, partition))
        if counter is None:
            self.appended(topic, partition, messages)
        else:
            counter.add(messages)

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

    def record_fetched(self, topic: str, length: int) -> None:
        """Count ``length`` bytes of ``topic``'s log sent by a fetch, and the messages in them.

        Fetched regions stream from the segment files by sendfile and are never parsed, so
        counting their messages would add per-message work to the fetch path. Messages out are
        estimated instead: the bytes times the topic's messages per byte produced since the
        broker started (the inner messages of compressed wrappers included, as in messages
        in), or all topics' when nothing was produced to this topic. Exact when a topic's
        messages are of one size; none are counted before anything has been produced since
        start. Never decreases: each fetch adds at the ratio of its time.
        """
        topic_stats = self.topic(topic)
        source = topic_stats if topic_stats.bytes_in else self.all_topics
        messages = length * source.messages_in / source.bytes_in if source.bytes_in else 0.0
        for stats in (topic_stats, self.all_topics):
            stats.bytes_out += length
            stats.messages_out += messages


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


def broker_snapshot(stats: BrokerStats, logs: LogManager, kafka_listener: RequestStats | None = None) -> dict:
    """Every statistic of the broker, as plain data for the admin site, debug port and metrics.

    ``kafka_listener``: the modern listener's request figures (None: no such listener here).
    """
    return {"socket_server": stats.requests.snapshot(),
            "kafka_listener": kafka_listener.snapshot() if kafka_listener is not None else None,
            "all_topics": stats.all_topics.snapshot(),
            "topics": {name: topic.snapshot() for name, topic in sorted(stats.topics.items())},
            "log_flush": flush_snapshot(logs.logs()),
            "logs": [{**log_snapshot(log), "messages_per_second": _log_rate(stats, log)}
                     for log in sorted(logs.logs(), key=lambda log: (log.topic, log.partition))]}


def _log_rate(stats: BrokerStats, log: Log) -> float:
    counter = stats.log_messages.get((log.topic, log.partition))
    return counter.rate() if counter is not None else 0.0  # nothing appended since the start


def replication_snapshot(manager, controller, fetchers) -> dict:
    """This broker's replication figures, as plain data for the admin site, debug port and metrics.

    ``manager``, ``controller`` and ``fetchers`` are the ReplicationService's. Each replica's
    ``lag_bytes`` is, on a follower, the bytes it is behind what its leader last said its log end
    was (Kafka's replica-fetcher lag, measured by the follower); ``follower_lag_bytes`` is, on a
    leader, each follower's distance from the leader's log end (None: not fetched yet).
    ``offline_partitions`` is the controller's count, 0 on every other broker (as Kafka's).
    """
    lag_by_name = fetchers.lag()
    replicas = []
    for (topic, partition), replica in sorted(manager.replicas.items()):
        leader = replica.leader
        state = manager.cluster.state(topic, partition)
        isr = leader.isr if leader is not None else state.isr if state is not None else ()
        replicas.append({
            "topic": topic, "partition": partition, "role": replica.role.value, "fenced": replica.fenced,
            "leader": replica.leader_id, "leader_epoch": replica.leader_epoch,
            "replicas": list(manager.cluster.replicas(topic, partition)), "isr": list(isr),
            "high_watermark": replica.log.end_offset, "log_end": replica.log.written_end,
            "lag_bytes": lag_by_name.get(replica.name),
            "follower_lag_bytes": dict(sorted(leader.follower_lag().items())) if leader is not None else {}})
    follower_lags = [row["lag_bytes"] for row in replicas if row["lag_bytes"] is not None]
    return {
        "leader_count": manager.leader_count(), "under_replicated_partitions": manager.under_replicated(),
        "isr_shrinks": manager.isr_shrinks, "isr_expands": manager.isr_expands,
        "not_enough_replicas": manager.not_enough_replicas,
        # replication's events that raised (logged, the others handled), replicas whose log
        # failed here, controller writes refused by a newer controller's epoch (issue 22)
        "event_errors": manager.event_errors + manager.cluster.callback_errors,
        "offline_replicas": len(manager.offline.partitions),
        "follower_lag_max_bytes": max(follower_lags, default=0),
        "controller": {"active": controller.active, "broker_id": controller.controller_id,
                       "epoch": controller.epoch if controller.active else None,
                       "elections": controller.elections, "fenced_writes": controller.fenced_writes,
                       "offline_partitions": controller.offline_partitions if controller.active else 0},
        "replicas": replicas}
