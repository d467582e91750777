"""Primitive fields of the 0.7 wire format: big-endian integers and int16-length strings.

Topic names travel as ``string16`` (int16 byte count, then the bytes). 0.7's Java client wrote the
count in UTF-16 units, which corrupts non-ASCII names, so we write the UTF-8 byte count and
decode strictly.
"""

from __future__ import annotations

import struct

from twisted_broker.errors import Truncated

Buffer = bytes | bytearray | memoryview

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")


def unpack_at(fmt: struct.Struct, buf: Buffer, pos: int) -> tuple:
    """Unpack ``fmt`` at ``pos``. Raises Truncated(pos) when the buffer is too short."""
    if len(buf) - pos < fmt.size:
        raise Truncated(pos, fmt.size, max(len(buf) - pos, 0))
    return fmt.unpack_from(buf, pos)


def decode_short_string(buf: Buffer, pos: int) -> tuple[str, int]:
    """Read a string16 at ``pos``; return it and the next position.

    Raises Truncated, or UnicodeDecodeError for bytes that are not UTF-8; a negative length
    (0.7's null string) is Truncated as well, since no request may carry a null topic.
    """
    (length,) = unpack_at(INT16, buf, pos)
    start = pos + 2
    if length < 0 or len(buf) - start < length:
        raise Truncated(pos, 2 + max(length, 0), len(buf) - pos)
    return bytes(buf[start:start + length]).decode("utf-8"), start + length


def encode_short_string(value: str) -> bytes:
    """Encode ``value`` as a string16. Raises ValueError if it exceeds 32767 bytes."""
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return INT16.pack(len(data)) + data
