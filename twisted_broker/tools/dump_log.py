"""``dump-log``: the messages of segment files, with their offsets and CRC checks (0.7's
DumpLogSegments).

A segment is message-set bytes only (spec 4.2), and the byte at position ``p`` of the file
named ``S.kafka`` has log offset ``S + p``; a file not named as a segment is read as if it
started at offset 0. Each top-level entry is one line (offset, size, magic, codec, CRC,
valid or not), and a compressed wrapper is followed by its inner messages, indented and
numbered (they share the wrapper's offset, spec 3.5).

A record batch produced on the modern listener is stored as one gzip wrapper that carries the
batch in its gzip headers (docs/kafka-protocol.md §3; storage/stored_batch.py recognises
it). Its 0.7 line is followed by a ``batch:`` line (base offset, record count, producer id,
epoch and base sequence, compression, leader epoch, CRC32C check) and one ``record:`` line per
record with its modern offset (base offset + delta) and timestamp; ``--payloads`` adds each
record's key, headers and value. The values the wrapper shows 0.7 consumers are not listed
again: they are the records' values.

A corrupt file never stops the dump with a traceback. An entry whose CRC fails, or a wrapper
that does not decompress or holds a bad message, is marked and the walk goes on, since its
length still frames the next entry; a bad length, magic or codec, or an incomplete last entry,
ends the walk, as nothing after it can be framed. Each file ends with a summary line; if any
file holds an invalid message the command fails, naming the offset of the first one in each.
The file is mapped, not read, so a 1 GiB segment costs no 1 GiB of memory.
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
from dataclasses import dataclass
from typing import TextIO

from twisted_broker.errors import InvalidMessage
from twisted_broker.codec.kafka.record_batch import CorruptBatch, Record, decode_batch
from twisted_broker.codec.kafka.record_compression import RECORD_CODEC_NAMES, UnsupportedCompression
from twisted_broker.storage.stored_batch import StoredBatchError, is_stored_batch, stored_pieces
from twisted_broker.storage.segment import parse_segment_file_name
from twisted_broker.tools.errors import CommandError
from twisted_broker.tools.progress import Progress
from twisted_broker.codec.kafka07.message import Message
from twisted_broker.codec.kafka07.message_set import expand_wrapper, iter_entries

HELP = "print the messages of segment files with offsets and CRC checks (DumpLogSegments)"
DUMP_PAYLOAD_BYTES = 1024  # of each payload printed with --payloads


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="segment files (<offset>.kafka)")
    parser.add_argument("--payloads", action="store_true",
                        help=f"also print each payload, and each stored record's key, headers and value "
                             f"(escaped, at most {DUMP_PAYLOAD_BYTES} bytes each)")


@dataclass
class DumpResult:
    """What one file held: counts, and the first invalid message as ``(offset, reason)``."""

    entries: int = 0
    messages: int = 0  # inner messages of wrappers and records of stored batches counted one by one
    first_invalid: tuple[int, str] | None = None

    def invalid(self, offset: int, reason: str) -> None:
        if self.first_invalid is None:
            self.first_invalid = (offset, reason)


def describe(message: Message) -> str:
    """``size: N magic: M codec: C crc: 0x... valid: true``: one message's fields."""
    return (f"size: {message.size} magic: {message.magic} codec: {message.codec_name} "
            f"crc: {message.crc:#010x} valid: {'true' if message.is_valid() else 'false'}")


def escape_payload(payload: bytes | memoryview, limit: int = DUMP_PAYLOAD_BYTES) -> str:
    """The payload as printable ASCII on one line (Python's bytes escapes), cut at ``limit``."""
    text = repr(bytes(payload[:limit]))[2:-1]
    return text + f"... ({len(payload)} bytes)" if len(payload) > limit else text


def dump_buffer(buf: memoryview, base_offset: int, out: TextIO, *, payloads: bool = False,
                progress: Progress | None = None) -> DumpResult:
    """Print the entries of one segment's bytes; return the counts and first invalid message."""
    result = DumpResult()
    position = 0  # of the first byte not walked yet
    entries = iter_entries(buf, base_offset)
    try:
        for offset, next_offset, message in entries:
            result.entries += 1
            position = next_offset - base_offset
            out.write(f"offset: {offset} {describe(message)}\n")
            stored_batch = is_stored_batch(entry := buf[offset - base_offset:next_offset - base_offset])
            if payloads and not stored_batch:  # a stored batch's payload is gzip members: its records follow
                out.write(f"  payload: {escape_payload(message.payload)}\n")
            if not message.is_valid():
                result.messages += 1
                result.invalid(offset, f"stored CRC {message.crc:#010x}, payload CRC differs")
            elif stored_batch:
                result.messages += _dump_batch(entry, offset, out, payloads, result)
            elif message.codec:
                result.messages += _dump_inner(message, offset, out, payloads, result)
            else:
                result.messages += 1
            if progress is not None:
                progress.add()
    except InvalidMessage as exc:  # a bad length, magic or codec: nothing after it can be framed
        result.invalid(base_offset + exc.position, exc.reason)
        position = exc.position
    else:
        if position < len(buf):  # iter_entries stops quietly at an incomplete entry
            result.invalid(base_offset + position,
                           f"the last {len(buf) - position} bytes are an incomplete message")
    finally:
        entries.close()  # drops its views of buf
    return result


