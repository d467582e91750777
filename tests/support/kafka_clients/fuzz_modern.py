"""Generated and mutated Kafka frames for the modern port's fuzzer (as tests/support/faults/
fuzz_frames.py is for the 0.7 port).

``ModernFrameFuzzer.case()`` returns the bytes one hostile connection sends: one to three
frames, each a well-formed request of a served API (ApiVersions, Metadata, Produce with a
record batch of magic 2, Fetch, ListOffsets, FindCoordinator, OffsetFetch, JoinGroup,
Heartbeat), usually then mutated: bad sizes (negative, zero, off by a few, huge), truncated or
extended bodies, flipped bytes, unknown API keys and versions, bad batch CRCs and lengths,
huge and negative counts. Written from the protocol's published layouts with the stdlib and
crcmod, never with the broker's codecs. Seeded: a failing case is reproduced from its seed.
"""

from __future__ import annotations

import random
import struct

import crcmod.predefined

from tests.support.kafka_clients.kafka_frames import frame, string16

_crc32c = crcmod.predefined.mkCrcFun("crc-32c")
TOPICS = ["fz", "fz-2"]
ODD_TOPICS = ["", "..", "../escape", "a/b", "x\x00y", "b" * 300, "\u00fc", " "]


def varint(value: int) -> bytes:
    """Zigzag varint (the record layout's)."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def record_batch(values: list[bytes], *, base_timestamp_ms: int = 1_700_000_000_000,
                 attributes: int = 0, producer_id: int = -1, base_sequence: int = -1) -> bytes:
    """A magic-2 record batch with keyless records (records uncompressed unless ``attributes``
    says otherwise, for the fuzzer's lies)."""
    records = b""
    for delta, value in enumerate(values):
        body = (b"\x00" + varint(delta) + varint(delta) + varint(-1)
                + varint(len(value)) + value + varint(0))
        records += varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", attributes, len(values) - 1, base_timestamp_ms,
                            base_timestamp_ms + len(values) - 1, producer_id, 0, base_sequence,
                            len(values)) + records
    header = struct.pack(">ibI", 0, 2, _crc32c(after_crc))  # partition leader epoch, magic, crc
    return struct.pack(">qi", 0, len(header) + len(after_crc)) + header + after_crc


class ModernFrameFuzzer:
    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.correlation_id = 0

    def topic(self) -> str:
        return self.random.choice(TOPICS) if self.random.random() < 0.85 else self.random.choice(ODD_TOPICS)

    def count(self, usual: int) -> int:
        return usual if self.random.random() < 0.9 else self.random.choice([-1, 0, 2**31 - 1, 1000000])

    # -- well-formed requests: (api key, version, body) -------------------------------------

    def api_versions(self):
        return 18, self.random.choice([0, 1, 2]), b""

    def metadata(self):
        topics = [self.topic() for _ in range(self.random.randrange(3))]
        body = struct.pack(">i", self.count(len(topics))) + b"".join(map(string16, topics))
        return 3, self.random.choice([0, 1, 2, 3, 4, 5]), body

    def produce(self):
        values = [self.random.randbytes(self.random.choice([0, 5, 100])) for _ in range(self.random.randrange(1, 4))]
        batch = record_batch(values)
        body = (string16(None) + struct.pack(">hi", self.random.choice([0, 1, -1]), 1000)
                + struct.pack(">i", 1) + string16(self.topic()) + struct.pack(">i", 1)
                + struct.pack(">ii", self.random.randrange(2), len(batch)) + batch)
        return 0, self.random.choice([3, 4, 5, 6, 7]), body

    def fetch(self):
        body = (struct.pack(">iiiib", -1, self.random.choice([0, 10]), 1, 1 << 20, 0)
                + struct.pack(">i", 1) + string16(self.topic()) + struct.pack(">i", 1)
                + struct.pack(">iqqi", self.random.randrange(2), self.random.choice([0, 5, -1, 2**40]), -1, 1 << 16))
        return 1, 5, body  # v5: log_start_offset per partition

    def list_offsets(self):
        body = (struct.pack(">i", -1) + struct.pack(">i", 1) + string16(self.topic())
                + struct.pack(">i", 1) + struct.pack(">iq", self.random.randrange(2), self.random.choice([-1, -2, 0])))
        return 2, 1, body

    def find_coordinator(self):
        return 10, 1, string16(f"g{self.random.randrange(3)}") + b"\x00"

    def offset_fetch(self):
        body = string16("g0") + struct.pack(">i", 1) + string16(self.topic()) + struct.pack(">ii", 1, 0)
        return 9, self.random.choice([1, 2, 3]), body

    def join_group(self):
        metadata = struct.pack(">hi", 0, 1) + string16("fz") + struct.pack(">i", -1)
        body = (string16("fuzz-group") + struct.pack(">ii", 6000, 1000) + string16("") + string16("consumer")
                + struct.pack(">i", 1) + string16("range") + struct.pack(">i", len(metadata)) + metadata)
        return 11, 2, body

    def heartbeat(self):
        return 12, 1, string16("fuzz-group") + struct.pack(">i", 1) + string16("nobody")

    # -- one connection's bytes ----------------------------------------------------------------

    def request(self) -> bytes:
        make = self.random.choice([self.api_versions, self.metadata, self.produce, self.fetch, self.list_offsets,
                                   self.find_coordinator, self.offset_fetch, self.join_group, self.heartbeat])
        api_key, version, body = make()
        self.correlation_id += 1
        if self.random.random() < 0.15:
            api_key = self.random.choice([-1, 4, 5, 6, 7, 17, 21, 37, 68, 999, 32767])
        if self.random.random() < 0.15:
            version = self.random.choice([-1, 3, 9, 12, 99, 32767])
        data = frame(api_key, version, self.correlation_id, body)
        return self.mutate(data) if self.random.random() < 0.8 else data

    def mutate(self, data: bytes) -> bytes:
        data = bytearray(data)
        kind = self.random.randrange(7)
        if kind == 0:  # the size field lies
            data[:4] = struct.pack(">i", self.random.choice([-1, 0, 1, 3, len(data) - 8, len(data) + 3, 2**31 - 1,
                                                            104857601]))
        elif kind == 1:  # truncated body, size adjusted to match
            cut = self.random.randrange(4, len(data))
            data = bytearray(struct.pack(">i", cut - 4)) + data[4:cut]
        elif kind == 2:  # extra bytes after the request, size adjusted
            data += self.random.randbytes(self.random.randrange(1, 50))
            data[:4] = struct.pack(">i", len(data) - 4)
        elif kind == 3:  # flipped bytes past the size
            for _ in range(self.random.randrange(1, 6)):
                position = self.random.randrange(4, len(data))
                data[position] ^= 1 << self.random.randrange(8)
        elif kind == 4:  # a count or length field made huge or negative
            if len(data) > 16:
                position = self.random.randrange(12, len(data) - 4)
                data[position:position + 4] = struct.pack(">i", self.random.choice([-1, -2**31, 2**31 - 1, 65536]))
        elif kind == 5:  # the client id's length lies
            data[12:14] = struct.pack(">h", self.random.choice([-2, 300, 32767]))
        else:  # random junk of a plausible size
            junk = self.random.randbytes(self.random.randrange(0, 200))
            data = bytearray(struct.pack(">i", len(junk)) + junk)
        return bytes(data)

    def case(self) -> bytes:
        return b"".join(self.request() for _ in range(self.random.randrange(1, 4)))

