"""One Kafka 0.7 message: magic 0 or 1, the attributes byte, the CRC32 of the payload.

Layouts (big-endian), after the entry's int32 length N (see message_set.py):

=========  ======  ========  =======  ============
magic 0    magic   crc       payload
           int8 0  uint32    N - 5
magic 1    magic   attrs     crc      payload
           int8 1  int8      uint32   N - 6
=========  ======  ========  =======  ============

The CRC covers the payload only (not magic, attributes or length), as 0.7 computes it. The
attributes' low two bits are the compression codec (0 none, 1 gzip, 2 snappy, 3 invalid); the
other bits are ignored on read and written as 0.
"""

from __future__ import annotations

import struct

from twisted_broker.codec.kafka07.compression import CODEC_NAMES, NO_COMPRESSION
from twisted_broker.codec.kafka07.crc import crc32

MAGIC_0 = 0
MAGIC_1 = 1
CODEC_MASK = 0x03
HEADER_0 = struct.Struct(">BI")  # magic, crc
HEADER_1 = struct.Struct(">BBI")  # magic, attributes, crc
ENTRY_HEADER_1 = struct.Struct(">iBBI")  # length, magic, attributes, crc
MIN_SIZE = {MAGIC_0: HEADER_0.size, MAGIC_1: HEADER_1.size}


class Message:
    """A decoded message. ``payload`` is a view into the buffer it was read from, not a copy."""

    __slots__ = ("magic", "attributes", "crc", "payload")

    def __init__(self, magic: int, attributes: int, crc: int, payload: bytes | memoryview) -> None:
        self.magic = magic
        self.attributes = attributes
        self.crc = crc
        self.payload = payload

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def codec_name(self) -> str:
        return CODEC_NAMES.get(self.codec, "invalid")

    @property
    def size(self) -> int:
        """Bytes of the encoded message, without the 4-byte length that frames it."""
        return MIN_SIZE[self.magic] + len(self.payload)

    def is_valid(self) -> bool:
        """True if the stored CRC matches the payload."""
        return crc32(self.payload) == self.crc

    def encode(self) -> bytes:
        """The message bytes (without the length prefix), with the CRC as stored."""
        if self.magic == MAGIC_0:
            return HEADER_0.pack(MAGIC_0, self.crc) + self.payload
        return HEADER_1.pack(MAGIC_1, self.attributes, self.crc) + self.payload

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.magic, self.attributes, self.crc, bytes(self.payload)) == (
            other.magic, other.attributes, other.crc, bytes(other.payload))

    def __repr__(self) -> str:
        return (f"Message(magic={self.magic}, codec={self.codec_name}, crc={self.crc:#010x}, "
                f"payload={bytes(self.payload[:32])!r}{'...' if len(self.payload) > 32 else ''})")


def make_message(payload: bytes | memoryview, codec: int = NO_COMPRESSION, magic: int = MAGIC_1) -> Message:
    """A message for ``payload`` with its CRC computed. Magic 0 admits only NO_COMPRESSION."""
    if magic == MAGIC_0 and codec != NO_COMPRESSION:
        raise ValueError("magic 0 messages cannot be compressed")
    if magic not in MIN_SIZE:
        raise ValueError(f"unknown magic {magic}")
    return Message(magic, codec if magic == MAGIC_1 else 0, crc32(payload), payload)
