"""Fetched message sets as Arrow columns: the same messages and 0.7 offsets as the reference
iterator (codec/kafka07/message_set.iter_messages), in every CRC mode. No Spark, no sockets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twisted_broker.errors import CorruptWrapper, CrcMismatch
from twisted_broker.spark.message_columns import MessageColumns, decode_message_set
from twisted_broker.codec.kafka07.compression import GZIP, NO_COMPRESSION, SNAPPY
from twisted_broker.codec.kafka07.message import MAGIC_0, MAGIC_1, Message, make_message
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, encode_messages, iter_messages

# One produced batch: (codec or "magic0", payloads).
batches = st.lists(st.tuples(st.sampled_from([NO_COMPRESSION, GZIP, SNAPPY, "magic0"]),
                             st.lists(st.binary(max_size=40), min_size=1, max_size=6)), max_size=8)


def _encode(batch_list) -> bytes:
    parts = []
    for codec, payloads in batch_list:
        if codec == "magic0":
            parts.append(encode_messages([make_message(p, magic=MAGIC_0) for p in payloads]))
        else:
            parts.append(encode_compressed_message_set(payloads, codec))
    return b"".join(parts)


def _columns(columns):
    return list(zip(columns.offset.to_pylist(), columns.next_offset.to_pylist(), columns.payload.to_pylist()))


@settings(max_examples=150, deadline=None)
@given(batches, st.integers(min_value=0, max_value=2**40), st.integers(min_value=0, max_value=12))
def test_columns_match_the_reference_iterator(batch_list, base_offset, cut):
    data = _encode(batch_list)
    data = data[:len(data) - cut] if cut < len(data) else data  # a partial tail is ignored
    expected = [(o, n, bytes(m.payload)) for o, n, m in iter_messages(data, base_offset)]
    for crc in ("fail", "mark", "none"):
        columns = decode_message_set(data, base_offset, crc=crc)
        assert _columns(columns) == expected
        assert columns.crc_failures == 0
        flags = columns.crc_valid.to_pylist()
        assert flags == ([None] * len(expected) if crc == "none" else [True] * len(expected))


def _with_bad_crc(payload: bytes) -> bytes:
    good = make_message(payload)
    return encode_messages([Message(MAGIC_1, 0, good.crc ^ 1, payload)])


def test_a_crc_mismatch_fails_at_its_log_offset_or_is_marked():
    first = encode_compressed_message_set([b"a", b"b"], NO_COMPRESSION)
    data = first + _with_bad_crc(b"bad") + encode_compressed_message_set([b"c"], GZIP)
    with pytest.raises(CrcMismatch) as caught:
        decode_message_set(data, 1000)
    assert caught.value.position == 1000 + len(first)
    marked = decode_message_set(data, 1000, crc="mark")
    assert marked.payload.to_pylist() == [b"a", b"b", b"bad", b"c"]
    assert marked.crc_valid.to_pylist() == [True, True, False, True]
    assert marked.crc_failures == 1
    assert decode_message_set(data, 1000, crc="none").crc_failures == 0


def test_a_wrapper_with_a_bad_inner_crc_marks_only_that_message():
    inner = encode_messages([make_message(b"x"), Message(MAGIC_1, 0, make_message(b"y").crc ^ 1, b"y")])
    from twisted_broker.codec.kafka07.compression import compress
    data = encode_messages([make_message(compress(GZIP, inner), codec=GZIP)])
    marked = decode_message_set(data, 0, crc="mark")
    assert marked.crc_valid.to_pylist() == [True, False]
    assert marked.offset.to_pylist() == [0, 0] and marked.next_offset.to_pylist() == [0, len(data)]
    with pytest.raises(CrcMismatch):
        decode_message_set(data, 0)


def test_a_wrapper_that_does_not_decompress_is_one_invalid_row_when_marking():
    broken = make_message(b"\x1f\x8b not gzip at all", codec=GZIP)  # its CRC is right
    data = encode_compressed_message_set([b"a"], NO_COMPRESSION) + encode_messages([broken])
    with pytest.raises(CorruptWrapper) as caught:
        decode_message_set(data, 50)
    assert caught.value.position == 50 + 11
    marked = decode_message_set(data, 50, crc="mark")
    assert marked.payload.to_pylist() == [b"a", bytes(broken.payload)]
    assert marked.crc_valid.to_pylist() == [True, False]
    assert marked.next_offset.to_pylist() == [61, 50 + len(data)]


def test_a_plain_message_with_an_unknown_attribute_bit_leaves_the_fast_loop_and_still_reads():
    odd = Message(MAGIC_1, 0x04, make_message(b"odd").crc, b"odd")  # codec bits 0: plain
    data = encode_compressed_message_set([b"a", b"b"], NO_COMPRESSION) + encode_messages([odd]) \
        + encode_compressed_message_set([b"c"], NO_COMPRESSION)
    expected = [(o, n, bytes(m.payload)) for o, n, m in iter_messages(data, 7)]
    columns = decode_message_set(data, 7)
    assert _columns(columns) == expected and [row[2] for row in expected] == [b"a", b"b", b"odd", b"c"]
    assert columns.valid_bytes == len(data)


def test_consecutive_fetches_concatenate_into_one_batch_in_log_order():
    first = encode_compressed_message_set([b"a", b"b"], NO_COMPRESSION)
    second = _with_bad_crc(b"bad") + encode_compressed_message_set([b"c"], GZIP)
    parts = [decode_message_set(first, 100, crc="mark"), decode_message_set(second, 100 + len(first), crc="mark")]
    joined = MessageColumns.concat(parts)
    assert _columns(joined) == _columns(decode_message_set(first + second, 100, crc="mark"))
    assert joined.crc_valid.to_pylist() == [True, True, False, True]
    assert (joined.crc_failures, joined.valid_bytes) == (1, len(first) + len(second))
    assert MessageColumns.concat(parts[:1]) is parts[0]
