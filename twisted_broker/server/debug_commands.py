"""The debug port's commands: parse a line, run it against the broker, format the answer.

No sockets here: ``protocols/debug.py`` feeds lines to ``DebugCommands.execute`` and writes the
``Answer`` it gets back. Every command is read-only except ``flush``. Bad commands and bad
arguments raise ``CommandError`` inside and come back as one ``error: ...`` line, so a typo
never ends a session.

The answer's shape is part of the interface (INTERFACES.md, debug protocol): one or more
non-empty lines of plain text, columns aligned, numbers right-aligned. The protocol ends each
answer with an empty line, so nothing here may produce one. Payloads and ZooKeeper data are
shown as printable ASCII in double quotes with every other byte escaped, and cut at
``PAYLOAD_PREVIEW_BYTES``; ``tail`` and ``dump`` read and print a bounded amount whatever the
log holds.

How ``tail`` finds the last messages: offsets are byte positions and nothing on disk marks
where a message starts, so it reads a window at the end of the newest segment and asks
``wire.message_search`` for the first position from which whole entries run exactly to the
flushed end, checking only the first entry's CRC: a damaged message later on is then shown
as ``crc BAD`` rather than hidden. The window grows until it holds enough messages or reaches
the segment's start, a known boundary; older segments are read the same way.
"""

from __future__ import annotations

import datetime
import os
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from twisted.internet.defer import Deferred, TimeoutError as DeferredTimeoutError, maybeDeferred
from twisted.python.failure import Failure

from twisted_broker.errors import CorruptWrapper, InvalidMessage, InvalidTopic, WrongPartition
from twisted_broker.registry.zookeeper import NoNodeError
from twisted_broker.server.stats import BrokerStats, broker_snapshot
from twisted_broker.storage.log import EARLIEST_TIME, LATEST_TIME, Log
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.storage.segment import Segment
from twisted_broker.wire.message import Message
from twisted_broker.wire.message_search import entry_is_valid, find_message_start
from twisted_broker.wire.message_set import expand_wrapper, iter_entries
from twisted_broker.wire.primitives import INT32

# Bounds on what one command reads and prints, so a debug session never costs the broker much.
DEFAULT_TAIL_MESSAGES = 10
MAX_TAIL_MESSAGES = 100
TAIL_WINDOW_BYTES = 64 * 1024  # the first window; it grows fourfold while too few messages show
TAIL_SCAN_BYTES = 2 * 1024 * 1024  # the most tail reads of one segment: over a default 1 MB message
DEFAULT_DUMP_BYTES = 4096
MAX_DUMP_BYTES = 1024 * 1024
MAX_DUMP_MESSAGES = 1000  # a 1 MiB wrapper may hold far more; the answer says where it stopped
PAYLOAD_PREVIEW_BYTES = 200
ZK_DATA_PREVIEW_BYTES = 4096
MAX_ZK_CHILDREN = 1000
MAX_DECOMPRESSED_BYTES = 16 * 1024 * 1024  # per wrapper; larger ones are shown unexpanded
FLUSH_POLL_S = 0.01  # how often ``flush`` looks whether the flusher thread is done

class CommandError(Exception):
    """A bad command or argument, or a request the broker cannot answer: ``error: <message>``."""


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
    "zk": CommandSpec("zk ls PATH | zk get PATH", "a ZooKeeper node's children, or its data and stat", 2, 2),
    "flush": CommandSpec("flush [TOPIC]", "fsync every log (of TOPIC) and make its data visible", 0, 1),
    "quit": CommandSpec("quit", "close this session", 0, 0),
}
ZK_SUBCOMMANDS = ("ls", "get")
_TIME_NAMES = {"latest": LATEST_TIME, "earliest": EARLIEST_TIME}


# -- formatting (pure) -----------------------------------------------------------------------

Cell = str | int | float


def _cell_text(cell: Cell) -> str:
    return f"{cell:.2f}" if isinstance(cell, float) else str(cell)


