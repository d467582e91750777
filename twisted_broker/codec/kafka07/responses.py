"""Kafka 0.7 responses (spec 2.1): size-framed, starting with an int16 error code.

=============  ==========================================================================
Fetch          size int32 (2 + N), error int16, message set (N bytes, streamed from disk)
MultiFetch     size int32, error int16 = 0, then per fetch: size int32, error int16, set
Offsets        size int32, error int16 = 0, count int32, count x offset int64 (descending)
=============  ==========================================================================

The broker writes the fetch headers here and streams message sets after them; the clients
decode whole responses with the functions below.
"""

from __future__ import annotations

import struct

from twisted_broker.errors import Truncated
from twisted_broker.codec.kafka07.primitives import INT16, INT32, Buffer, unpack_at

_HEADER = struct.Struct(">ih")  # size, error code
HEADER_BYTES = _HEADER.size
NO_ERROR = 0


def encode_response_header(error: int, body_bytes: int) -> bytes:
    """``size`` + ``error`` for a response whose body (after the error code) is ``body_bytes``."""
    return _HEADER.pack(2 + body_bytes, error)


def encode_offsets_response(offsets: list[int]) -> bytes:
    body = INT32.pack(len(offsets)) + struct.pack(f">{len(offsets)}q", *offsets)
    return encode_response_header(NO_ERROR, len(body)) + body


def decode_error_and_body(frame: Buffer) -> tuple[int, memoryview]:
    """Split a response frame body (after the size) into its error code and the rest."""
    (error,) = unpack_at(INT16, frame, 0)
    return error, memoryview(frame)[2:]


def decode_offsets(body: Buffer) -> list[int]:
    """The offsets of an Offsets response body (after the error code)."""
    (count,) = unpack_at(INT32, body, 0)
    if count < 0 or len(body) < 4 + 8 * count:
        raise Truncated(4, 8 * max(count, 0), len(body) - 4)
    return list(struct.unpack_from(f">{count}q", body, 4))


def decode_multifetch(body: Buffer) -> list[tuple[int, memoryview]]:
    """(error, message set) per fetch of a MultiFetch response body (after its error code)."""
    view = memoryview(body)
    parts, pos = [], 0
    while pos < len(view):
        (size,) = unpack_at(INT32, view, pos)
        if size < 2 or len(view) - pos - 4 < size:
            raise Truncated(pos, 4 + max(size, 2), len(view) - pos)
        (error,) = INT16.unpack_from(view, pos + 4)
        parts.append((error, view[pos + 6:pos + 4 + size]))
        pos += 4 + size
    return parts
