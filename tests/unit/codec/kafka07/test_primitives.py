"""string16 and the bounds-checked struct reads that every request decoder uses."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.errors import Truncated
from twisted_broker.codec.kafka07.primitives import (
    INT32, INT64, decode_short_string, encode_short_string, unpack_at,
)

TEST = (b"\x00\x04"  # length: 4 bytes
        b"test")     # topic: "test"


def test_encode_short_string_writes_the_byte_count_then_the_bytes():
    assert encode_short_string("test") == TEST
    assert encode_short_string("") == b"\x00\x00"


def test_encode_short_string_counts_utf8_bytes_not_characters():
    # 0.7's Java client wrote UTF-16 units here (1 for "é"), corrupting the request.
    assert encode_short_string("é") == b"\x00\x02" b"\xc3\xa9"


def test_encode_short_string_accepts_32767_bytes_and_refuses_32768():
    assert len(encode_short_string("a" * 0x7FFF)) == 2 + 0x7FFF
    with pytest.raises(ValueError):
        encode_short_string("a" * 0x8000)


@given(st.text(max_size=200), st.binary(max_size=8), st.binary(max_size=8))
def test_short_string_round_trips_at_any_position(value, before, after):
    buf = before + encode_short_string(value) + after
    decoded, pos = decode_short_string(memoryview(buf), len(before))
    assert decoded == value
    assert pos == len(buf) - len(after)


def test_decode_short_string_returns_the_position_after_it():
    assert decode_short_string(TEST + b"\x00\x00\x00\x00", 0) == ("test", 6)


@pytest.mark.parametrize("buf", [b"", b"\x00", b"\x00\x04", b"\x00\x04tes"],
                         ids=["empty", "half-length", "no-bytes", "short-bytes"])
def test_decode_short_string_of_a_short_buffer_is_truncated_at_its_start(buf):
    with pytest.raises(Truncated) as info:
        decode_short_string(b"junk" + buf, 4)
    assert info.value.position == 4


def test_decode_short_string_refuses_a_negative_length():
    # 0.7 reads length -1 as a null string; no request may carry a null topic.
    with pytest.raises(Truncated) as info:
        decode_short_string(b"xy" + b"\xff\xff" + b"test", 2)
    assert info.value.position == 2


def test_decode_short_string_refuses_bytes_that_are_not_utf8():
    with pytest.raises(UnicodeDecodeError):
        decode_short_string(b"\x00\x01" b"\xff", 0)


def test_unpack_at_reads_big_endian_at_the_position():
    assert unpack_at(INT32, b"\xaa" b"\x00\x00\x01\x00", 1) == (256,)
    assert unpack_at(INT64, b"\xff" * 8, 0) == (-1,)


@pytest.mark.parametrize("pos", [3, 9, 10, 12])  # 10 bytes: an int64 fits at 0..2
def test_unpack_at_past_the_end_is_truncated_at_the_position(pos):
    with pytest.raises(Truncated) as info:
        unpack_at(INT64, bytes(10), pos)
    assert info.value.position == pos
    assert isinstance(info.value, ValueError)