def format_table(header: Sequence[str], rows: Sequence[Sequence[Cell]], indent: str = "") -> list[str]:
    """The header and rows as columns two spaces apart; numeric columns right-aligned.

    A column is numeric when every row holds an int, a float or "-" (none) there. No line
    ends in blanks.
    """
    text = [list(header), *([_cell_text(cell) for cell in row] for row in rows)]
    numeric = [bool(rows) and all(isinstance(row[column], (int, float)) or row[column] == "-" for row in rows)
               for column in range(len(header))]
    widths = [max(len(row[column]) for row in text) for column in range(len(header))]
    return [(indent + "  ".join(cell.rjust(width) if right else cell.ljust(width)
                                for cell, width, right in zip(row, widths, numeric))).rstrip()
            for row in text]


def format_pairs(pairs: Sequence[tuple[str, Cell]], indent: str = "") -> list[str]:
    """``name  value`` lines, names padded to one width, values aligned as ``format_table`` does."""
    return format_table(["", ""], pairs, indent)[1:]


def _byte_escape(byte: int) -> str:
    if byte in (0x22, 0x5C):  # '"' and '\'
        return "\\" + chr(byte)
    if 0x20 <= byte < 0x7F:
        return chr(byte)
    return {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}.get(byte, f"\\x{byte:02x}")


_ESCAPES = tuple(_byte_escape(byte) for byte in range(256))


def escape_bytes(data: bytes | memoryview, limit: int = PAYLOAD_PREVIEW_BYTES) -> str:
    """``data`` in double quotes as printable ASCII: ``\\"``, ``\\\\``, ``\\n``, ``\\t``, ``\\r``,
    ``\\xNN`` for every other byte outside 0x20-0x7e; cut at ``limit`` bytes with ``...(+N bytes)``."""
    shown = bytes(data[:limit])
    rest = len(data) - len(shown)
    return '"' + "".join([_ESCAPES[byte] for byte in shown]) + '"' + (f"...(+{rest} bytes)" if rest else "")


def _show(text: str) -> str:
    """User input echoed in an error: quoted, control characters escaped (no terminal tricks)."""
    return repr(text)


# -- listing messages (pure) -----------------------------------------------------------------

@dataclass(frozen=True)
class MessageRow:
    """One line of ``tail`` or ``dump``: a message, or a wrapper shown unexpanded with a note."""

    offset: int  # log offset of the top-level entry (a wrapper's, for its inner messages)
    next_offset: int  # 0.7's: the wrapper's own offset for all but its last inner message
    message: Message
    codec: str  # "none", "gzip 2/3" (second of three in a gzip wrapper), or the wrapper's codec
    note: str | None = None  # shown instead of the payload


def message_rows(buf: bytes | memoryview, base_offset: int, *,
                 max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES) -> Iterator[MessageRow]:
    """The rows of the complete entries in ``buf`` (log offset ``base_offset``), wrappers expanded.

    Stops at a partial tail; raises InvalidMessage for a bad length, magic or codec.
    """
    for offset, next_offset, message in iter_entries(buf, base_offset):
        if not message.codec:
            yield MessageRow(offset, next_offset, message, "none")
            continue
        if not message.is_valid():
            yield MessageRow(offset, next_offset, message, message.codec_name, "wrapper CRC mismatch: not expanded")
            continue
        try:
            inner = expand_wrapper(message, offset - base_offset, max_decompressed_bytes)
        except CorruptWrapper as exc:
            yield MessageRow(offset, next_offset, message, message.codec_name, f"not expanded: {exc.reason}")
            continue
        if not inner:
            yield MessageRow(offset, next_offset, message, message.codec_name, "empty wrapper")
        for index, inner_message in enumerate(inner, 1):
            yield MessageRow(offset, next_offset if index == len(inner) else offset, inner_message,
                             f"{message.codec_name} {index}/{len(inner)}")


