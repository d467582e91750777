"""Compression of record batches (magic 2): gzip, snappy, lz4, zstd, each bounded.

The codec is the low 3 bits of a batch's attributes. What each client sends:
- gzip: one or more RFC 1952 members (twisted_broker.codec.kafka07.compression reads them);
- snappy: Java and kafka-python send snappy-java's stream framing ("xerial": magic header,
  then int32-length-prefixed raw blocks), librdkafka sends one raw Snappy block; both are
  read, told apart by the framing's 8-byte magic (a raw block cannot start with it: its
  first byte would declare an uncompressed length past 2^32);
- lz4: one LZ4 frame (magic 2 fixed the header checksum that magic 0/1 got wrong);
- zstd: one or more zstd frames.

Every decompression stops at ``max_bytes`` so a small hostile batch cannot expand into
gigabytes in the broker; past it, or for bytes that are not the codec's, DecompressionError
(twisted_broker.codec.kafka07.compression's, so both listeners report damage the same way). Codecs 5-7
do not exist: UnsupportedCompression. Pure: no I/O.
"""

from __future__ import annotations

import lz4.frame
import zstandard

from twisted_broker.codec.kafka07 import compression as legacy
from twisted_broker.codec.kafka07.compression import (  # codecs 0-2 are 0.7's, with its bound
    DEFAULT_MAX_BYTES, GZIP, NO_COMPRESSION, SNAPPY, DecompressionError,
)

LZ4 = 3
ZSTD = 4
RECORD_CODEC_NAMES = {NO_COMPRESSION: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
RECORD_CODECS_BY_NAME = {name: codec for codec, name in RECORD_CODEC_NAMES.items()}

_ZSTD_READ_BYTES = 1 << 20


class UnsupportedCompression(ValueError):
    """A batch names a compression codec that does not exist (5 to 7): Kafka's error 76."""

    def __init__(self, codec: int) -> None:
        super().__init__(f"unknown record batch compression codec {codec}")
        self.codec = codec


def compress(codec: int, data: bytes | memoryview) -> bytes:
    """``data`` compressed as Kafka's Java client would send it (snappy: xerial framing)."""
    if codec == NO_COMPRESSION:
        return bytes(data)
    if codec == GZIP:
        return legacy.compress(legacy.GZIP, data)
    if codec == SNAPPY:
        return legacy.compress(legacy.SNAPPY, data)
    if codec == LZ4:
        return lz4.frame.compress(bytes(data))
    if codec == ZSTD:
        return zstandard.ZstdCompressor().compress(bytes(data))
    raise UnsupportedCompression(codec)


def decompress(codec: int, data: bytes | memoryview, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The records of a batch, uncompressed. Raises DecompressionError or UnsupportedCompression."""
    if codec == NO_COMPRESSION:
        return bytes(data)
    if codec == GZIP:
        return legacy.decompress(legacy.GZIP, data, max_bytes)
    if codec == SNAPPY:
        if bytes(data[:8]) == legacy.SNAPPY_JAVA_MAGIC:
            return legacy.decompress(legacy.SNAPPY, data, max_bytes)
        return _raw_snappy(data, max_bytes)
    if codec == LZ4:
        return _lz4(data, max_bytes)
    if codec == ZSTD:
        return _zstd(data, max_bytes)
    raise UnsupportedCompression(codec)


def _raw_snappy(data: bytes | memoryview, max_bytes: int) -> bytes:
    # The 0.7 codec's helpers, not copies: one place knows the binding and the preamble.
    binding = legacy._snappy_binding()
    view = memoryview(data)
    # The block's varint preamble says how large it expands: checked before allocating it.
    if legacy._snappy_uncompressed_length(view) > max_bytes:
        raise DecompressionError(f"snappy: expands past {max_bytes} bytes")
    try:
        return binding.uncompress(view)
    except binding.UncompressError as exc:
        raise DecompressionError(f"snappy: {exc}") from None


def _lz4(data: bytes | memoryview, max_bytes: int) -> bytes:
    # One frame, as Java's KafkaLZ4BlockOutputStream, librdkafka and kafka-python write it
    # (and the only one Java's reader looks at): bytes after it are damage, not more records.
    unpacker = lz4.frame.LZ4FrameDecompressor()
    try:
        records = unpacker.decompress(bytes(data), max_length=max_bytes + 1)
    except RuntimeError as exc:  # lz4's error type for malformed frames
        raise DecompressionError(f"lz4: {exc}") from None
    if len(records) > max_bytes:
        raise DecompressionError(f"lz4: expands past {max_bytes} bytes")
    if not unpacker.eof:
        raise DecompressionError("lz4: frame is truncated")
    if unpacker.unused_data:
        raise DecompressionError(f"lz4: {len(unpacker.unused_data)} bytes after the frame")
    return records


def _zstd(data: bytes | memoryview, max_bytes: int) -> bytes:
    reader = zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True)
    out, total = [], 0
    try:
        while True:
            chunk = reader.read(_ZSTD_READ_BYTES)
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:
                raise DecompressionError(f"zstd: expands past {max_bytes} bytes")
            out.append(chunk)
    except zstandard.ZstdError as exc:
        raise DecompressionError(f"zstd: {exc}") from None
    if not total and len(data):
        _zstd_check_frame(data)
    return b"".join(out)


def _zstd_check_frame(data: bytes | memoryview) -> None:
    # A stream reader returns nothing, not an error, for input that holds no frame at all.
    try:
        zstandard.get_frame_parameters(bytes(data))
    except zstandard.ZstdError as exc:
        raise DecompressionError(f"zstd: {exc}") from None

