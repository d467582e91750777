"""Primitive field types of the Kafka protocol (0.10 to 2.1, non-flexible encodings).

Each type is one object with ``decode(buf, pos) -> (value, next position)`` and
``encode(value, out)`` appending to a ``bytearray``; the schema walker (schema.py) strings
them together. Pure: no I/O. Bytes fields decode to ``bytes``; ``RECORDS`` decodes to a
``memoryview`` of the request buffer, so a produced batch is never copied here.

Errors: a buffer that ends inside a field raises ``twisted_broker.errors.Truncated`` (the
0.7 codecs' error); a field that is there but impossible (a negative length other than -1,
bytes that are not UTF-8, a varint over 10 bytes) raises ``Malformed``. Both carry the byte
position and are ValueErrors, so a listener closes the connection on either.
"""

from __future__ import annotations

import struct
from typing import Any

from twisted_broker.codec.kafka07.primitives import INT16, INT32, INT64, Buffer  # the same as 0.7's
from twisted_broker.errors import Truncated

INT8 = struct.Struct(">b")
UINT32 = struct.Struct(">I")
_BOOLEAN = struct.Struct(">?")


class Malformed(ValueError):
    """A field is present but cannot be a valid value (bad length, bad UTF-8, runaway varint)."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"malformed field at byte {position}: {reason}")
        self.position = position


# -- varints (zigzag), as record batches v2 write them --------------------------------------

def encode_varint(value: int, out: bytearray) -> None:
    """Append ``value`` (signed, zigzag-encoded) as a base-128 varint. Varlongs are the same."""
    value = (value << 1) ^ (value >> 63)
    value &= 0xFFFFFFFFFFFFFFFF
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def varint_bytes(value: int) -> bytes:
    """``value`` as a zigzag varint, as bytes."""
    out = bytearray()
    encode_varint(value, out)
    return bytes(out)


def decode_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a zigzag varint (or varlong) at ``pos``; return it and the next position.

    Raises Truncated when the buffer ends inside it, Malformed past 10 bytes.
    """
    result = shift = 0
    start, end = pos, len(buf)
    while True:
        if pos >= end:
            raise Truncated(start, pos - start + 1, end - start)
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift >= 70:
            raise Malformed(start, "varint longer than 10 bytes")


# -- field types -----------------------------------------------------------------------------

class FixedType:
    """A big-endian integer (or boolean) of fixed size."""

    def __init__(self, name: str, fmt: struct.Struct) -> None:
        self.name, self._fmt, self._size = name, fmt, fmt.size
        self._pack, self._unpack = fmt.pack, fmt.unpack_from

    def decode(self, buf: Buffer, pos: int) -> tuple[Any, int]:
        if len(buf) - pos < self._size:
            raise Truncated(pos, self._size, max(len(buf) - pos, 0))
        return self._unpack(buf, pos)[0], pos + self._size

    def encode(self, value: Any, out: bytearray) -> None:
        out += self._pack(value)

    def __repr__(self) -> str:
        return self.name


class VarIntType:
    """A zigzag varint (record fields); Kafka's VARINT and VARLONG share the encoding."""

    def __init__(self, name: str, bits: int) -> None:
        self.name, self._low, self._high = name, -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def decode(self, buf: Buffer, pos: int) -> tuple[int, int]:
        value, end = decode_varint(buf, pos)
        if not self._low <= value <= self._high:
            raise Malformed(pos, f"{self.name} {value} out of range")
        return value, end

    def encode(self, value: int, out: bytearray) -> None:
        if not self._low <= value <= self._high:
            raise struct.error(f"{self.name} {value} out of range")
        encode_varint(value, out)

    def __repr__(self) -> str:
        return self.name


class Gap:
    """A record set the encoder leaves out: ``size`` bytes that the caller sends itself.

    ``fill`` is the caller's (the listener's file regions, say); the codec only reads ``size``.
    """

    __slots__ = ("size", "fill")

    def __init__(self, size: int, fill: Any = None) -> None:
        if size < 0:
            raise ValueError(f"a gap of {size} bytes")
        self.size, self.fill = size, fill

    def __repr__(self) -> str:
        return f"Gap({self.size}, {self.fill!r})"


class ChunkWriter(bytearray):
    """A bytearray that can be cut at a Gap: ``chunks`` gets the bytes so far, then the gap."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[bytes | Gap] = []

    def gap(self, gap: Gap) -> None:
        if self:
            self.chunks.append(bytes(self))
            self.clear()
        self.chunks.append(gap)

    def finish(self) -> list[bytes | Gap]:
        """The chunks in order: bytes and Gaps; no empty bytes chunk."""
        if self:
            self.chunks.append(bytes(self))
            self.clear()
        return self.chunks


def _read_length(fmt: struct.Struct, buf: Buffer, pos: int, nullable: bool) -> tuple[int, int]:
    """A length prefix: -1 (null) only where ``nullable``; the bytes it counts must be there."""
    size = fmt.size
    if len(buf) - pos < size:
        raise Truncated(pos, size, max(len(buf) - pos, 0))
    (length,) = fmt.unpack_from(buf, pos)
    if length < 0:
        if length == -1 and nullable:
            return -1, pos + size
        raise Malformed(pos, f"length {length}")
    return length, pos + size


def _read_sized(fmt: struct.Struct, buf: Buffer, pos: int, nullable: bool) -> tuple[int, int]:
    """A length-prefixed field's ``(start, end)``, or ``(-1, end)`` for null."""
    length, start = _read_length(fmt, buf, pos, nullable)
    if length < 0:
        return -1, start
    end = start + length
    if end > len(buf):
        raise Truncated(pos, fmt.size + length, len(buf) - pos)
    return start, end


