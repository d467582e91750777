"""ZooKeeper's four-letter words on the debug port: ``ruok``, ``stat``, ``srvr``, ``cons``, ``mntr``
(handlers/debug/commands.py dispatches to them; network/debug_lines.py also answers them as
one-shots).

Each follows the shape of ZooKeeper's answer, so the habits and scripts of ZooKeeper operators
carry over; the figures are this broker's:

- ``ruok``: ``imok``; the reactor answered, so the broker serves (what ZooKeeper's means too).
- ``srvr``: ``Name: value`` lines: version (as ``twisted-broker --version`` prints it), broker
  id, mode, uptime, Kafka-protocol connections, requests waiting, requests handled, their
  latency, partitions; with the listener of today's Kafka clients, its connections and
  requests by API name too. ``stat`` is ``srvr`` with the ``Clients:`` list of ``cons`` after
  the version, as in ZooKeeper.
- ``cons``: one line per open Kafka-protocol connection, oldest first, in ZooKeeper's shape
  `` /HOST:PORT[R](k=v,...)``: R is 1 while the broker reads the connection, 0 while it holds
  off (a response streams to a pipelining peer, or a big request waits for buffer space);
  ``queued`` requests received whole and waiting, ``recved`` requests handled, ``sent``
  responses sent (produce requests have none), ``bytes_recved``/``bytes_sent`` on the socket,
  ``est`` when it connected (ms since 1970), ``lop`` the last request's type (``NA`` before
  one), ``idle`` ms since the last byte either way. ZooKeeper's session fields (sid, to,
  lzxid...) have no counterpart in Kafka 0.7 and are left out. The connections of the modern
  listener follow those of the 0.7 port, in the same shape; their ``lop`` is Kafka's API name
  (``Produce``, ``Fetch``, ``Metadata``...), where the 0.7 port's are lower case (``produce``).
- ``mntr``: ``key<TAB>value`` lines, keys ``tb_...`` without spaces (as ZooKeeper's ``zk_...``).
  Byte and message counts are since the broker started; ``tb_messages_out`` is an estimate
  (server/stats.py, ``BrokerStats.record_fetched``). Messages and bytes in and out count both
  listeners; ``tb_requests_*``, ``tb_open_connections`` and ``tb_bytes_received``/``_sent`` are
  the 0.7 port's, and ``tb_kafka_*`` the modern listener's: ``tb_kafka_open_connections``,
  ``tb_kafka_connections_total``, ``tb_kafka_bytes_received``/``_sent``,
  ``tb_kafka_failed_authentications`` (refused SASL logins; 0 without the listeners),
  ``tb_kafka_refused_connections`` (over ``max.connections.per.ip``), the quotas' throttles
  (``tb_kafka_produce_throttled``, ``tb_kafka_produce_throttle_time_ms`` and the same for
  ``fetch``: sums over every user and client id; docs/security.md) and ``tb_kafka_requests_<api>`` (``list_offsets`` for ListOffsets) once a request
  of that API was served.

The mode (ZooKeeper says leader, follower or standalone) is the broker's role in replication:
``controller`` for the one broker that is the cluster's controller now, ``broker`` for every
other broker with ZooKeeper, ``standalone`` without ZooKeeper (``enable.zookeeper=false``: no
replication, every partition its only copy). ``srvr`` adds the controller's id, the
partitions this broker leads and those of them that are under-replicated; ``mntr`` adds the
replication figures (server/stats.py ``replication_snapshot``): ``tb_under_replicated_partitions``
(led here, ISR smaller than the replica list), ``tb_offline_partitions`` (the controller's count;
0 on other brokers), ``tb_leader_count``, ``tb_isr_shrinks``, ``tb_isr_expands``,
``tb_not_enough_replicas`` (writes refused by min.insync.replicas), ``tb_offline_replicas``
(replicas whose log failed here), ``tb_controller`` (1 on the
controller), ``tb_controller_id`` and ``tb_controller_epoch`` (-1: none known / not the
controller), ``tb_replicas`` (held here), ``tb_follower_lag_max_bytes`` (the largest lag of a
partition this broker follows). Without ZooKeeper they are all 0 (the ids -1), so a script
reads the same keys everywhere. The ``replicas`` command (handlers/debug/replicas.py) lists
each replica.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from twisted_broker import __version__
from twisted_broker.server.stats import BrokerStats, ConnectionStats, RequestStats, broker_snapshot
from twisted_broker.storage.log_manager import LogManager

FOUR_LETTER_WORDS = ("ruok", "stat", "srvr", "cons", "mntr")
MODE_STANDALONE, MODE_CONTROLLER, MODE_BROKER = "standalone", "controller", "broker"  # the modes: see the module docstring


def is_four_letter_word(line: str) -> bool:
    """Whether ``line`` is one of the words alone (any case, blanks around it allowed)."""
    return line.strip().lower() in FOUR_LETTER_WORDS


class FourLetterWords:
    """The words' answers for one broker. Reactor thread only; each takes no arguments."""

    def __init__(self, logs: LogManager, stats: BrokerStats, *, broker_id: int, version: str = __version__,
                 replication: Callable[[], dict] | None = None, kafka_requests: RequestStats | None = None) -> None:
        """``replication()`` is server.stats.replication_snapshot of this broker's replication
        (None: no ZooKeeper, so no replication); ``kafka_requests`` the modern listener's
        request figures (None: no such listener)."""
        self._logs, self._stats = logs, stats
        self._broker_id, self._version = broker_id, version
        self._replication = replication
        self._kafka_requests = kafka_requests

    def _replication_figures(self) -> dict | None:
        return self._replication() if self._replication is not None else None

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
        if self._kafka_requests is not None:
            lines += [_connection_line(connection, now) for connection in self._kafka_requests.open_connections]
        return lines or [" (no Kafka-protocol connections)"]

    def mntr(self, args: list[str]) -> list[str]:
        requests = self._stats.requests
        snapshot = broker_snapshot(self._stats, self._logs)
        socket_server, all_topics, flush = snapshot["socket_server"], snapshot["all_topics"], snapshot["log_flush"]
        by_type = socket_server["requests"]
        average_ms, max_ms = _latency_ms(by_type)
        logs = list(self._logs.logs())
        replication = self._replication_figures()
        pairs: list[tuple[str, object]] = [
            ("version", self._version),
            ("broker_id", self._broker_id),
            ("server_state", _mode(replication)),
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
            *_replication_pairs(replication),
            *_kafka_listener_pairs(self._kafka_requests),
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
        replication = self._replication_figures()
        return [f"Broker id: {self._broker_id}",
                f"Mode: {_mode(replication)}",
                *_replication_lines(replication),
                f"Uptime: {round(requests.now() - requests.started_s)} s",
                f"Connections: {requests.connections}",
                f"Outstanding: {_outstanding(self._stats)}",
                _requests_line("Requests", by_type),
                f"Latency avg/max: {average_ms:.3f}/{max_ms:.3f} ms",
                *_kafka_listener_lines(self._kafka_requests),
                f"Partitions: {sum(1 for _ in self._logs.logs())}"]


def _mode(replication: dict | None) -> str:
    if replication is None:
        return MODE_STANDALONE
    return MODE_CONTROLLER if replication["controller"]["active"] else MODE_BROKER


def _replication_lines(replication: dict | None) -> list[str]:
    if replication is None:
        return []
    controller = replication["controller"]
    return [f"Controller: {'none known' if controller['broker_id'] is None else controller['broker_id']}",
            f"Leader of: {replication['leader_count']} partition(s), "
            f"{replication['under_replicated_partitions']} under-replicated"]


def _replication_pairs(replication: dict | None) -> list[tuple[str, object]]:
    """mntr's replication keys; zeros (ids -1) without replication."""
    figures = replication or {"under_replicated_partitions": 0, "leader_count": 0, "isr_shrinks": 0,
                              "isr_expands": 0, "not_enough_replicas": 0, "follower_lag_max_bytes": 0,
                              "offline_replicas": 0,
                              "replicas": [], "controller": {"active": False, "broker_id": None, "epoch": None,
                                                             "offline_partitions": 0}}
    controller = figures["controller"]
    return [("under_replicated_partitions", figures["under_replicated_partitions"]),
            ("offline_partitions", controller["offline_partitions"]),
            ("leader_count", figures["leader_count"]),
            ("replicas", len(figures["replicas"])),
            ("isr_shrinks", figures["isr_shrinks"]),
            ("isr_expands", figures["isr_expands"]),
            ("not_enough_replicas", figures["not_enough_replicas"]),
            ("offline_replicas", figures["offline_replicas"]),
            ("follower_lag_max_bytes", figures["follower_lag_max_bytes"]),
            ("controller", int(controller["active"])),
            ("controller_id", -1 if controller["broker_id"] is None else controller["broker_id"]),
            ("controller_epoch", -1 if controller["epoch"] is None else controller["epoch"])]


def _kafka_listener_lines(requests: RequestStats | None) -> list[str]:
    if requests is None:
        return []
    return [f"Kafka-client connections: {requests.connections}",
            _requests_line("Kafka-client requests", requests.snapshot()["requests"])]


def _requests_line(label: str, by_type: dict[str, dict]) -> str:
    """``Requests: 3 (produce 1, fetch 2)``: the total, then each type's count."""
    return (f"{label}: {sum(figures['count'] for figures in by_type.values())} ("
            + ", ".join(f"{name} {figures['count']}" for name, figures in by_type.items()) + ")")


def _kafka_listener_pairs(requests: RequestStats | None) -> list[tuple[str, object]]:
    """mntr's keys of the modern listener: connections and bytes always (0 without the
    listener), requests by API name once one of that API was served."""
    snapshot = requests.snapshot() if requests is not None else {
        "requests": {}, "connections": 0, "connections_total": 0, "bytes_read": 0, "bytes_written": 0,
        "failed_authentications": 0, "refused_connections": 0, "throttles": []}
    return [("kafka_open_connections", snapshot["connections"]),
            ("kafka_connections_total", snapshot["connections_total"]),
            ("kafka_bytes_received", snapshot["bytes_read"]),
            ("kafka_bytes_sent", snapshot["bytes_written"]),
            ("kafka_failed_authentications", snapshot["failed_authentications"]),
            ("kafka_refused_connections", snapshot["refused_connections"]),
            *((f"kafka_{quota}_{figure}", sum(row[key] for row in snapshot["throttles"] if row["quota"] == quota))
              for quota in ("produce", "fetch")
              for figure, key in (("throttled", "throttled"), ("throttle_time_ms", "throttle_time_ms"))),
            *((f"kafka_requests_{_snake_case(name)}", figures["count"])
              for name, figures in snapshot["requests"].items())]


def _snake_case(api_name: str) -> str:
    """``ListOffsets`` -> ``list_offsets``: mntr's keys are lower case, as ZooKeeper's."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", api_name).lower()


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
