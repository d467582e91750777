"""The debug port's commands: parse a line, run it against the broker, format the answer.

No sockets here: ``network/debug_lines.py`` feeds lines to ``DebugCommands.execute`` and
writes the ``Answer`` it gets back. Every command is read-only except ``flush``. Bad commands and bad
arguments raise ``DebugCommandError`` inside and come back as one ``error: ...`` line, so a typo
never ends a session.

This module holds the command table and the dispatch; the commands are grouped by what they
inspect: logs and statistics (handlers/debug/logs.py), messages (handlers/debug/messages.py),
ZooKeeper (handlers/debug/zookeeper.py), ZooKeeper's four-letter words about this broker
(handlers/debug/four_letter_words.py), its replicas (handlers/debug/replicas.py), on the
shared parsing and formatting of handlers/debug/text.py, which also says what an answer looks
like. The public names of those
modules that callers used from here stay importable from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.python.failure import Failure

from twisted_broker.handlers.debug.logs import FLUSH_POLL_S, LogCommands
from twisted_broker.handlers.debug.messages import (
    DEFAULT_DUMP_BYTES, DEFAULT_TAIL_MESSAGES, MAX_DECOMPRESSED_BYTES, MAX_DUMP_BYTES, MAX_DUMP_MESSAGES,
    MAX_TAIL_MESSAGES, TAIL_SCAN_BYTES, TAIL_WINDOW_BYTES, MessageCommands, MessageRow, format_message_rows,
    message_rows,
)
from twisted_broker.handlers.debug.replicas import ReplicaCommands
from twisted_broker.handlers.debug.text import (
    PAYLOAD_PREVIEW_BYTES, DebugCommandError, escape_bytes, format_pairs, format_table, parse_line, quoted_input,
)
from twisted_broker.handlers.debug.four_letter_words import FourLetterWords, is_four_letter_word
from twisted_broker.handlers.debug.zookeeper import (
    MAX_ZK_CHILDREN, ZK_DATA_PREVIEW_BYTES, ZK_SUBCOMMANDS, ZK_USAGE, ZooKeeperCommands,
)
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.log_manager import LogManager

__all__ = [  # with the names kept importable from here since the split
    "COMMANDS", "DEFAULT_DUMP_BYTES", "DEFAULT_TAIL_MESSAGES", "FLUSH_POLL_S", "MAX_DECOMPRESSED_BYTES",
    "MAX_DUMP_BYTES", "MAX_DUMP_MESSAGES", "MAX_TAIL_MESSAGES", "MAX_ZK_CHILDREN", "PAYLOAD_PREVIEW_BYTES",
    "TAIL_SCAN_BYTES", "TAIL_WINDOW_BYTES", "ZK_DATA_PREVIEW_BYTES", "ZK_SUBCOMMANDS", "Answer", "DebugCommandError",
    "CommandSpec", "DebugCommands", "MessageRow", "escape_bytes", "format_message_rows", "format_pairs",
    "format_table", "message_rows", "parse_line",
]


@dataclass(frozen=True)
class Answer:
    """The lines answering one command; ``close`` ends the session after them (``quit``)."""

    lines: list[str]
    close: bool = False


@dataclass(frozen=True)
class CommandSpec:
    usage: str
    summary: str
    min_args: int
    max_args: int


COMMANDS = {
    "help": CommandSpec("help", "this list", 0, 0),
    "stats": CommandSpec("stats", "the broker's statistics (0.7's JMX beans)", 0, 0),
    "topics": CommandSpec("topics", "the topics with logs on this broker", 0, 0),
    "partitions": CommandSpec("partitions TOPIC", "offsets, sizes and state of each partition", 1, 1),
    "offsets": CommandSpec("offsets TOPIC PARTITION [TIME [MAX]]",
                           "offsets before TIME (ms, latest, earliest; default latest), at most MAX (1)",
                           2, 4),
    "tail": CommandSpec("tail TOPIC PARTITION [N]",
                        f"the last N flushed messages (default {DEFAULT_TAIL_MESSAGES}, "
                        f"at most {MAX_TAIL_MESSAGES})", 2, 3),
    "dump": CommandSpec("dump TOPIC PARTITION OFFSET [MAXBYTES]",
                        f"the messages in MAXBYTES at OFFSET (default {DEFAULT_DUMP_BYTES}, "
                        f"at most {MAX_DUMP_BYTES}), wrappers expanded", 3, 4),
    "zk": CommandSpec(ZK_USAGE, "a ZooKeeper node's children, or its data and stat", 2, 2),
    "flush": CommandSpec("flush [TOPIC]", "fsync every log (of TOPIC) and make its data visible", 0, 1),
    "replicas": CommandSpec("replicas [TOPIC]", "each replica held here: role, leader, epoch, ISR, high "
                                                "watermark, log end, lag", 0, 1),
    # ZooKeeper's four-letter words; as a connection's first line, a one-shot (network/debug_lines.py).
    "ruok": CommandSpec("ruok", "imok if the broker serves", 0, 0),
    "srvr": CommandSpec("srvr", "version, broker id, mode (controller, broker, standalone), leaderships, "
                                "uptime, connections, requests", 0, 0),
    "stat": CommandSpec("stat", "srvr with the Kafka-protocol connections", 0, 0),
    "cons": CommandSpec("cons", "one line per Kafka-protocol connection: requests, bytes, idle ms", 0, 0),
    "mntr": CommandSpec("mntr", "the broker's figures as key<TAB>value lines", 0, 0),
    "quit": CommandSpec("quit", "close this session", 0, 0),
}


class DebugCommands:
    """Runs debug commands against one broker's logs, statistics and ZooKeeper session.

    Reactor thread only. ``zk`` is the ZooKeeper bridge (None with enable.zookeeper=false);
    ``clock`` provides callLater and seconds (the reactor, or a task.Clock in tests).
    ``replication()`` gives server.stats.replication_snapshot (None without ZooKeeper).
    ``kafka_requests`` are the modern listener's request figures (None: no such listener).
    """

    def __init__(self, logs: LogManager, stats: BrokerStats, *, clock, broker_id: int, zk=None,
                 replication: Callable[[], dict] | None = None, kafka_requests: RequestStats | None = None,
                 zk_timeout_s: float = 10.0, flush_timeout_s: float = 30.0,
                 tail_scan_bytes: int = TAIL_SCAN_BYTES) -> None:
        self.broker_id = broker_id
        log_commands = LogCommands(logs, stats, clock=clock, broker_id=broker_id, flush_timeout_s=flush_timeout_s)
        message_commands = MessageCommands(logs, broker_id=broker_id, tail_scan_bytes=tail_scan_bytes)
        zk_commands = ZooKeeperCommands(zk, clock=clock, timeout_s=zk_timeout_s)
        words = FourLetterWords(logs, stats, broker_id=broker_id, replication=replication, kafka_requests=kafka_requests)
        replica_commands = ReplicaCommands(replication)
        self._handlers: dict[str, Callable[[list[str]], list[str] | Answer | Deferred]] = {
            "help": self._help, "stats": log_commands.stats, "topics": log_commands.topics,
            "partitions": log_commands.partitions, "offsets": log_commands.offsets,
            "tail": message_commands.tail, "dump": message_commands.dump, "zk": zk_commands.zk,
            "flush": log_commands.flush, "replicas": replica_commands.replicas, "ruok": words.ruok, "srvr": words.srvr, "stat": words.stat,
            "cons": words.cons, "mntr": words.mntr, "quit": self._quit}

    def banner(self) -> list[str]:
        return [f"twisted_broker debug port, broker {self.broker_id}: 'help' lists the commands"]

    def is_one_shot(self, line: str) -> bool:
        """Whether ``line`` is a four-letter word, answered and closed as a connection's first line."""
        return is_four_letter_word(line)

    def execute(self, line: str) -> Deferred[Answer]:
        """The answer to one command line. Fires at once except for ``zk`` and a slow ``flush``.

        DebugCommandError becomes an ``error: ...`` answer; any other exception (a bug, a disk
        error) fails the Deferred for the caller to log.
        """
        result = maybeDeferred(self._dispatch, line)
        result.addCallback(lambda answer: answer if isinstance(answer, Answer) else Answer(answer))
        result.addErrback(_error_answer)
        return result

    def _dispatch(self, line: str):
        command, args = parse_line(line)
        spec = COMMANDS.get(command)
        if spec is None:
            raise DebugCommandError(f"unknown command {quoted_input(command)}: 'help' lists the commands")
        if not spec.min_args <= len(args) <= spec.max_args:
            raise DebugCommandError(f"usage: {spec.usage}")
        return self._handlers[command](args)

    def _quit(self, args: list[str]) -> Answer:
        return Answer(["bye"], close=True)

    def _help(self, args: list[str]) -> list[str]:
        return ["commands (one per line; each answer ends with an empty line):",
                *format_table(["command", "what"], [(spec.usage, spec.summary) for spec in COMMANDS.values()],
                              indent="  ")[1:],
                f"PARTITION is P, or BROKER-P with this broker's id ({self.broker_id}).",
                "ruok, srvr, stat, cons and mntr also answer as one-shots, as ZooKeeper's do: "
                "echo mntr | nc HOST PORT"]


def _error_answer(failure: Failure) -> Answer:
    failure.trap(DebugCommandError)  # anything else is passed on to be logged with its traceback
    return Answer([f"error: {failure.value}"])
