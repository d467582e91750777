"""An independent reader of Kafka 0.7 message sets and logs, the oracle of the reliability suite.

Like ``tests/support/spec_encoding.py`` it is written from the spec (sections 3-4), not from
``twisted_broker.codec.kafka07``, so the broker's checks are never judged by themselves: framing, magic,
codec, CRC-32 of the payload, and for gzip wrappers the inner messages too. Snappy wrappers
(snappy-java's stream format) are decompressed with cramjam, the library python-snappy wraps.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

MAX_NESTING = 4  # deeper wrappers are refused by the broker (no 0.7 producer nests at all)
SNAPPY_MAGIC = b"\x82SNAPPY\x00"


@dataclass(frozen=True)
class Entry:
    offset: int  # byte position of the length field, in the buffer (or the log)
    raw: bytes  # length field + message
    magic: int
    codec: int
    payload: bytes


class Invalid(Exception):
    def __init__(self, position: int, reason: str, incomplete: bool = False) -> None:
        super().__init__(f"at byte {position}: {reason}")
        self.position, self.reason = position, reason
        self.incomplete = incomplete  # the data ends inside the entry (vs. a bad entry)


def walk(data: bytes, base: int = 0) -> tuple[list[Entry], int, Invalid | None]:
    """Top-level entries until the first bad or incomplete one: (entries, valid bytes, problem).

    A problem is None only if the entries cover ``data`` exactly.
    """
    entries: list[Entry] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 4:
            return entries, pos, Invalid(base + pos, "partial length field", incomplete=True)
        (size,) = struct.unpack_from(">i", data, pos)
        if size < 5:
            return entries, pos, Invalid(base + pos, f"length {size} below 5")
        if pos + 4 + size > len(data):
            return entries, pos, Invalid(base + pos, f"length {size} runs past the end", incomplete=True)
        body = data[pos + 4:pos + 4 + size]
        magic = body[0]
        if magic == 0:
            codec, crc, payload = 0, struct.unpack_from(">I", body, 1)[0], body[5:]
        elif magic == 1 and size >= 6:
            codec, crc, payload = body[1] & 3, struct.unpack_from(">I", body, 2)[0], body[6:]
        else:
            return entries, pos, Invalid(base + pos, f"magic {magic}")
        if codec == 3:
            return entries, pos, Invalid(base + pos, "codec 3")
        if zlib.crc32(payload) & 0xFFFFFFFF != crc:
            return entries, pos, Invalid(base + pos, "CRC mismatch")
        entries.append(Entry(base + pos, data[pos:pos + 4 + size], magic, codec, payload))
        pos += 4 + size
    return entries, pos, None


def decompress(codec: int, payload: bytes) -> bytes:
    if codec == 1:
        return gzip.decompress(payload)
    if codec == 2:
        import cramjam
        if not payload.startswith(SNAPPY_MAGIC):
            raise ValueError("no snappy-java header")
        out, pos = bytearray(), 16
        while pos < len(payload):
            (length,) = struct.unpack_from(">i", payload, pos)
            if length <= 0 or pos + 4 + length > len(payload):
                raise ValueError("bad snappy block length")
            out += bytes(cramjam.snappy.decompress_raw(payload[pos + 4:pos + 4 + length]))
            pos += 4 + length
        return bytes(out)
    raise ValueError(f"codec {codec}")


def deep_valid(entry: Entry, depth: int = 1) -> bool:
    """True if a (CRC-valid) entry is a plain message, or a wrapper whose inner set is valid."""
    if not entry.codec:
        return True
    if depth > MAX_NESTING:
        return False
    try:
        inner = decompress(entry.codec, entry.payload)
    except Exception:
        return False
    entries, _valid, problem = walk(inner)
    return problem is None and bool(entries) and all(deep_valid(e, depth + 1) for e in entries)


def appendable_prefix(message_set: bytes) -> bytes:
    """What a correct 0.7.2 broker appends from a produced set: the complete valid entries,
    or nothing at all if any entry is bad (a partial tail after complete entries is dropped)."""
    entries, valid, problem = walk(message_set)
    if problem is not None and not (problem.incomplete and entries):
        return b""
    if not all(deep_valid(e) for e in entries):
        return b""
    return message_set[:valid]


def produced_sets(frame: bytes) -> list[bytes]:
    """The message sets of the Produce or MultiProduce request in one frame body (type first),
    as the spec lays them out; [] for other requests and for whatever does not decode."""
    try:
        (request_type,) = struct.unpack_from(">h", frame, 0)
        if request_type == 0:
            return [_produce_part(frame, 2)[0]]
        if request_type == 3:
            (count,) = struct.unpack_from(">h", frame, 2)
            sets, pos = [], 4
            for _ in range(max(count, 0)):
                message_set, pos = _produce_part(frame, pos)
                sets.append(message_set)
            return sets
    except (struct.error, ValueError):
        pass
    return []


def _produce_part(frame: bytes, pos: int) -> tuple[bytes, int]:
    (topic_length,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + max(topic_length, 0)
    _partition, size = struct.unpack_from(">ii", frame, pos)
    pos += 8
    if size < 0 or pos + size > len(frame):
        raise ValueError("message set runs past the frame")
    return frame[pos:pos + size], pos + size


def frames_of(data: bytes) -> list[bytes]:
    """The frame bodies in a byte stream (as far as sizes frame them)."""
    frames, pos = [], 0
    while len(data) - pos >= 4:
        (size,) = struct.unpack_from(">i", data, pos)
        if size <= 0 or pos + 4 + size > len(data):
            break
        frames.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames


def segment_files(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.kafka"), key=lambda path: int(path.name.split(".")[0]))


def read_log(partition_dir: Path) -> bytes:
    """A partition's segments concatenated; checks that they are contiguous (spec 4.8)."""
    data = bytearray()
    for path in segment_files(partition_dir):
        start = int(path.name.split(".")[0])
        assert start == len(data), f"{path}: starts at {start}, expected {len(data)}"
        data += path.read_bytes()
    return bytes(data)


def check_log_dir(log_dir: Path) -> dict[str, int]:
    """Assert every segment under ``log_dir`` holds only valid entries (deep); return the
    message count per partition directory."""
    counts = {}
    for partition_dir in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        count = 0
        for path in segment_files(partition_dir):
            entries, _valid, problem = walk(path.read_bytes())
            assert problem is None, f"{path}: {problem}"
            assert all(deep_valid(e) for e in entries), f"{path}: a wrapper with bad inner messages"
            count += len(entries)
        counts[partition_dir.name] = count
    return counts
