"""GZIP and the snappy-java 1.0.4.1 stream format, with the max_bytes bound on expansion."""

import random
import struct
import zlib

import pytest
import snappy
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.codec.kafka07.compression import (
    GZIP, NO_COMPRESSION, SNAPPY, SNAPPY_BLOCK_BYTES, DecompressionError, compress, decompress,
)

SNAPPY_HEADER = (b"\x82SNAPPY\x00"    # magic
                 b"\x00\x00\x00\x01"  # version: 1
                 b"\x00\x00\x00\x01")  # minimum compatible version: 1
KIB = 1024


def noise(size: int) -> bytes:
    """Incompressible bytes, the same on every run."""
    return random.Random(size).randbytes(size)


def snappy_java_stream(*blocks: bytes) -> bytes:
    """A stream built by hand: the header, then each block as int32 length + raw Snappy."""
    framed = [struct.pack(">i", len(raw)) + raw for raw in map(snappy.compress, blocks)]
    return SNAPPY_HEADER + b"".join(framed)


def split_blocks(stream: bytes) -> list[bytes]:
    """The raw Snappy blocks of a snappy-java stream, each decompressed."""
    pos, blocks = len(SNAPPY_HEADER), []
    while pos < len(stream):
        (length,) = struct.unpack_from(">i", stream, pos)
        blocks.append(snappy.uncompress(stream[pos + 4:pos + 4 + length]))
        pos += 4 + length
    assert pos == len(stream)
    return blocks


@given(st.binary(max_size=2000), st.sampled_from([GZIP, SNAPPY]))
def test_compress_then_decompress_gives_the_data_back(data, codec):
    assert decompress(codec, compress(codec, data)) == data


def test_gzip_output_is_an_rfc1952_stream_any_reader_accepts():
    assert zlib.decompress(compress(GZIP, b"abc" * 100), 31) == b"abc" * 100


def test_gzip_reader_accepts_concatenated_members():
    assert decompress(GZIP, compress(GZIP, b"ab") + compress(GZIP, b"cd")) == b"abcd"


def test_snappy_stream_opens_with_the_snappy_java_header():
    assert compress(SNAPPY, b"hello")[:16] == SNAPPY_HEADER
    assert compress(SNAPPY, b"") == SNAPPY_HEADER  # no data, no blocks


def test_snappy_writer_cuts_32_kib_blocks_each_framed_by_its_length():
    data = noise(3 * SNAPPY_BLOCK_BYTES + 100)
    blocks = split_blocks(compress(SNAPPY, data))
    assert SNAPPY_BLOCK_BYTES == 32 * KIB
    assert [len(block) for block in blocks] == [32 * KIB, 32 * KIB, 32 * KIB, 100]
    assert b"".join(blocks) == data


def test_snappy_reader_joins_several_blocks_of_a_large_payload():
    data = noise(100 * KIB)
    assert decompress(SNAPPY, compress(SNAPPY, data)) == data


def test_snappy_reader_accepts_blocks_of_any_size():
    parts = [noise(10), noise(70 * KIB), b"\x00" * 5000]
    assert decompress(SNAPPY, snappy_java_stream(*parts)) == b"".join(parts)


def test_snappy_reader_ignores_the_version_but_honours_the_minimum_version():
    newer = b"\x82SNAPPY\x00" b"\x00\x00\x00\x02" b"\x00\x00\x00\x01"
    assert decompress(SNAPPY, newer + snappy_java_stream(b"ok")[16:]) == b"ok"
    too_new = b"\x82SNAPPY\x00" b"\x00\x00\x00\x02" b"\x00\x00\x00\x02"
    with pytest.raises(DecompressionError):
        decompress(SNAPPY, too_new + snappy_java_stream(b"ok")[16:])


@pytest.mark.parametrize("cut", [1, 4, 6, 100], ids=lambda cut: f"last-{cut}-bytes-missing")
def test_snappy_stream_with_a_truncated_block_is_refused(cut):
    stream = snappy_java_stream(noise(1000), noise(1000))
    with pytest.raises(DecompressionError):
        decompress(SNAPPY, stream[:-cut])


def test_snappy_block_whose_raw_data_is_corrupt_is_refused():
    raw = snappy.compress(noise(1000))[:-10]  # framed length matches, the block does not decode
    with pytest.raises(DecompressionError):
        decompress(SNAPPY, SNAPPY_HEADER + struct.pack(">i", len(raw)) + raw)


@pytest.mark.parametrize("stream", [
    b"", SNAPPY_HEADER[:15], snappy.compress(b"raw snappy, no header"),
    SNAPPY_HEADER + b"\x00\x00",  # half a block length
    SNAPPY_HEADER + b"\xff\xff\xff\xff",  # negative block length
], ids=["empty", "short-header", "raw-snappy", "half-length", "negative-length"])
def test_snappy_stream_without_valid_framing_is_refused(stream):
    with pytest.raises(DecompressionError):
        decompress(SNAPPY, stream)


@pytest.mark.parametrize("cut", [1, 8, 20], ids=lambda cut: f"last-{cut}-bytes-missing")
def test_gzip_stream_truncated_is_refused(cut):
    stream = compress(GZIP, noise(1000))
    with pytest.raises(DecompressionError):
        decompress(GZIP, stream[:-cut])


def test_gzip_garbage_is_refused():
    with pytest.raises(DecompressionError):
        decompress(GZIP, b"this is not gzip")


@pytest.mark.parametrize("codec", [GZIP, SNAPPY])
def test_max_bytes_stops_a_small_stream_expanding_to_a_megabyte(codec):
    bomb = compress(codec, bytes(1024 * KIB))
    assert len(bomb) < 64 * KIB
    with pytest.raises(DecompressionError):
        decompress(codec, bomb, max_bytes=1000)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY])
def test_max_bytes_allows_exactly_that_many_bytes(codec):
    data = noise(40 * KIB)  # two snappy blocks
    stream = compress(codec, data)
    assert decompress(codec, stream, max_bytes=len(data)) == data
    with pytest.raises(DecompressionError):
        decompress(codec, stream, max_bytes=len(data) - 1)


def test_max_bytes_counts_all_gzip_members_together():
    stream = compress(GZIP, b"a" * 600) + compress(GZIP, b"b" * 600)
    with pytest.raises(DecompressionError):
        decompress(GZIP, stream, max_bytes=1000)


@pytest.mark.parametrize("codec", [NO_COMPRESSION, 3])
def test_only_gzip_and_snappy_are_codecs(codec):
    with pytest.raises(ValueError):
        compress(codec, b"x")
    with pytest.raises(DecompressionError):
        decompress(codec, b"x")