def _dump_inner(wrapper: Message, offset: int, out: TextIO, payloads: bool, result: DumpResult) -> int:
    try:
        inner = expand_wrapper(wrapper)
    except InvalidMessage as exc:
        out.write(f"  inner: not readable ({exc.reason})\n")
        result.invalid(offset, f"compressed wrapper: {exc.reason}")
        return 1
    for index, message in enumerate(inner, 1):
        out.write(f"  inner: {index}/{len(inner)} {describe(message)}\n")
        if payloads:
            out.write(f"    payload: {escape_payload(message.payload)}\n")
        if not message.is_valid():
            result.invalid(offset, f"inner message {index} of the compressed wrapper fails its CRC")
    return len(inner)


def _dump_batch(entry: memoryview, offset: int, out: TextIO, payloads: bool, result: DumpResult) -> int:
    try:
        header, records = decode_batch(b"".join(stored_pieces(entry)))
    except (StoredBatchError, CorruptBatch, UnsupportedCompression) as exc:
        out.write(f"  batch: not readable ({exc})\n")
        result.invalid(offset, f"stored record batch: {exc}")
        return 1
    out.write(f"  batch: base offset: {header.base_offset} records: {header.records_count} "
              f"producer id: {header.producer_id} epoch: {header.producer_epoch} "
              f"sequence: {header.base_sequence} compression: {RECORD_CODEC_NAMES[header.compression]} "
              f"leader epoch: {header.partition_leader_epoch} crc32c: valid\n")
    for index, record in enumerate(records, 1):
        out.write(f"  record: {index}/{len(records)} offset: {record.offset} timestamp: {record.timestamp}\n")
        if payloads:
            out.write(_record_payloads(record))
    return len(records)


def _record_payloads(record: Record) -> str:
    headers = ", ".join(f"{header.key}={_escape_nullable(header.value)}" for header in record.headers)
    return (f"    key: {_escape_nullable(record.key)}\n    headers: {headers}\n"
            f"    value: {_escape_nullable(record.value)}\n")


def _escape_nullable(data: bytes | None) -> str:
    return "null" if data is None else escape_payload(data)


def dump_file(path: str, out: TextIO, *, payloads: bool = False, progress: Progress | None = None) -> DumpResult:
    """Print one segment file's messages. Raises OSError if it cannot be read."""
    base_offset = parse_segment_file_name(os.path.basename(path))
    out.write(f"Dumping {path}\nStarting offset: {base_offset or 0}\n")
    with open(path, "rb") as file:
        if os.fstat(file.fileno()).st_size == 0:  # mmap refuses empty files
            result = DumpResult()
        else:
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                result = dump_buffer(memoryview(mapped), base_offset or 0, out, payloads=payloads,
                                     progress=progress)
            finally:
                try:
                    mapped.close()
                except BufferError:  # a view still held by an exception's traceback: unmapped when it goes
                    pass
    out.write(summary(path, result) + "\n")
    return result


def summary(path: str, result: DumpResult) -> str:
    counts = f"{result.entries} entries, {result.messages} messages"
    if result.first_invalid is None:
        return f"{path}: {counts}, all valid"
    offset, reason = result.first_invalid
    return f"{path}: {counts}; first invalid message at offset {offset}: {reason}"


def run(args: argparse.Namespace) -> int:
    out = sys.stdout
    invalid = []
    with Progress("dump-log", enabled=sys.stderr.isatty() and not out.isatty()) as progress:
        for path in args.files:
            result = dump_file(path, out, payloads=args.payloads, progress=progress)
            if result.first_invalid is not None:
                invalid.append(f"{path} at offset {result.first_invalid[0]}")
    out.flush()
    if invalid:
        raise CommandError(f"invalid messages in {'; '.join(invalid)}")
    return 0