def _write_null(ftype: Any, fmt: struct.Struct, out: bytearray) -> None:
    if not ftype.nullable:
        raise ValueError(f"null in a non-nullable {ftype!r}")
    out += fmt.pack(-1)


class StringType:
    """An int16 byte count then UTF-8 bytes; null (-1) only if ``nullable``."""

    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable
        self.name = "NULLABLE_STRING" if nullable else "STRING"

    def decode(self, buf: Buffer, pos: int) -> tuple[str | None, int]:
        start, end = _read_sized(INT16, buf, pos, self.nullable)
        if start < 0:
            return None, end
        try:
            return str(buf[start:end], "utf-8"), end
        except UnicodeDecodeError as exc:
            raise Malformed(pos, f"string is not UTF-8 ({exc.reason})") from None

    def encode(self, value: str | None, out: bytearray) -> None:
        if value is None:
            _write_null(self, INT16, out)
            return
        data = value.encode("utf-8")
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
        out += INT16.pack(len(data))
        out += data

    def __repr__(self) -> str:
        return self.name


class BytesType:
    """An int32 byte count then the bytes; null (-1) only if ``nullable``.

    ``view=True`` decodes to a memoryview of the buffer (record data: never copied here).
    """

    def __init__(self, name: str, nullable: bool, view: bool = False) -> None:
        self.name, self.nullable, self.view = name, nullable, view

    def decode(self, buf: Buffer, pos: int) -> tuple[bytes | memoryview | None, int]:
        start, end = _read_sized(INT32, buf, pos, self.nullable)
        if start < 0:
            return None, end
        if self.view:
            return memoryview(buf)[start:end], end
        return bytes(buf[start:end]), end

    def encode(self, value: Buffer | Gap | None, out: bytearray) -> None:
        if value is None:
            _write_null(self, INT32, out)
            return
        if type(value) is Gap:
            if not self.view or not isinstance(out, ChunkWriter):
                raise TypeError(f"a Gap in {self.name}: only record sets encoded by encode_chunks take one")
            out += INT32.pack(value.size)
            out.gap(value)
            return
        out += INT32.pack(value.nbytes if isinstance(value, memoryview) else len(value))
        out += value

    def __repr__(self) -> str:
        return self.name


class ArrayType:
    """An int32 element count then the elements; null (-1) only if ``nullable``."""

    def __init__(self, element: Any, nullable: bool = False) -> None:
        self.element, self.nullable = element, nullable

    def decode(self, buf: Buffer, pos: int) -> tuple[list | None, int]:
        count, pos = _read_length(INT32, buf, pos, self.nullable)
        if count < 0:
            return None, pos
        if count > len(buf) - pos:  # every element takes a byte at least: a hostile count
            raise Truncated(pos - 4, count, len(buf) - pos)  # must not size a huge list
        decode = self.element.decode
        items = []
        append = items.append
        for _ in range(count):
            item, pos = decode(buf, pos)
            append(item)
        return items, pos

    def encode(self, value: list | None, out: bytearray) -> None:
        if value is None:
            _write_null(self, INT32, out)
            return
        out += INT32.pack(len(value))
        encode = self.element.encode
        for item in value:
            encode(item, out)

    def __repr__(self) -> str:
        return f"{'NullableArray' if self.nullable else 'Array'}({self.element!r})"


BOOLEAN = FixedType("BOOLEAN", _BOOLEAN)
INT8_T = FixedType("INT8", INT8)
INT16_T = FixedType("INT16", INT16)
INT32_T = FixedType("INT32", INT32)
INT64_T = FixedType("INT64", INT64)
UINT32_T = FixedType("UINT32", UINT32)
VARINT = VarIntType("VARINT", 32)
VARLONG = VarIntType("VARLONG", 64)
STRING = StringType(nullable=False)
NULLABLE_STRING = StringType(nullable=True)
BYTES = BytesType("BYTES", nullable=False)
NULLABLE_BYTES = BytesType("NULLABLE_BYTES", nullable=True)
# A record set (Produce, Fetch): NULLABLE_BYTES on the wire, a memoryview when decoded, and
# when encoded either bytes or a Gap that the listener fills (schema.py, encode_chunks).
RECORDS = BytesType("RECORDS", nullable=True, view=True)


def Array(element: Any) -> ArrayType:  # noqa: N802 - reads as a type in the schema tables
    return ArrayType(element)


def NullableArray(element: Any) -> ArrayType:  # noqa: N802
    return ArrayType(element, nullable=True)
