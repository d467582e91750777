"""ZooKeeper's four-letter words on the debug port: ``ruok``, ``stat``, ``srvr``, ``cons``, ``mntr``
(server/debug_commands.py dispatches to them; protocols/debug.py also answers them as one-shots).

Each follows the shape of ZooKeeper's answer, so the habits and scripts of ZooKeeper operators
carry over; the figures are this broker's:

- ``ruok``: ``imok``; the reactor answered, so the broker serves (what ZooKeeper's means too).
- ``srvr``: ``Name: value`` lines: version (as ``twisted-broker --version`` prints it), broker
  id, mode, uptime, Kafka-protocol connections, requests waiting, requests handled, their
  latency, partitions. ``stat`` is ``srvr`` with the ``Clients:`` list of ``cons`` after the
  version, as in ZooKeeper.
- ``cons``: one line per open Kafka-protocol connection, oldest first, in ZooKeeper's shape
  `` /HOST:PORT[R](k=v,...)``: R is 1 while the broker reads the connection, 0 while it holds
  off (a response streams to a pipelining peer, or a big request waits for buffer space);
  ``queued`` requests received whole and waiting, ``recved`` requests handled, ``sent``
  responses sent (produce requests have none), ``bytes_recved``/``bytes_sent`` on the socket,
  ``est`` when it connected (ms since 1970), ``lop`` the last request's type (``NA`` before
  one), ``idle`` ms since the last byte either way. ZooKeeper's session fields (sid, to,
  lzxid...) have no counterpart in Kafka 0.7 and are left out.
- ``mntr``: ``key<TAB>value`` lines, keys ``tb_...`` without spaces (as ZooKeeper's ``zk_...``).
  Byte and message counts are since the broker started; ``tb_messages_out`` is an estimate
  (server/stats.py, ``BrokerStats.record_fetched``).

No replication exists yet, so every partition here is its only copy: the mode is
``standalone`` and ``tb_under_replicated_partitions`` is 0. TODO(issue 17): report the broker's
role and its under-replicated partitions once replication exists.
"""

from __future__ import annotations

from twisted_broker import __version__
from twisted_broker.server.stats import BrokerStats, ConnectionStats, broker_snapshot
from twisted_broker.storage.log_manager import LogManager

FOUR_LETTER_WORDS = ("ruok", "stat", "srvr", "cons", "mntr")
MODE = "standalone"  # see the module docstring


def is_four_letter_word(line: str) -> bool:
    """Whether ``line`` is one of the words alone (any case, blanks around it allowed)."""
    return line.strip().lower() in FOUR_LETTER_WORDS


class FourLetterWords:
    """The words' answers for one broker. Reactor thread only; each takes no arguments."""

    def __init__(self, logs: LogManager, stats: BrokerStats, *, broker_id: int, version: str = __version__) -> None:
        self._logs, self._stats = logs, stats
        self._broker_id, self._version = broker_id, version

    def ruok(self, args: list[str]) -> list[str]:
        return ["imok"]

    def srvr(self, args: list[str]) -> list[str]:
        return [self._version_line(), *self._server_lines()]

    def stat(self, args: list[str]) -> list[str]:
        return [self._version_line(), "Clients:", *self.cons(args), *self._server_lines()]

    def cons(self, args: list[str]) -> list[str]:
        requests = self._stats.requests
        now = requests.now()
        lines = [_connection_line(connection, now) for connection in requests.open_connections]
        return lines or [" (no Kafka-protocol connections)"]

    def mntr(self, args: list[str]) -> list[str]:
        requests = self._stats.requests
        snapshot = broker_snapshot(self._stats, self._logs)
        socket_server, all_topics, flush = snapshot["socket_server"], snapshot["all_topics"], snapshot["log_flush"]
        by_type = socket_server["requests"]
        average_ms, max_ms = _latency_ms(by_type)
        logs = list(self._logs.logs())
        pairs: list[tuple[str, object]] = [
            ("version", self._version),
            ("broker_id", self._broker_id),
            ("server_state", MODE),
            ("uptime_ms", round((requests.now() - requests.started_s) * 1000)),
            ("open_connections", socket_server["connections"]),
            ("connections_total", socket_server["connections_total"]),
            ("outstanding_requests", _outstanding(self._stats)),
            *((f"requests_{name}", by_type[name]["count"]) for name in by_type),
            ("request_latency_avg_ms", average_ms),
            ("request_latency_max_ms", max_ms),
            ("bytes_received", socket_server["bytes_read"]),
            ("bytes_sent", socket_server["bytes_written"]),
            ("messages_in", all_topics["messages_in"]),
            ("bytes_in", all_topics["bytes_in"]),
            ("messages_out", all_topics["messages_out"]),
            ("bytes_out", all_topics["bytes_out"]),
            ("failed_produce_requests", all_topics["failed_produce_requests"]),
            ("failed_fetch_requests", all_topics["failed_fetch_requests"]),
            ("topics", len({log_.topic for log_ in logs})),
            ("partitions", len(snapshot["logs"])),
            ("log_bytes", sum(entry["size"] for entry in snapshot["logs"])),
            ("log_segments", sum(entry["segments"] for entry in snapshot["logs"])),
            ("partitions_refusing_writes", sum(log_.write_error is not None for log_ in logs)),
            ("under_replicated_partitions", 0),  # no replication yet: see the module docstring
            ("flushes", flush["flushes"]),
            ("flush_latency_avg_ms", flush["avg_ms"]),
            ("flush_latency_max_ms", flush["max_ms"]),
        ]
        return [f"tb_{key}\t{value:.3f}" if isinstance(value, float) else f"tb_{key}\t{value}"
                for key, value in pairs]

    def _version_line(self) -> str:
        return f"twisted-broker version: {self._version}"

    def _server_lines(self) -> list[str]:
        requests = self._stats.requests
        by_type = requests.snapshot()["requests"]
        average_ms, max_ms = _latency_ms(by_type)
        return [f"Broker id: {self._broker_id}",
                f"Mode: {MODE}",
                f"Uptime: {round(requests.now() - requests.started_s)} s",
                f"Connections: {requests.connections}",
                f"Outstanding: {_outstanding(self._stats)}",
                f"Requests: {sum(figures['count'] for figures in by_type.values())} ("
                + ", ".join(f"{name} {figures['count']}" for name, figures in by_type.items()) + ")",
                f"Latency avg/max: {average_ms:.3f}/{max_ms:.3f} ms",
                f"Partitions: {sum(1 for _ in self._logs.logs())}"]


def _connection_line(connection: ConnectionStats, now: float) -> str:
    fields = {"queued": connection.queued(), "recved": connection.requests, "sent": connection.responses,
              "bytes_recved": connection.bytes_received, "bytes_sent": connection.bytes_sent,
              "est": round(connection.established_s * 1000), "lop": connection.last_request,
              "idle": round(max(0.0, now - connection.last_activity_s) * 1000)}
    return (f" /{connection.host}:{connection.port}[{int(connection.reading())}]("
            + ",".join(f"{key}={value}" for key, value in fields.items()) + ")")


def _outstanding(stats: BrokerStats) -> int:
    return sum(connection.queued() for connection in stats.requests.open_connections)


def _latency_ms(by_type: dict[str, dict]) -> tuple[float, float]:
    """(average, maximum) handling time of every request, of whatever type, in ms."""
    count = sum(figures["count"] for figures in by_type.values())
    total_ms = sum(figures["avg_ms"] * figures["count"] for figures in by_type.values())
    return (total_ms / count if count else 0.0), max((figures["max_ms"] for figures in by_type.values()), default=0.0)
