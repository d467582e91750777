"""Message sets of magic 0 and 1 (Kafka 0.8-0.10): decoding produced ones, encoding fetched ones."""

import gzip
import struct
import zlib

import lz4.frame
import pytest
from hypothesis import given
from hypothesis import strategies as st
import snappy

from twisted_broker.codec.kafka.legacy_sets import (
    LegacyRecord, LegacySetError, decode_legacy_set, encode_legacy_set,
)
from twisted_broker.codec.kafka07.compression import SNAPPY, compress


def message(value, key=None, *, magic=1, attributes=0, timestamp=1_700_000_000_000, offset=0) -> bytes:
    """One entry built field by field, as a Kafka 0.10 client frames it."""
    body = struct.pack(">BB", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


INNER = [(b"one", b"k1"), (b"two", None), (None, b"k3")]


def inner_set(magic=1) -> bytes:
    return b"".join(message(v, k, magic=magic, offset=i, timestamp=1000 + i) for i, (v, k) in enumerate(INNER))


def expected(magic=1) -> list[LegacyRecord]:
    return [LegacyRecord(1000 + i if magic else -1, k, v, magic) for i, (v, k) in enumerate(INNER)]


def test_plain_messages_of_both_magics_keep_key_value_and_timestamp():
    data = inner_set(1) + message(b"old", b"k", magic=0)
    assert decode_legacy_set(data) == expected(1) + [LegacyRecord(-1, b"k", b"old", 0)]


@pytest.mark.parametrize("codec,compressor", [
    (1, gzip.compress),
    (2, lambda data: compress(SNAPPY, data)),  # xerial framing, as the Java client writes it
    (2, snappy.compress),  # raw snappy, as some clients write it
    (3, lz4.frame.compress),
])
def test_compressed_wrappers_expand_in_order(codec, compressor):
    wrapper = message(compressor(inner_set()), attributes=codec, offset=2)
    assert decode_legacy_set(message(b"before") + wrapper) == [
        LegacyRecord(1_700_000_000_000, None, b"before", 1)] + expected()


def test_magic_0_lz4_with_the_old_header_checksum_is_read():
    frame = bytearray(lz4.frame.compress(inner_set(0), content_checksum=False))
    frame[6] ^= 0x5A  # KAFKA-3160: pre-0.10 clients computed the descriptor checksum wrongly
    assert decode_legacy_set(message(bytes(frame), magic=0, attributes=3)) == expected(0)


def test_a_partial_tail_is_dropped_but_a_bad_crc_is_refused_with_its_position():
    data = inner_set()
    assert decode_legacy_set(data + message(b"cut")[:20]) == expected()
    damaged = bytearray(data)
    damaged[-1] ^= 1
    with pytest.raises(LegacySetError) as caught:
        decode_legacy_set(bytes(damaged))
    assert caught.value.position == len(data) - len(message(None, b"k3", timestamp=1002))


@pytest.mark.parametrize("bad,reason", [
    (message(b"x", magic=2), "magic 2"),
    (message(b"not gzip", attributes=1), "gzip"),
    (message(b"x", attributes=5), "unknown compression codec 5"),
    (message(None, attributes=1), "without a value"),
    (message(gzip.compress(message(gzip.compress(inner_set()), attributes=1)), attributes=1), "inside"),
    (struct.pack(">qi", 0, 3) + b"abc", "below the 14-byte minimum"),
])
def test_malformed_sets_get_a_clear_error(bad, reason):
    with pytest.raises(LegacySetError, match=reason):
        decode_legacy_set(bad)


def test_a_wrapper_that_expands_past_the_bound_is_refused():
    bomb = message(gzip.compress(message(b"\0" * 100_000)), attributes=1)
    with pytest.raises(LegacySetError, match="expands past"):
        decode_legacy_set(bomb, max_bytes=10_000)


def test_encoded_sets_are_magic_1_with_null_keys_and_decode_back():
    records = [(100, 5000, b"a"), (101, 5001, None), (250, 5002, b"x" * 300)]
    data = encode_legacy_set(records)
    assert decode_legacy_set(data) == [LegacyRecord(ts, None, value, 1) for _o, ts, value in records]
    assert struct.unpack_from(">qi", data, 0) == (100, 4 + 1 + 1 + 8 + 4 + 4 + 1)
    assert data[:len(message(b"a", timestamp=5000, offset=100))] == message(b"a", timestamp=5000, offset=100)


@given(st.lists(st.tuples(st.integers(0, 2**62), st.integers(-1, 2**62), st.one_of(st.none(), st.binary(max_size=200))),
                max_size=20))
def test_encoded_magic_1_sets_decode_to_what_was_encoded(records):
    decoded = decode_legacy_set(encode_legacy_set(records))
    assert [(r.timestamp, r.key, r.value, r.magic) for r in decoded] == [(ts, None, v, 1) for _o, ts, v in records]
