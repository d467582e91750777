"""The debug port's commands about logs and statistics: ``stats``, ``topics``, ``partitions``,
``offsets`` and ``flush`` (handlers/debug/commands.py dispatches to them).

All read-only except ``flush``, which starts an fsync of each log and answers once the
flusher (process or thread) has finished, polling instead of blocking the reactor. Reactor
thread only.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred

from twisted_broker.errors import InvalidTopic, WrongPartition
from twisted_broker.handlers.debug.text import (
    DebugCommandError, format_pairs, format_table, integer_argument, partition_argument, quoted_input,
)
from twisted_broker.server.stats import BrokerStats, broker_snapshot
from twisted_broker.codec.kafka07.requests import EARLIEST_TIME, LATEST_TIME
from twisted_broker.storage.log import Log
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.storage.segment import Segment

FLUSH_POLL_S = 0.01  # how often ``flush`` looks whether the flusher thread is done
_TIME_NAMES = {"latest": LATEST_TIME, "earliest": EARLIEST_TIME}


class LogCommands:
    """``stats``, ``topics``, ``partitions``, ``offsets`` and ``flush`` on one broker's logs.

    Each takes the command's arguments (already counted) and returns its answer's lines, or
    a Deferred of them (``flush``); ``clock`` provides callLater and seconds; ``broker_id``
    is the BROKER a ``BROKER-P`` partition argument must name.
    """

    def __init__(self, logs: LogManager, stats: BrokerStats, *, clock, broker_id: int,
                 flush_timeout_s: float) -> None:
        self._logs, self._stats, self._clock = logs, stats, clock
        self._broker_id = broker_id
        self._flush_timeout_s = flush_timeout_s

    def stats(self, args: list[str]) -> list[str]:
        snapshot = broker_snapshot(self._stats, self._logs)
        socket_server = snapshot["socket_server"]
        lines = ["socket server", *format_pairs([
            ("bytes read", socket_server["bytes_read"]),
            ("bytes read per second", socket_server["bytes_read_per_second"]),
            ("bytes written", socket_server["bytes_written"]),
            ("bytes written per second", socket_server["bytes_written_per_second"]),
            ("connections", socket_server["connections"]),
            ("connections total", socket_server["connections_total"])], indent="  ")]
        lines += ["requests", *format_table(
            ["type", "count", "per second", "avg ms", "max ms"],
            [(name, r["count"], r["per_second"], r["avg_ms"], r["max_ms"])
             for name, r in socket_server["requests"].items()], indent="  ")]
        all_topics = snapshot["all_topics"]
        lines += ["all topics", *format_pairs([(name.replace("_", " "), value)
                                                for name, value in all_topics.items()], indent="  ")]
        flush = snapshot["log_flush"]
        lines += ["log flush", *format_pairs([("flushes", flush["flushes"]), ("avg ms", flush["avg_ms"]),
                                              ("max ms", flush["max_ms"])], indent="  ")]
        lines.append("topics")
        if snapshot["topics"]:
            lines += format_table(
                ["topic", "messages in", "bytes in", "bytes out", "failed produce", "failed fetch"],
                [(name, t["messages_in"], t["bytes_in"], t["bytes_out"], t["failed_produce_requests"],
                  t["failed_fetch_requests"]) for name, t in snapshot["topics"].items()], indent="  ")
        else:
            lines.append("  (none)")
        lines.append("logs")
        if snapshot["logs"]:
            lines += format_table(
                ["log", "bytes", "segments", "first offset", "current offset", "messages appended"],
                [(f"{s['topic']}-{s['partition']}", s["size"], s["segments"], s["first_offset"],
                  s["current_offset"], s["messages_appended"]) for s in snapshot["logs"]], indent="  ")
        else:
            lines.append("  (none)")
        return lines

    def topics(self, args: list[str]) -> list[str]:
        by_topic: dict[str, list[Log]] = {}
        for log_ in self._logs.logs():
            by_topic.setdefault(log_.topic, []).append(log_)
        if not by_topic:
            return ["(no topics)"]
        return format_table(
            ["topic", "partitions", "configured", "bytes", "messages appended"],
            [(topic, len(logs), self._logs.partitions_for(topic), sum(log_.size for log_ in logs),
              sum(log_.messages_appended for log_ in logs)) for topic, logs in sorted(by_topic.items())])

    def partitions(self, args: list[str]) -> list[str]:
        topic = args[0]
        logs = {log_.partition: log_ for log_ in self._logs.logs() if log_.topic == topic}
        if not logs:
            raise DebugCommandError(f"no topic {quoted_input(topic)} on this broker")
        rows = []
        for partition in sorted(set(logs) | set(range(self._logs.partitions_for(topic)))):
            log_ = logs.get(partition)
            if log_ is None:
                rows.append((partition, "-", "-", "-", "-", "-", "-", "no log yet"))
                continue
            end = log_.end_offset  # first: it publishes finished flushes
            newest = log_.newest_segment
            state = "ok" if log_.write_error is None else f"refuses writes: {log_.write_error}"
            rows.append((partition, log_.first_offset, end, log_.size, len(log_.segments),
                         newest.size - newest.flushed_size, log_.messages_appended, state))
        return format_table(["partition", "first offset", "end offset", "bytes", "segments",
                             "unflushed bytes", "messages appended", "state"], rows)

    def offsets(self, args: list[str]) -> list[str]:
        topic, partition = args[0], partition_argument(args[1], self._broker_id)
        time_ms = _time_argument(args[2]) if len(args) > 2 else LATEST_TIME
        max_count = integer_argument(args[3], "MAX", 0, 100_000) if len(args) > 3 else 1
        try:
            log_ = self._logs.get_log(topic, partition)
        except (InvalidTopic, WrongPartition) as exc:
            raise DebugCommandError(str(exc)) from None
        if log_ is None:  # as the broker answers an offsets request (0.7)
            offsets = [0][:max_count] if time_ms in (LATEST_TIME, EARLIEST_TIME) else []
        else:
            offsets = log_.offsets_before(time_ms, max_count)
        return format_table(["offset"], [(offset,) for offset in offsets]) if offsets else ["(no offsets)"]

    # -- flush ---------------------------------------------------------------------------------

    def flush(self, args: list[str]) -> Deferred:
        """Start an fsync of every log (of a topic) and answer once all have finished.

        ``Log.flush`` would block the reactor while the fsync runs; instead this polls
        every ``FLUSH_POLL_S`` until each newest segment's flushed size reaches its size at the
        start (a roll or retention in between flushes it too).
        """
        topic = args[0] if args else None
        logs = sorted((log_ for log_ in self._logs.logs() if topic is None or log_.topic == topic),
                      key=lambda log_: (log_.topic, log_.partition))
        if topic is not None and not logs:
            raise DebugCommandError(f"no topic {quoted_input(topic)} on this broker")
        targets = []
        for log_ in logs:
            if log_.write_error is None:
                log_.start_flush()
                targets.append((log_, log_.newest_segment, log_.newest_segment.size))
        done: Deferred[list[str]] = Deferred()
        started = self._clock.seconds()

        def check() -> None:
            waiting = [target for target in targets if not _flushed(*target)]
            if not waiting:
                done.callback(self._flush_answer(logs))
            elif self._clock.seconds() - started > self._flush_timeout_s:
                done.errback(DebugCommandError(f"{len(waiting)} logs not flushed after {self._flush_timeout_s:g} s"))
            else:
                self._clock.callLater(FLUSH_POLL_S, check)

        check()
        return done

    def _flush_answer(self, logs: list[Log]) -> list[str]:
        if not logs:
            return ["(no logs to flush)"]
        rows = [(log_.name, log_.end_offset,
                 "flushed" if log_.write_error is None else f"refuses writes: {log_.write_error}")
                for log_ in logs]
        return format_table(["log", "end offset", "state"], rows)


def log_named(logs: LogManager, topic: str, partition: int) -> Log:
    """The log of ``topic``-``partition``; DebugCommandError if this broker has none."""
    try:
        log_ = logs.get_log(topic, partition)
    except (InvalidTopic, WrongPartition) as exc:
        raise DebugCommandError(str(exc)) from None
    if log_ is None:
        raise DebugCommandError(f"no log {topic}-{partition} on this broker")
    return log_


def publish_flushes(log_: Log) -> None:
    """Let ``log_`` publish the flushes its flusher finished (reading end_offset does)."""
    log_.end_offset


def _flushed(log_: Log, segment: Segment, size: int) -> bool:
    publish_flushes(log_)
    return log_.write_error is not None or segment.deleted or segment.flushed_size >= size


def _time_argument(text: str) -> int:
    if text.lower() in _TIME_NAMES:
        return _TIME_NAMES[text.lower()]
    try:
        value = int(text, 10)
    except ValueError:
        raise DebugCommandError(f"TIME must be latest, earliest, -1, -2 or milliseconds since 1970, "
                                f"not {quoted_input(text)}") from None
    if value < EARLIEST_TIME:
        raise DebugCommandError(f"TIME must be -1 (latest), -2 (earliest) or at least 0, not {value}")
    return value
