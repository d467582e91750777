"""Requests and responses of the Kafka protocol as whole frames: headers plus schema'd bodies.

A frame on the wire is ``int32 size`` + header + body. Requests use header v1
(api_key INT16, api_version INT16, correlation_id INT32, client_id NULLABLE_STRING), responses
header v0 (correlation_id INT32): all the non-flexible versions this broker serves.
``REQUESTS``/``RESPONSES`` map ``(api_key, version)`` to the body's Schema.

Server side: ``peek_header`` reads the three fixed fields without decoding anything else (to
answer an unsupported version); ``decode_request`` decodes a frame's contents (the bytes after
the size) into a ``Request``; ``encode_response`` returns a whole frame, and
``encode_response_chunks`` the same as chunks with Gaps (see log_schemas.py for Fetch).
Client side (tests, clients): ``encode_request`` and ``decode_response``.

Errors: Truncated and Malformed (primitives.py) for bytes that are not a valid request,
``UnsupportedVersion`` for a (key, version) outside ``api_keys.SUPPORTED``. Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted_broker.errors import Truncated
from twisted_broker.codec.kafka import acl_schemas, cluster_schemas, group_schemas, log_schemas, sasl_schemas
from twisted_broker.codec.kafka.api_keys import API_NAMES, API_VERSIONS, SUPPORTED
from twisted_broker.codec.kafka.errors import NONE, UNSUPPORTED_VERSION
from twisted_broker.codec.kafka.primitives import INT32, NULLABLE_STRING, Buffer, Gap, Malformed
from twisted_broker.codec.kafka.schema import Schema, chunks_size, encode_chunks

REQUESTS: dict[tuple[int, int], Schema] = {}
RESPONSES: dict[tuple[int, int], Schema] = {}
for _module in (cluster_schemas, log_schemas, group_schemas, sasl_schemas, acl_schemas):
    REQUESTS.update(_module.REQUESTS)
    RESPONSES.update(_module.RESPONSES)

_HEADER_FIXED = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_SIZE_AND_CORRELATION = struct.Struct(">ii")


class UnsupportedVersion(ValueError):
    """A request whose (api_key, api_version) this broker does not serve."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        name = API_NAMES.get(api_key, f"api key {api_key}")
        super().__init__(f"{name} v{api_version} is not supported")
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id


@dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: dict
    # Not on the wire: the listener sets the peer's address, as Kafka's brokers show a
    # group member's host ("/127.0.0.1").
    client_host: str = ""
    # Not on the wire: who sent it, as Kafka's authorizer names principals ("User:alice"); the
    # listener sets it from the connection's authentication.
    principal: str = "User:ANONYMOUS"
    # Not on the wire: the name of the listener it came in on (Kafka's listener names:
    # Metadata answers with the brokers' endpoints of the same name). "" for requests made
    # outside a listener (tests).
    listener: str = ""
    # Not on the wire: the frame's size (bytes after the size field), what a producer quota
    # counts; and what mutes the connection for a throttle time in ms (KIP-219,
    # docs/security.md "Quotas"), set by the listener; None outside one.
    size: int = 0
    throttle: Callable[[int], object] | None = None


def peek_header(frame: Buffer) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)`` of a request frame's contents. Raises Truncated."""
    if len(frame) < _HEADER_FIXED.size:
        raise Truncated(0, _HEADER_FIXED.size, len(frame))
    return _HEADER_FIXED.unpack_from(frame, 0)


