"""Compression codecs of 0.7 wrapper messages: GZIP (RFC 1952) and snappy-java's stream format.

The snappy-java 1.0.4.1 stream that 0.7 producers write is neither raw Snappy nor the later
framing format: a 16-byte header (8 magic bytes, int32 version, int32 minimum compatible
version), then blocks of ``int32 compressed length`` + one raw Snappy block. The raw blocks are
done by the snappy binding; only that framing is ours.

Decompression is bounded by ``max_bytes`` so a small hostile wrapper cannot expand into
gigabytes inside the broker.
"""

from __future__ import annotations

import struct
import sys
import zlib

try:
    import snappy
except ModuleNotFoundError:  # a Spark executor given this package alone (spark/executor_code.py)
    snappy = None

try:  # zlib-ng inflates a 50-message wrapper ~20% faster (installed with the package: codec/kafka07/crc.py)
    from zlib_ng import zlib_ng as inflate_library
except ModuleNotFoundError:  # the stdlib's does the same, a little slower (a Spark executor, as above)
    inflate_library = zlib

NO_COMPRESSION = 0
GZIP = 1
SNAPPY = 2
CODEC_NAMES = {NO_COMPRESSION: "none", GZIP: "gzip", SNAPPY: "snappy"}
CODECS_BY_NAME = {name: codec for codec, name in CODEC_NAMES.items()}

SNAPPY_JAVA_MAGIC = b"\x82SNAPPY\x00"
_SNAPPY_HEADER = struct.Struct(">8sii")  # magic, version, minimum compatible version
_SNAPPY_BLOCK = struct.Struct(">i")  # compressed length of the block that follows
SNAPPY_BLOCK_BYTES = 32 * 1024  # snappy-java's writer block size
DEFAULT_MAX_BYTES = 128 * 1024 * 1024


class DecompressionError(ValueError):
    """The compressed bytes are malformed, truncated, or expand past the allowed size."""


class CodecUnavailable(ImportError):
    """The binding a codec needs is not installed in this Python (not a fault of the data:
    never reported as a damaged message)."""


def _snappy_binding():
    if snappy is None:
        raise CodecUnavailable(f"snappy: the module snappy (pip install python-snappy) is not installed in "
                               f"{sys.executable}; install it where this runs (for a Spark job: every "
                               "executor's Python)", name="snappy")
    return snappy


def compress(codec: int, data: bytes | memoryview) -> bytes:
    """Compress ``data`` with ``codec`` (GZIP or SNAPPY). Raises ValueError for other codecs."""
    if codec == GZIP:
        # mtime 0 and one deflate stream, as Java's GZIPOutputStream writes; readers must accept
        # any header, so only decompressed bytes are comparable across implementations.
        packer = zlib.compressobj(6, zlib.DEFLATED, 31)
        return packer.compress(data) + packer.flush()
    if codec == SNAPPY:
        return _snappy_java_compress(data)
    raise ValueError(f"cannot compress with codec {codec}")


def decompress(codec: int, data: bytes | memoryview, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """Decompress a wrapper payload. Raises DecompressionError (bad data, over ``max_bytes``)."""
    if codec == GZIP:
        return _gunzip(data, max_bytes)
    if codec == SNAPPY:
        return _snappy_java_decompress(data, max_bytes)
    raise DecompressionError(f"unknown compression codec {codec}")


def _gunzip(data: bytes | memoryview, max_bytes: int) -> bytes:
    out = []
    total = 0
    remaining = data
    while True:  # Java and Python both accept concatenated gzip members; so do we
        unpacker = inflate_library.decompressobj(31)
        try:
            chunk = unpacker.decompress(remaining, max_bytes - total + 1)
        except inflate_library.error as exc:
            raise DecompressionError(f"gzip: {exc}") from None
        total += len(chunk)
        if total > max_bytes:
            raise DecompressionError(f"gzip: expands past {max_bytes} bytes")
        if not unpacker.eof:
            raise DecompressionError("gzip: stream is truncated")
        out.append(chunk)
        remaining = unpacker.unused_data
        if not remaining:
            return b"".join(out)


def _snappy_java_compress(data: bytes | memoryview) -> bytes:
    view = memoryview(data)
    parts = [_SNAPPY_HEADER.pack(SNAPPY_JAVA_MAGIC, 1, 1)]
    for start in range(0, len(view), SNAPPY_BLOCK_BYTES):
        block = _snappy_binding().compress(view[start:start + SNAPPY_BLOCK_BYTES])
        parts.append(_SNAPPY_BLOCK.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_java_decompress(data: bytes | memoryview, max_bytes: int) -> bytes:
    binding = _snappy_binding()
    view = memoryview(data)
    if len(view) < _SNAPPY_HEADER.size:
        raise DecompressionError("snappy: shorter than the snappy-java header")
    magic, _version, min_version = _SNAPPY_HEADER.unpack_from(view, 0)
    if magic != SNAPPY_JAVA_MAGIC:
        raise DecompressionError("snappy: missing the snappy-java stream header")
    if min_version > 1:
        raise DecompressionError(f"snappy: stream needs reader version {min_version}")
    out = []
    total = 0
    pos = _SNAPPY_HEADER.size
    while pos < len(view):
        if len(view) - pos < 4:
            raise DecompressionError(f"snappy: truncated block length at byte {pos}")
        (length,) = _SNAPPY_BLOCK.unpack_from(view, pos)
        pos += 4
        if length < 0 or len(view) - pos < length:
            raise DecompressionError(f"snappy: block at byte {pos - 4} overruns the stream")
        block = view[pos:pos + length]
        # The raw block starts with its uncompressed length as a varint: check it before
        # decompressing, so the bound holds without allocating the expansion first.
        total += _snappy_uncompressed_length(block)
        if total > max_bytes:
            raise DecompressionError(f"snappy: expands past {max_bytes} bytes")
        try:
            out.append(binding.uncompress(block))
        except binding.UncompressError as exc:
            raise DecompressionError(f"snappy: {exc}") from None
        pos += length
    return b"".join(out)


def _snappy_uncompressed_length(block: memoryview) -> int:
    value = shift = 0
    for index in range(min(len(block), 5)):
        byte = block[index]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    raise DecompressionError("snappy: bad block length preamble")
