"""Generated and mutated Kafka 0.7 frames for the wire-port fuzzer.

``FrameFuzzer.case()`` returns the bytes one hostile connection sends: one to three frames,
each a well-formed request (every type, message sets plain, magic 0, gzip and snappy wrappers,
nested wrappers) that is usually then mutated: bad sizes (negative, zero, off by a few, over
the limit), truncated or extended bodies, flipped bits, bad CRCs, codec 3, unknown magic and
request types, huge and negative counts, negative offsets and fetch sizes, odd topic names
(path tricks, control characters, non-ASCII, 300 characters). Encoded with the spec's encoder
(``tests/support/spec_encoding.py``), never with the broker's own codecs. Seeded: a
failing case is reproduced from its seed.
"""

from __future__ import annotations

import gzip
import random
import struct

import cramjam

from tests.support.spec_encoding import (
    fetch_body, message, message_set, produce_body, request, string16,
)
from tests.support.faults.oracle import SNAPPY_MAGIC

GOOD_TOPICS = ["fz", "fz-2", "a-1"]
ODD_TOPICS = ["", ".", "..", "../escape", "../../etc/passwd", "a/b", "/abs", "x\x00y", "tab\tname",
              "\x7f", "\u00fc-umlaut", "\ud7ff", "-", "--1", "a" * 254, "b" * 300, "topic-", "dir/..",
              "%2e%2e", "\\..\\win", "lf\n", "\uffff", "~", " "]


def snappy_java(data: bytes) -> bytes:
    """snappy-java 1.0.4's stream format (spec 3.4): magic header, version 1, raw blocks."""
    out = SNAPPY_MAGIC + struct.pack(">ii", 1, 1)
    for start in range(0, max(len(data), 1), 32 * 1024):
        block = bytes(cramjam.snappy.compress_raw(data[start:start + 32 * 1024]))
        out += struct.pack(">i", len(block)) + block
    return out