def format_message_rows(rows: Sequence[MessageRow], payload_bytes: int = PAYLOAD_PREVIEW_BYTES) -> list[str]:
    return format_table(
        ["offset", "next", "bytes", "crc", "codec", "payload"],
        [(row.offset, row.next_offset, len(row.message.payload), "ok" if row.message.is_valid() else "BAD",
          row.codec, f"({row.note})" if row.note else escape_bytes(row.message.payload, payload_bytes))
         for row in rows])


# -- arguments ---------------------------------------------------------------------------------

def parse_line(line: str) -> tuple[str, list[str]]:
    """(command, arguments) of a line: words split on whitespace, the command lower-cased."""
    words = line.split()
    if not words:
        raise CommandError("empty command")
    return words[0].lower(), words[1:]


def _integer(text: str, what: str, minimum: int = 0, maximum: int | None = None) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise CommandError(f"{what} must be an integer, not {_show(text)}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise CommandError(f"{what} must be {bound}, not {value}")
    return value


def _time(text: str) -> int:
    if text.lower() in _TIME_NAMES:
        return _TIME_NAMES[text.lower()]
    try:
        value = int(text, 10)
    except ValueError:
        raise CommandError(f"TIME must be latest, earliest, -1, -2 or milliseconds since 1970, "
                           f"not {_show(text)}") from None
    if value < EARLIEST_TIME:
        raise CommandError(f"TIME must be -1 (latest), -2 (earliest) or at least 0, not {value}")
    return value


def _zk_path(text: str) -> str:
    # Checked here so that a typo gets a plain answer, not whatever kazoo makes of it.
    if not text.startswith("/") or (text != "/" and (text.endswith("/") or "//" in text)):
        raise CommandError(f"PATH must be an absolute ZooKeeper path like /brokers/ids, not {_show(text)}")
    if any(part in (".", "..") for part in text.split("/")) or any(ord(c) < 0x20 for c in text):
        raise CommandError(f"PATH {_show(text)} has a relative part or a control character")
    return text


# -- the commands --------------------------------------------------------------------------------

class DebugCommands:
    """Runs debug commands against one broker's logs, statistics and ZooKeeper session.

    Reactor thread only. ``zk`` is the ZooKeeper bridge (None with enable.zookeeper=false);
    ``clock`` provides callLater and seconds (the reactor, or a task.Clock in tests).
    """

    def __init__(self, logs: LogManager, stats: BrokerStats, *, clock, broker_id: int, zk=None,
                 zk_timeout_s: float = 10.0, flush_timeout_s: float = 30.0,
                 tail_scan_bytes: int = TAIL_SCAN_BYTES) -> None:
        self._logs = logs
        self._stats = stats
        self._clock = clock
        self.broker_id = broker_id
        self._zk = zk
        self._zk_timeout_s = zk_timeout_s
        self._flush_timeout_s = flush_timeout_s
        self._tail_scan_bytes = tail_scan_bytes
        self._handlers: dict[str, Callable[[list[str]], list[str] | Deferred]] = {
            "help": self._help, "stats": self._stats_command, "topics": self._topics,
            "partitions": self._partitions, "offsets": self._offsets, "tail": self._tail,
            "dump": self._dump, "zk": self._zk_command, "flush": self._flush, "quit": self._quit}
        self._zk_handlers = {"ls": self._zk_ls, "get": self._zk_get}

    def banner(self) -> list[str]:
        return [f"twisted_broker debug port, broker {self.broker_id}: 'help' lists the commands"]

    def execute(self, line: str) -> Deferred[Answer]:
        """The answer to one command line. Fires at once except for ``zk`` and a slow ``flush``.

        CommandError becomes an ``error: ...`` answer; any other exception (a bug, a disk
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
            raise CommandError(f"unknown command {_show(command)}: 'help' lists the commands")
        if not spec.min_args <= len(args) <= spec.max_args:
            raise CommandError(f"usage: {spec.usage}")
        return self._handlers[command](args)

    def _quit(self, args: list[str]) -> Answer:
        return Answer(["bye"], close=True)

    def _help(self, args: list[str]) -> list[str]:
        return ["commands (one per line; each answer ends with an empty line):",
                *format_table(["command", "what"], [(spec.usage, spec.summary) for spec in COMMANDS.values()],
                              indent="  ")[1:]]

    # -- statistics and listings ---------------------------------------------------------------

    def _stats_command(self, args: list[str]) -> list[str]:
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

    def _topics(self, args: list[str]) -> list[str]:
        by_topic: dict[str, list[Log]] = {}
        for log_ in self._logs.logs():
            by_topic.setdefault(log_.topic, []).append(log_)
        if not by_topic:
            return ["(no topics)"]
        return format_table(
            ["topic", "partitions", "configured", "bytes", "messages appended"],
            [(topic, len(logs), self._logs.partitions_for(topic), sum(log_.size for log_ in logs),
              sum(log_.messages_appended for log_ in logs)) for topic, logs in sorted(by_topic.items())])

    def _partitions(self, args: list[str]) -> list[str]:
        topic = args[0]
        logs = {log_.partition: log_ for log_ in self._logs.logs() if log_.topic == topic}
        if not logs:
            raise CommandError(f"no topic {_show(topic)} on this broker")
        rows = []
        for partition in sorted(set(logs) | set(range(self._logs.partitions_for(topic)))):
            log_ = logs.get(partition)
            if log_ is None:
                rows.append((partition, "-", "-", "-", "-", "-", "-", "no log yet"))
                continue
            end = log_.end_offset  # first: it publishes finished flushes
            newest = log_.segments[-1]
            state = "ok" if log_.write_error is None else f"refuses writes: {log_.write_error}"
            rows.append((partition, log_.first_offset, end, log_.size, len(log_.segments),
                         newest.size - newest.flushed_size, log_.messages_appended, state))
        return format_table(["partition", "first offset", "end offset", "bytes", "segments",
                             "unflushed bytes", "messages appended", "state"], rows)

    def _log(self, topic: str, partition: int) -> Log:
        try:
            log_ = self._logs.get_log(topic, partition)
        except (InvalidTopic, WrongPartition) as exc:
            raise CommandError(str(exc)) from None
        if log_ is None:
            raise CommandError(f"no log {topic}-{partition} on this broker")
        return log_

    def _offsets(self, args: list[str]) -> list[str]:
        topic, partition = args[0], _integer(args[1], "PARTITION")
        time_ms = _time(args[2]) if len(args) > 2 else LATEST_TIME
        max_count = _integer(args[3], "MAX", 0, 100_000) if len(args) > 3 else 1
        try:
            log_ = self._logs.get_log(topic, partition)
        except (InvalidTopic, WrongPartition) as exc:
            raise CommandError(str(exc)) from None
        if log_ is None:  # as the broker answers an offsets request (0.7)
            offsets = [0][:max_count] if time_ms in (LATEST_TIME, EARLIEST_TIME) else []
        else:
            offsets = log_.offsets_before(time_ms, max_count)
        return format_table(["offset"], [(offset,) for offset in offsets]) if offsets else ["(no offsets)"]

    # -- messages ------------------------------------------------------------------------------

    def _tail(self, args: list[str]) -> list[str]:
        topic, partition = args[0], _integer(args[1], "PARTITION")
        count = _integer(args[2], "N", 1, MAX_TAIL_MESSAGES) if len(args) > 2 else DEFAULT_TAIL_MESSAGES
        log_ = self._log(topic, partition)
        _publish_flushes(log_)  # before the segments' flushed sizes are looked at
        rows: list[MessageRow] = []
        for segment in reversed(log_.segments):
            if len(rows) >= count:
                break
            if segment.flushed_size:
                rows[:0] = self._tail_segment(log_, segment, count - len(rows))
        if not rows:
            return [f"(no flushed messages in {log_.name})"]
        return format_message_rows(rows[-count:])

    def _tail_segment(self, log_: Log, segment: Segment, count: int) -> list[MessageRow]:
        window = TAIL_WINDOW_BYTES
        while True:
            start = max(segment.start, segment.end - min(window, self._tail_scan_bytes))
            data = self._read(log_, start, segment.end - start)
            position = 0 if start == segment.start else find_message_start(data, check_every_crc=False)
            at_limit = window >= self._tail_scan_bytes
            if position is None:
                if at_limit:
                    raise CommandError(f"no message boundary found in the last {self._tail_scan_bytes} bytes "
                                       f"of {log_.name}'s segment at {segment.start}")
            else:
                try:
                    rows = list(message_rows(memoryview(data)[position:], start + position))
                except InvalidMessage as exc:
                    raise CommandError(f"{log_.name} near offset {start + position + exc.position}: {exc.reason}") from None
                if len(rows) >= count or start == segment.start or at_limit:
                    return rows[-count:]
            window *= 4

    def _read(self, log_: Log, offset: int, max_bytes: int) -> bytes:
        """At most ``max_bytes`` flushed bytes at ``offset``, within one segment (small reads only).

        Read from the segment's file, not with ``Log.read``: that is a consumer's fetch, which
        checks the bytes it serves and records damage at the offset asked for, while a debug
        read at any offset (tail's windows start mid-message) must change nothing, and shows a
        damaged message as ``crc BAD`` instead of refusing it.
        """
        _publish_flushes(log_)
        segments = log_.segments
        index = bisect_right([segment.start for segment in segments], offset) - 1
        if index < 0 or offset > segments[-1].end:
            raise CommandError(f"offset {offset} is outside [{log_.first_offset}, {log_.end_offset}] of {log_.name}")
        segment = segments[index]
        length = min(max_bytes, segment.end - offset)
        if length <= 0:
            return b""
        with open(segment.path, "rb") as file:
            return os.pread(file.fileno(), length, offset - segment.start)

    def _dump(self, args: list[str]) -> list[str]:
        topic, partition = args[0], _integer(args[1], "PARTITION")
        offset = _integer(args[2], "OFFSET")
        max_bytes = _integer(args[3], "MAXBYTES", 1, MAX_DUMP_BYTES) if len(args) > 3 else DEFAULT_DUMP_BYTES
        log_ = self._log(topic, partition)
        data = self._read(log_, offset, max_bytes)
        if not data:
            return [f"(no messages at offset {offset}: the flushed end of {log_.name})"]
        rows: list[MessageRow] = []
        stopped = None
        try:
            for row in message_rows(data, offset):
                if len(rows) == MAX_DUMP_MESSAGES:  # a wrapper can hold many more than MAXBYTES suggests
                    stopped = f"(stopped after {MAX_DUMP_MESSAGES} messages)"
                    break
                rows.append(row)
        except InvalidMessage as exc:
            if not rows:
                raise CommandError(f"no message starts at offset {offset} of {log_.name}: {exc.reason}") from None
            stopped = f"(stopped at offset {offset + exc.position}: {exc.reason})"
        if not rows:  # a message larger than MAXBYTES, or no message starts here
            needed = INT32.unpack_from(data)[0] + 4 if len(data) >= 4 else 0
            if needed > MAX_DUMP_BYTES:
                raise CommandError(f"the entry at offset {offset} of {log_.name} would be {needed} bytes: "
                                   f"not a message boundary, or more than dump reads ({MAX_DUMP_BYTES})")
            whole = self._read(log_, offset, needed) if max_bytes < needed else b""
            if len(whole) != needed or not entry_is_valid(whole):
                raise CommandError(f"no message starts at offset {offset} of {log_.name}")
            return [f"(the message at offset {offset} is {needed} bytes with its length: more than MAXBYTES {max_bytes})"]
        if not entry_is_valid(data):
            # Later entries with a bad CRC are shown as BAD; a first one is more likely garbage.
            raise CommandError(f"the entry at offset {offset} of {log_.name} fails its CRC check: "
                               f"not a message boundary, or damaged on disk")
        # For an inner message other than a wrapper's last, next is the wrapper's offset (0.7's).
        return [*format_message_rows(rows), f"next offset {rows[-1].next_offset}", *([stopped] if stopped else [])]

    # -- ZooKeeper -----------------------------------------------------------------------------

    def _zk_command(self, args: list[str]) -> Deferred:
        if self._zk is None:
            raise CommandError("ZooKeeper is not enabled")
        handler = self._zk_handlers.get(args[0].lower())
        if handler is None:
            raise CommandError(f"usage: {COMMANDS['zk'].usage}")
        path = _zk_path(args[1])
        result = maybeDeferred(handler, path)
        result.addTimeout(self._zk_timeout_s, self._clock)
        result.addErrback(self._zk_failed, path)
        return result

    def _zk_ls(self, path: str) -> Deferred:
        children = self._zk.get_children(path)
        children.addCallback(self._children_answer, path)
        return children

    def _children_answer(self, names: list[str], path: str) -> list[str]:
        if not names:
            return [f"(no children of {path})"]
        shown = sorted(names)[:MAX_ZK_CHILDREN]
        return shown + ([f"(and {len(names) - len(shown)} more)"] if len(names) > len(shown) else [])

    def _zk_get(self, path: str) -> Deferred:
        def show(result) -> list[str]:
            value, stat = result
            return format_pairs([
                ("data", escape_bytes(value or b"", ZK_DATA_PREVIEW_BYTES)),
                ("data length", stat.dataLength), ("version", stat.version),
                ("children", stat.numChildren), ("created", _utc(stat.ctime)), ("modified", _utc(stat.mtime)),
                ("ephemeral owner", f"{stat.ephemeralOwner:#x}" if stat.ephemeralOwner else "none (persistent)")])
        value = self._zk.get(path)
        value.addCallback(show)
        return value

    def _zk_failed(self, failure: Failure, path: str):
        if failure.check(NoNodeError):
            raise CommandError(f"no ZooKeeper node {path}")
        if failure.check(DeferredTimeoutError):
            raise CommandError(f"ZooKeeper did not answer within {self._zk_timeout_s:g} s")
        raise CommandError(f"ZooKeeper: {type(failure.value).__name__} {failure.getErrorMessage()}".rstrip())

    # -- flush ---------------------------------------------------------------------------------

    def _flush(self, args: list[str]) -> Deferred:
        """Start an fsync of every log (of a topic) and answer once all have finished.

        ``Log.flush`` would block the reactor while the flusher thread works; instead this polls
        every ``FLUSH_POLL_S`` until each newest segment's flushed size reaches its size at the
        start (a roll or retention in between flushes it too).
        """
        topic = args[0] if args else None
        logs = sorted((log_ for log_ in self._logs.logs() if topic is None or log_.topic == topic),
                      key=lambda log_: (log_.topic, log_.partition))
        if topic is not None and not logs:
            raise CommandError(f"no topic {_show(topic)} on this broker")
        targets = []
        for log_ in logs:
            if log_.write_error is None:
                log_.start_flush()
                targets.append((log_, log_.segments[-1], log_.segments[-1].size))
        done: Deferred[list[str]] = Deferred()
        started = self._clock.seconds()

        def check() -> None:
            waiting = [target for target in targets if not _flushed(*target)]
            if not waiting:
                done.callback(self._flush_answer(logs))
            elif self._clock.seconds() - started > self._flush_timeout_s:
                done.errback(CommandError(f"{len(waiting)} logs not flushed after {self._flush_timeout_s:g} s"))
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


def _error_answer(failure: Failure) -> Answer:
    failure.trap(CommandError)  # anything else is passed on to be logged with its traceback
    return Answer([f"error: {failure.value}"])


def _publish_flushes(log_: Log) -> None:
    """Let ``log_`` publish the flushes its flusher thread finished (reading end_offset does)."""
    log_.end_offset


def _flushed(log_: Log, segment: Segment, size: int) -> bool:
    _publish_flushes(log_)
    return log_.write_error is not None or segment.deleted or segment.flushed_size >= size


def _utc(epoch_ms: int) -> str:
    return datetime.datetime.fromtimestamp(epoch_ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
