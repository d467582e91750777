"""The Kafka protocol's primitive types: golden bytes, round trips, and bad input rejected."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.errors import Truncated
from twisted_broker.codec.kafka.primitives import (
    BOOLEAN, BYTES, INT8_T, INT16_T, INT32_T, INT64_T, NULLABLE_BYTES, NULLABLE_STRING, RECORDS,
    STRING, UINT32_T, VARINT, VARLONG, Array, ChunkWriter, Gap, Malformed, NullableArray,
    decode_varint, varint_bytes,
)


def encoded(ftype, value):
    out = bytearray()
    ftype.encode(value, out)
    return bytes(out)


@pytest.mark.parametrize("ftype, value, wire", [
    (INT8_T, -1, b"\xff"),
    (INT16_T, 258, b"\x01\x02"),
    (INT32_T, -2, b"\xff\xff\xff\xfe"),
    (INT64_T, 1, b"\0\0\0\0\0\0\0\x01"),
    (UINT32_T, 0xFFFFFFFF, b"\xff\xff\xff\xff"),
    (BOOLEAN, True, b"\x01"),
    (STRING, "ab", b"\x00\x02" b"ab"),
    (STRING, "é", b"\x00\x02" b"\xc3\xa9"),  # UTF-8 byte count, not characters
    (NULLABLE_STRING, None, b"\xff\xff"),
    (BYTES, b"xyz", b"\x00\x00\x00\x03" b"xyz"),
    (NULLABLE_BYTES, None, b"\xff\xff\xff\xff"),
    (Array(INT16_T), [1, 2], b"\x00\x00\x00\x02" b"\x00\x01" b"\x00\x02"),
    (NullableArray(INT16_T), None, b"\xff\xff\xff\xff"),
    (VARINT, 0, b"\x00"),
    (VARINT, -1, b"\x01"),  # zigzag: -1 -> 1
    (VARINT, 1, b"\x02"),
    (VARINT, 300, b"\xd8\x04"),  # 600 in base-128 groups
    (VARLONG, -(1 << 63), b"\xff" * 9 + b"\x01"),
])
def test_golden_bytes_encode_and_decode(ftype, value, wire):
    assert encoded(ftype, value) == wire
    assert ftype.decode(b"?" + wire + b"!", 1) == (value, 1 + len(wire))


@given(st.integers(-(1 << 63), (1 << 63) - 1), st.binary(max_size=4))
def test_varlong_round_trips(value, before):
    buf = before + varint_bytes(value)
    assert decode_varint(buf, len(before)) == (value, len(buf))


@given(st.integers(-(1 << 31), (1 << 31) - 1))
def test_varint_round_trips_and_is_at_most_five_bytes(value):
    wire = encoded(VARINT, value)
    assert len(wire) <= 5
    assert VARINT.decode(wire, 0) == (value, len(wire))


def test_varint_out_of_int32_range_is_malformed():
    with pytest.raises(Malformed):
        VARINT.decode(varint_bytes(1 << 31), 0)


def test_runaway_varint_is_malformed_not_looped():
    with pytest.raises(Malformed):
        decode_varint(b"\x80" * 11 + b"\x00", 0)


def test_varint_cut_short_is_truncated():
    with pytest.raises(Truncated):
        decode_varint(b"\x80\x80", 0)


@given(st.one_of(st.none(), st.text(max_size=50)))
def test_nullable_string_round_trips(value):
    assert NULLABLE_STRING.decode(encoded(NULLABLE_STRING, value), 0)[0] == value


@given(st.lists(st.binary(max_size=10), max_size=5))
def test_array_of_bytes_round_trips(value):
    wire = encoded(Array(BYTES), value)
    assert Array(BYTES).decode(wire, 0) == (value, len(wire))


@pytest.mark.parametrize("ftype, wire", [
    (STRING, b"\xff\xff"),              # null where no null is allowed
    (STRING, b"\xff\xfe"),              # -2 is never a length
    (BYTES, b"\xff\xff\xff\xff"),
    (Array(INT8_T), b"\xff\xff\xff\xff"),
    (STRING, b"\x00\x02\xff\xfe"),      # not UTF-8
])
def test_impossible_fields_are_malformed(ftype, wire):
    with pytest.raises(Malformed):
        ftype.decode(wire, 0)


@pytest.mark.parametrize("ftype, wire", [
    (INT32_T, b"\x00\x00"),
    (STRING, b"\x00\x05ab"),
    (BYTES, b"\x00\x00\x00\x09abc"),
    (Array(INT32_T), b"\x7f\xff\xff\xff\x00"),  # a hostile count fails before any list is built
])
def test_fields_cut_short_are_truncated(ftype, wire):
    with pytest.raises(Truncated):
        ftype.decode(wire, 0)


def test_records_decode_to_a_view_of_the_buffer_not_a_copy():
    buf = bytearray(b"\x00\x00\x00\x03abc")
    view, _ = RECORDS.decode(buf, 0)
    buf[4:5] = b"z"
    assert bytes(view) == b"zbc"


def test_a_gap_in_records_cuts_the_chunks_and_counts_its_size():
    out = ChunkWriter()
    out += b"head"
    RECORDS.encode(Gap(1000, "file region"), out)
    out += b"tail"
    chunks = out.finish()
    assert chunks[0] == b"head" b"\x00\x00\x03\xe8"
    assert chunks[1].size == 1000 and chunks[1].fill == "file region"
    assert chunks[2] == b"tail"


def test_a_gap_outside_a_chunk_writer_is_refused():
    with pytest.raises(TypeError):
        RECORDS.encode(Gap(10), bytearray())
