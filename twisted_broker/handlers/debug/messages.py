"""The debug port's commands that show messages: ``tail`` (the last flushed messages of a
partition) and ``dump`` (the messages at an offset), wrappers expanded; both read and print a
bounded amount whatever the log holds (handlers/debug/commands.py dispatches to them).

How ``tail`` finds the last messages: offsets are byte positions and nothing on disk marks
where a message starts, so it reads a window at the end of the newest segment and asks
``codec.kafka07.message_search`` for the first position from which whole entries run exactly to the
flushed end, checking only the first entry's CRC: a damaged message later on is then shown
as ``crc BAD`` rather than hidden. The window grows until it holds enough messages or reaches
the segment's start, a known boundary; older segments are read the same way.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from twisted_broker.errors import CorruptWrapper, InvalidMessage
from twisted_broker.handlers.debug.logs import log_named, publish_flushes
from twisted_broker.handlers.debug.text import (
    PAYLOAD_PREVIEW_BYTES, DebugCommandError, escape_bytes, format_table, integer_argument, partition_argument,
)
from twisted_broker.storage.log import Log
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.storage.segment import Segment
from twisted_broker.codec.kafka07.message import Message
from twisted_broker.codec.kafka07.message_search import entry_is_valid, find_message_start
from twisted_broker.codec.kafka07.message_set import expand_wrapper, iter_entries
from twisted_broker.codec.kafka07.primitives import INT32

# Bounds on what one command reads and prints, so a debug session never costs the broker much.
DEFAULT_TAIL_MESSAGES = 10
MAX_TAIL_MESSAGES = 100
TAIL_WINDOW_BYTES = 64 * 1024  # the first window; it grows fourfold while too few messages show
TAIL_SCAN_BYTES = 2 * 1024 * 1024  # the most tail reads of one segment: over a default 1 MB message
DEFAULT_DUMP_BYTES = 4096
MAX_DUMP_BYTES = 1024 * 1024
MAX_DUMP_MESSAGES = 1000  # a 1 MiB wrapper may hold far more; the answer says where it stopped
MAX_DECOMPRESSED_BYTES = 16 * 1024 * 1024  # per wrapper; larger ones are shown unexpanded


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


class MessageCommands:
    """``tail`` and ``dump`` on one broker's logs (reactor thread; small blocking reads).

    Each takes the command's arguments (already counted) and returns its answer's lines;
    ``broker_id`` is the BROKER a ``BROKER-P`` partition argument must name.
    """

    def __init__(self, logs: LogManager, *, broker_id: int, tail_scan_bytes: int = TAIL_SCAN_BYTES) -> None:
        self._logs = logs
        self._broker_id = broker_id
        self._tail_scan_bytes = tail_scan_bytes

    def tail(self, args: list[str]) -> list[str]:
        topic, partition = args[0], partition_argument(args[1], self._broker_id)
        count = integer_argument(args[2], "N", 1, MAX_TAIL_MESSAGES) if len(args) > 2 else DEFAULT_TAIL_MESSAGES
        log_ = log_named(self._logs, topic, partition)
        publish_flushes(log_)  # before the segments' flushed sizes are looked at
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
                    raise DebugCommandError(f"no message boundary found in the last {self._tail_scan_bytes} bytes "
                                            f"of {log_.name}'s segment at {segment.start}")
            else:
                try:
                    rows = list(message_rows(memoryview(data)[position:], start + position))
                except InvalidMessage as exc:
                    raise DebugCommandError(f"{log_.name} near offset {start + position + exc.position}: {exc.reason}") from None
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
        publish_flushes(log_)
        segments = log_.segments
        index = bisect_right([segment.start for segment in segments], offset) - 1
        if index < 0 or offset > segments[-1].end:
            raise DebugCommandError(f"offset {offset} is outside [{log_.first_offset}, {log_.end_offset}] of {log_.name}")
        segment = segments[index]
        length = min(max_bytes, segment.end - offset)
        if length <= 0:
            return b""
        with open(segment.path, "rb") as file:
            return os.pread(file.fileno(), length, offset - segment.start)

    def dump(self, args: list[str]) -> list[str]:
        topic, partition = args[0], partition_argument(args[1], self._broker_id)
        offset = integer_argument(args[2], "OFFSET")
        max_bytes = integer_argument(args[3], "MAXBYTES", 1, MAX_DUMP_BYTES) if len(args) > 3 else DEFAULT_DUMP_BYTES
        log_ = log_named(self._logs, topic, partition)
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
                raise DebugCommandError(f"no message starts at offset {offset} of {log_.name}: {exc.reason}") from None
            stopped = f"(stopped at offset {offset + exc.position}: {exc.reason})"
        if not rows:  # a message larger than MAXBYTES, or no message starts here
            needed = INT32.unpack_from(data)[0] + 4 if len(data) >= 4 else 0
            if needed > MAX_DUMP_BYTES:
                raise DebugCommandError(f"the entry at offset {offset} of {log_.name} would be {needed} bytes: "
                                        f"not a message boundary, or more than dump reads ({MAX_DUMP_BYTES})")
            whole = self._read(log_, offset, needed) if max_bytes < needed else b""
            if len(whole) != needed or not entry_is_valid(whole):
                raise DebugCommandError(f"no message starts at offset {offset} of {log_.name}")
            return [f"(the message at offset {offset} is {needed} bytes with its length: more than MAXBYTES {max_bytes})"]
        if not entry_is_valid(data):
            # Later entries with a bad CRC are shown as BAD; a first one is more likely garbage.
            raise DebugCommandError(f"the entry at offset {offset} of {log_.name} fails its CRC check: "
                                    f"not a message boundary, or damaged on disk")
        # For an inner message other than a wrapper's last, next is the wrapper's offset (0.7's).
        return [*format_message_rows(rows), f"next offset {rows[-1].next_offset}", *([stopped] if stopped else [])]