class FrameFuzzer:
    def __init__(self, seed: int, max_request_bytes: int = 104_857_600) -> None:
        self.random = random.Random(seed)
        self.max_request_bytes = max_request_bytes

    # -- well-formed pieces ----------------------------------------------------------------

    def topic(self) -> str:
        return self.random.choice(GOOD_TOPICS) if self.random.random() < 0.8 else self.random.choice(ODD_TOPICS)

    def partition(self) -> int:
        r = self.random.random()
        if r < 0.85:
            return self.random.randrange(2)
        return self.random.choice([-1, -2, 2, 7, 2**31 - 1, -2**31])

    def payload(self) -> bytes:
        return self.random.randbytes(self.random.choice([0, 1, 5, 30, 200, 3000]))

    def message_set(self, depth: int = 0) -> bytes:
        r = self.random.random()
        count = self.random.randint(1, 6)
        if r < 0.45 or depth > 6:
            return message_set(*(message(self.payload()) for _ in range(count)))
        if r < 0.55:
            return message_set(*(message(self.payload(), magic=0) for _ in range(count)))
        inner = self.message_set(depth + 1) if self.random.random() < 0.3 else \
            message_set(*(message(self.payload()) for _ in range(count)))
        codec = self.random.choice([1, 1, 2])
        body = gzip.compress(inner) if codec == 1 else snappy_java(inner)
        return message_set(message(body, codec=codec))

    def valid_frame(self) -> bytes:
        kind = self.random.choice(["produce", "produce", "multiproduce", "fetch", "multifetch", "offsets"])
        if kind == "produce":
            return request(0, produce_body(self.topic(), self.partition(), self.message_set()))
        if kind == "multiproduce":
            parts = [produce_body(self.topic(), self.partition(), self.message_set())
                     for _ in range(self.random.randint(1, 4))]
            return request(3, struct.pack(">h", len(parts)) + b"".join(parts))
        if kind == "fetch":
            return request(1, self.fetch_part())
        if kind == "multifetch":
            parts = [self.fetch_part() for _ in range(self.random.randint(1, 5))]
            return request(2, struct.pack(">h", len(parts)) + b"".join(parts))
        return request(4, string16(self.topic()) + struct.pack(
            ">iqi", self.partition(), self.random.choice([-1, -2, 0, 2**62, -3]),
            self.random.choice([1, 10, 0, -1, 2**31 - 1])))

    def fetch_part(self) -> bytes:
        offset = self.random.choice([0, 0, 1, 13, 1000, -1, -2**63, 2**63 - 1])
        size = self.random.choice([4096, 1 << 20, 0, 1, -1, -2**31, 2**31 - 1])
        return fetch_body(self.topic(), self.partition(), offset, size)

    # -- mutations -------------------------------------------------------------------------

    def mutate(self, frame: bytes) -> bytes:
        data = bytearray(frame)
        for _ in range(self.random.randint(1, 3)):
            getattr(self, self.random.choice(_MUTATIONS))(data)
        return bytes(data)

    def _size(self, data: bytearray, value: int | None = None) -> None:
        if value is None:
            value = self.random.choice([
                -1, -2**31, 0, 1, 2, len(data) - 4 + self.random.randint(-8, 8),
                self.max_request_bytes, self.max_request_bytes + 1, 2**31 - 1])
        data[0:4] = struct.pack(">i", value)

    def _fix_size(self, data: bytearray) -> None:
        data[0:4] = struct.pack(">i", max(len(data) - 4, 0))

    def m_bad_size(self, data: bytearray) -> None:
        self._size(data)

    def m_truncate(self, data: bytearray) -> None:
        del data[self.random.randint(0, len(data)):]
        if self.random.random() < 0.5 and len(data) >= 4:
            self._fix_size(data)

    def m_extend(self, data: bytearray) -> None:
        data += self.random.randbytes(self.random.randint(1, 64))
        if self.random.random() < 0.7 and len(data) >= 4:
            self._fix_size(data)

    def m_flip_bits(self, data: bytearray) -> None:
        for _ in range(self.random.randint(1, 4)):
            if data:
                data[self.random.randrange(len(data))] ^= 1 << self.random.randrange(8)

    def m_request_type(self, data: bytearray) -> None:
        if len(data) >= 6:
            data[4:6] = struct.pack(">h", self.random.choice([5, 6, -1, 255, 32767, -32768]))

    def m_count(self, data: bytearray) -> None:
        # For MultiFetch/MultiProduce the count follows the type; elsewhere it hits a topic length.
        if len(data) >= 8:
            data[6:8] = struct.pack(">h", self.random.choice([32767, -1, -32768, 0, 1000]))

    def m_bad_crc(self, data: bytearray) -> None:
        # The first message's CRC, if the frame is a produce with a magic-1 message where expected.
        position = self._first_message(data)
        if position is not None and position + 10 <= len(data):
            data[position + 6:position + 10] = struct.pack(">I", self.random.getrandbits(32))

    def m_codec_or_magic(self, data: bytearray) -> None:
        position = self._first_message(data)
        if position is not None and position + 6 <= len(data):
            if self.random.random() < 0.5:
                data[position + 5] |= 3  # codec 3
            else:
                data[position + 4] = self.random.choice([2, 7, 255])

    def m_negative_fields(self, data: bytearray) -> None:
        # An int32/int64 somewhere after the header set to a negative or huge value.
        if len(data) > 14:
            position = self.random.randrange(6, len(data) - 8)
            width = self.random.choice([4, 8])
            value = self.random.choice([-1, -2**31 if width == 4 else -2**63, 2**31 - 1 if width == 4 else 2**63 - 1])
            data[position:position + width] = struct.pack(">i" if width == 4 else ">q", value)

    def m_message_length(self, data: bytearray) -> None:
        position = self._first_message(data)
        if position is not None and position + 4 <= len(data):
            data[position:position + 4] = struct.pack(">i", self.random.choice([-1, 0, 4, 5, 2**31 - 1, 10**6]))

    def m_splice(self, data: bytearray) -> None:
        other = self.valid_frame()
        cut = self.random.randint(0, len(data))
        data[cut:] = other[self.random.randint(0, len(other)):]

    def _first_message(self, data: bytearray) -> int | None:
        """Where the first message-set entry of a Produce would start (length field)."""
        if len(data) < 8 or data[4:6] != b"\x00\x00":
            return None
        (topic_length,) = struct.unpack_from(">h", data, 6)
        position = 8 + max(topic_length, 0) + 8
        return position if position < len(data) else None

    # -- cases -----------------------------------------------------------------------------

    def frame(self) -> bytes:
        r = self.random.random()
        if r < 0.05:
            return self.random.randbytes(self.random.randint(0, 64))  # pure noise
        if r < 0.052:
            # A huge count that is real: 32,767 fetches of one partition, 1 byte each.
            part = fetch_body("fz", 0, 0, 1)
            return request(2, struct.pack(">h", 32767) + part * 32767)
        frame = self.valid_frame()
        return frame if r < 0.25 else self.mutate(frame)

    def case(self) -> list[bytes]:
        return [self.frame() for _ in range(self.random.choice([1, 1, 1, 2, 3]))]


_MUTATIONS = [name for name in vars(FrameFuzzer) if name.startswith("m_")]