def decode_request(frame: Buffer, **context) -> Request:
    """Decode a request frame's contents (the bytes after its size); ``context`` fills the
    fields not on the wire (``client_host``, ``principal``, ``listener``, ``throttle``).

    Raises UnsupportedVersion before reading the body (so its header fields are all that must
    be well formed), Truncated or Malformed for a body that is not its schema, trailing bytes
    included. Record sets in the body are memoryviews of ``frame``.
    """
    api_key, api_version, correlation_id = peek_header(frame)
    schema = REQUESTS.get((api_key, api_version))
    if schema is None:
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    client_id, pos = NULLABLE_STRING.decode(frame, _HEADER_FIXED.size)
    body, pos = schema.decode(frame, pos)
    if pos != len(frame):
        raise Malformed(pos, f"{len(frame) - pos} bytes after the request body")
    return Request(api_key, api_version, correlation_id, client_id, body, size=len(frame), **context)


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None,
                   body: dict) -> bytes:
    """A whole request frame (size included). Raises KeyError for an unknown (key, version)."""
    out = bytearray(b"\0\0\0\0")
    out += _HEADER_FIXED.pack(api_key, api_version, correlation_id)
    NULLABLE_STRING.encode(client_id, out)
    REQUESTS[api_key, api_version].encode(body, out)
    INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: dict) -> bytes:
    """A whole response frame (size included). Raises SchemaError for a body that lacks a field."""
    out = bytearray(_SIZE_AND_CORRELATION.size)
    RESPONSES[api_key, api_version].encode(body, out)
    _SIZE_AND_CORRELATION.pack_into(out, 0, len(out) - 4, correlation_id)
    return bytes(out)


def encode_response_chunks(api_key: int, api_version: int, correlation_id: int,
                           body: dict) -> list[bytes | Gap]:
    """A whole response frame as chunks: bytes, and a Gap wherever a record set was a Gap.

    The first chunk starts with the frame's size, which counts the gaps' sizes: the caller
    writes each bytes chunk as is and exactly ``gap.size`` bytes in place of each Gap.
    """
    chunks = encode_chunks(RESPONSES[api_key, api_version], body, prefix=bytes(_SIZE_AND_CORRELATION.size))
    size = chunks_size(chunks) - 4
    if type(chunks[0]) is Gap:  # cannot happen: the header precedes any gap; kept as a guard
        raise AssertionError("response starts with a gap")
    chunks[0] = _SIZE_AND_CORRELATION.pack(size, correlation_id) + chunks[0][_SIZE_AND_CORRELATION.size:]
    return chunks


@dataclass(frozen=True, slots=True)
class WithRecords:
    """A response body whose record sets are Gaps, each ``fill`` a list of pieces (bytes and
    file regions) of exactly ``gap.size`` bytes: sent around them, the regions streamed."""
    body: dict


def encode_response_pieces(request: Request, body: dict | WithRecords | None) -> list:
    """What answers ``request``: the response frame as pieces to write in order (bytes, and the
    fills of a WithRecords' gaps), or none for ``body`` None (a produce with acks=0).

    A request of an unserved ApiVersions version (``body`` None) is answered in the v0 layout,
    which every client reads (KIP-511).
    """
    if body is None:
        return []
    if isinstance(body, WithRecords):
        pieces = []
        for chunk in encode_response_chunks(request.api_key, request.api_version, request.correlation_id,
                                            body.body):
            pieces.extend(chunk.fill if type(chunk) is Gap else (chunk,))
        return pieces
    version = request.api_version if request.body is not None else 0
    return [encode_response(request.api_key, version, request.correlation_id, body)]


def decode_response(api_key: int, api_version: int, frame: Buffer) -> tuple[int, dict]:
    """``(correlation_id, body)`` of a response frame's contents (the bytes after its size)."""
    if len(frame) < 4:
        raise Truncated(0, 4, len(frame))
    (correlation_id,) = INT32.unpack_from(frame, 0)
    body, pos = RESPONSES[api_key, api_version].decode(frame, 4)
    if pos != len(frame):
        raise Malformed(pos, f"{len(frame) - pos} bytes after the response body")
    return correlation_id, body


def api_versions_body(error_code: int = NONE, throttle_time_ms: int = 0) -> dict[str, Any]:
    """The ApiVersions response body listing ``SUPPORTED`` (for any version of the response)."""
    return {
        "error_code": error_code,
        "api_keys": [{"api_key": key, "min_version": low, "max_version": high}
                     for key, (low, high) in sorted(SUPPORTED.items())],
        "throttle_time_ms": throttle_time_ms,
    }


def unsupported_api_versions_response(correlation_id: int) -> bytes:
    """Kafka's answer to an ApiVersions request newer than ours: error 35 and the supported
    list in the v0 layout, which every client can read and then retry with a version we know."""
    return encode_response(API_VERSIONS, 0, correlation_id, api_versions_body(UNSUPPORTED_VERSION))
