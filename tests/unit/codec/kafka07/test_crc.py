"""The message CRC: IEEE CRC-32 as java.util.zip.CRC32, from zlib-ng, zlib and crcmod alike."""

import zlib

from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.codec.kafka07.crc import crc32, crcmod_crc32


def test_crc32_gives_the_standard_check_value():
    # The catalogue check value of CRC-32/ISO-HDLC; CRC-32C would give 0xE3069283.
    assert crc32(b"123456789") == 0xCBF43926
    assert crcmod_crc32(b"123456789") == 0xCBF43926


def test_crc32_of_hello_is_the_spec_value():
    assert crc32(b"hello") == 0x3610A686  # spec 7, V1


def test_crc32_of_nothing_is_zero():
    assert crc32(b"") == 0


@given(st.binary(max_size=4096))
def test_zlib_ng_zlib_and_crcmod_agree_and_are_unsigned(data):
    value = crc32(data)
    assert value == zlib.crc32(data) == crcmod_crc32(data)
    assert 0 <= value <= 0xFFFFFFFF


def test_crc32_agrees_with_zlib_on_buffers_past_its_vector_thresholds():
    data = bytes(range(256)) * 4100  # ~1 MiB: the carry-less-multiply path, and odd tails
    for end in (len(data), len(data) - 1, 64, 63, 15):
        assert crc32(data[:end]) == zlib.crc32(data[:end])


@given(st.binary(max_size=256))
def test_crc32_reads_memoryviews_like_bytes(data):
    framed = b"\xff" + data + b"\xff"
    assert crc32(memoryview(framed)[1:-1]) == crc32(data)
