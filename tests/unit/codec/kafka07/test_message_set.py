"""Encoding message sets and reading them back with 0.7's offsets (spec 3.1, 3.4, 3.5)."""

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.errors import CorruptWrapper, InvalidMessageSize, UnknownCodec, UnknownMagic
from twisted_broker.codec.kafka07.compression import GZIP, NO_COMPRESSION, SNAPPY, compress, decompress
from twisted_broker.codec.kafka07.message import MAGIC_0, MAGIC_1, Message, make_message
from twisted_broker.codec.kafka07.message_set import (
    MAX_WRAPPER_DEPTH, encode_compressed_message_set, encode_message_set, encode_messages,
    iter_entries, iter_messages, valid_bytes,
)

payloads = st.lists(st.binary(max_size=60), max_size=8)
offsets = st.integers(0, 2 ** 40)


def reference_entry(payload: bytes, magic: int = MAGIC_1) -> bytes:
    """One entry, written as the spec's minimal encoder (section 7) writes it."""
    crc = zlib.crc32(payload) & 0xFFFFFFFF
    body = (struct.pack(">bbI", 1, 0, crc) if magic == MAGIC_1 else struct.pack(">bI", 0, crc)) + payload
    return struct.pack(">i", len(body)) + body


def wrap(codec: int, message_set: bytes) -> bytes:
    """A one-entry set holding ``message_set`` compressed in a wrapper."""
    return encode_messages([make_message(compress(codec, message_set), codec=codec)])


def payloads_of(triples) -> list[bytes]:
    return [bytes(message.payload) for _offset, _next, message in triples]


# Spec 3.5's worked example, fetched at F = 100: "x", then a GZIP wrapper of "a", "b", "c".
WORKED_EXAMPLE = (
    b"\x00\x00\x00\x07"   # 100: length 7
    b"\x01"               #      magic 1
    b"\x00"               #      codec none
    b"\x8c\xdc\x16\x83"   #      crc: CRC32("x")
    b"x"                  #      payload
    b"\x00\x00\x00\x34"   # 111: length 52
    b"\x01"               #      magic 1
    b"\x01"               #      codec gzip
    b"\x52\x59\xef\x31"   #      crc of the 46 gzip bytes
    + bytes.fromhex(      #      payload: Python's gzip (level 9, mtime 0) of the 33-byte set
        "1f8b0800000000000203"  # gzip header: deflate, no flags, mtime 0, XFL 2, OS 3
        "636060606764" "78b17d9f7322039859b8effdcf2408936de7fdfc6400"  # deflate data
        "a08291e9"              # CRC32 of the inner set
        "21000000"))            # ISIZE: 33
#                                 167: end


def test_worked_example_reports_0_7_offsets():
    assert list(iter_messages(WORKED_EXAMPLE, base_offset=100)) == [
        (100, 111, make_message(b"x")),
        (111, 111, make_message(b"a")),
        (111, 111, make_message(b"b")),
        (111, 167, make_message(b"c")),
    ]
    assert valid_bytes(WORKED_EXAMPLE) == 67


def test_worked_example_with_a_partial_tail_still_resumes_at_167():
    cut_by_max_size = WORKED_EXAMPLE + encode_message_set([b"next"])[:9]
    assert valid_bytes(cut_by_max_size) == 67
    assert [n for _o, n, _m in iter_messages(cut_by_max_size, base_offset=100)] == [111, 111, 111, 167]


def test_worked_example_wrapper_holds_the_set_we_encode_for_a_b_c():
    gzip_bytes = WORKED_EXAMPLE[11 + 10:]
    assert zlib.crc32(gzip_bytes) == 0x5259EF31
    assert decompress(GZIP, gzip_bytes) == encode_message_set([b"a", b"b", b"c"])


@given(payloads, st.sampled_from([MAGIC_0, MAGIC_1]))
def test_encode_message_set_writes_the_spec_layout(items, magic):
    assert encode_message_set(items, magic=magic) == b"".join(reference_entry(p, magic) for p in items)


@given(payloads, st.sampled_from([MAGIC_0, MAGIC_1]), offsets)
def test_iter_entries_gives_the_payloads_back_at_their_offsets(items, magic, base_offset):
    triples = list(iter_entries(encode_message_set(items, magic=magic), base_offset))
    header_bytes = 4 + (6 if magic == MAGIC_1 else 5)
    position = base_offset
    for payload, (offset, next_offset, message) in zip(items, triples, strict=True):
        assert (offset, next_offset) == (position, position + header_bytes + len(payload))
        assert (message.magic, bytes(message.payload)) == (magic, payload)
        assert message.is_valid()
        position = next_offset


def test_encode_message_set_takes_any_buffer():
    expected = encode_message_set([b"ab", b"cd"])
    assert encode_message_set([bytearray(b"ab"), memoryview(b"_cd")[1:]]) == expected
    assert encode_message_set([bytearray(b"ab"), memoryview(b"cd")], magic=MAGIC_0) == \
        encode_message_set([b"ab", b"cd"], magic=MAGIC_0)


def test_encode_messages_keeps_the_stored_crcs():
    bad = Message(MAGIC_1, 0, 0xDEADBEEF, b"x")
    assert encode_messages([bad]) == b"\x00\x00\x00\x07" b"\x01\x00" b"\xde\xad\xbe\xef" b"x"


def test_iter_entries_payloads_are_views_into_the_input():
    buf = bytearray(encode_message_set([b"hello", b"world"]))
    [(_o1, _n1, first), (_o2, _n2, second)] = iter_entries(buf)
    assert isinstance(first.payload, memoryview)
    assert first.payload.obj is buf and second.payload.obj is buf
    buf[-5:] = b"WORLD"  # same size: the views stay attached
    assert bytes(second.payload) == b"WORLD"


def test_iter_entries_does_not_check_crcs():
    [(_o, _n, message)] = iter_entries(encode_messages([Message(MAGIC_1, 0, 1, b"x")]))
    assert not message.is_valid()


@given(payloads.filter(bool), st.data())
def test_iter_entries_and_valid_bytes_ignore_a_partial_tail(items, data):
    whole = encode_message_set(items)
    cut = data.draw(st.integers(0, len(whole)))
    boundaries = [0]
    for item in items:
        boundaries.append(boundaries[-1] + 10 + len(item))
    complete = max(b for b in boundaries if b <= cut)
    assert valid_bytes(whole[:cut]) == complete
    assert payloads_of(iter_entries(whole[:cut])) == items[:boundaries.index(complete)]


@pytest.mark.parametrize("bad, error", [
    (b"\x00\x00\x00\x04" b"\x01\x00\x00\x00", InvalidMessageSize),  # length below 5
    (b"\xff\xff\xff\xff" b"\x01\x00\x00\x00\x00\x00", InvalidMessageSize),  # negative length
    (b"\x00\x00\x00\x05" b"\x01" b"\x00\x00\x00\x00", InvalidMessageSize),  # magic 1 needs 6
    (b"\x00\x00\x00\x06" b"\x02" b"\x00" b"\x00\x00\x00\x00", UnknownMagic),  # magic 2
    (b"\x00\x00\x00\x06" b"\x01" b"\x03" b"\x00\x00\x00\x00", UnknownCodec),  # codec 3
], ids=["length-4", "length-negative", "magic-1-length-5", "magic-2", "codec-3"])
def test_iter_entries_raises_at_the_position_of_a_malformed_entry(bad, error):
    good = encode_message_set([b"one", b"two"])
    with pytest.raises(error) as info:
        list(iter_entries(good + bad + good, base_offset=1000))
    assert info.value.position == len(good)


def test_valid_bytes_stops_at_a_length_below_5():
    good = encode_message_set([b"one"])
    assert valid_bytes(good + b"\x00\x00\x00\x04" b"\x00\x00\x00\x00" + good) == len(good)


@given(payloads, st.sampled_from([GZIP, SNAPPY]), offsets)
def test_compressed_set_yields_payloads_with_0_7_offsets(items, codec, base_offset):
    wrapper = encode_compressed_message_set(items, codec)
    end = base_offset + len(wrapper)
    triples = list(iter_messages(wrapper, base_offset))
    assert payloads_of(triples) == items
    assert [offset for offset, _n, _m in triples] == [base_offset] * len(items)
    assert [n for _o, n, _m in triples] == [base_offset] * (len(items) - 1) + [end] * bool(items)
    assert all(message.is_valid() and message.codec == NO_COMPRESSION for _o, _n, message in triples)


@given(payloads.filter(bool), st.sampled_from([GZIP, SNAPPY]))
def test_compressed_set_is_one_wrapper_whose_crc_covers_the_compressed_bytes(items, codec):
    [(_o, _n, wrapper)] = iter_entries(encode_compressed_message_set(items, codec))
    assert (wrapper.magic, wrapper.codec) == (MAGIC_1, codec)
    assert wrapper.crc == zlib.crc32(wrapper.payload)


@given(payloads)
def test_compressed_set_without_a_codec_is_the_plain_set(items):
    assert encode_compressed_message_set(items, NO_COMPRESSION) == encode_message_set(items)


plain_group = st.tuples(st.just(NO_COMPRESSION), st.binary(max_size=30).map(lambda p: [p]),
                        st.sampled_from([MAGIC_0, MAGIC_1]))
wrapper_group = st.tuples(st.sampled_from([GZIP, SNAPPY]),
                          st.lists(st.binary(max_size=30), min_size=1, max_size=5), st.just(MAGIC_1))


@given(st.lists(st.one_of(plain_group, wrapper_group), max_size=6), offsets)
def test_mixed_plain_and_wrapped_entries_give_0_7_offsets(groups, base_offset):
    parts, expected, position = [], [], base_offset
    for codec, items, magic in groups:
        part = (encode_message_set(items, magic=magic) if codec == NO_COMPRESSION
                else encode_compressed_message_set(items, codec))
        end = position + len(part)
        expected += [(position, position, p) for p in items[:-1]] + [(position, end, items[-1])]
        parts.append(part)
        position = end
    triples = list(iter_messages(b"".join(parts), base_offset))
    assert [(offset, n, bytes(m.payload)) for offset, n, m in triples] == expected
    assert valid_bytes(b"".join(parts)) == position - base_offset


def nested(depth: int, payload: bytes = b"p") -> bytes:
    """A one-entry set: ``payload`` inside ``depth`` GZIP wrappers, each inside the next."""
    message_set = encode_message_set([payload])
    for _ in range(depth):
        message_set = wrap(GZIP, message_set)
    return message_set


def test_nested_wrappers_are_flattened_with_the_outer_offsets():
    outer = wrap(SNAPPY, encode_message_set([b"a"]) + wrap(GZIP, encode_message_set([b"b", b"c"])))
    assert [(o, n, bytes(m.payload)) for o, n, m in iter_messages(outer, 50)] == [
        (50, 50, b"a"), (50, 50, b"b"), (50, 50 + len(outer), b"c")]


def test_wrappers_nested_max_depth_deep_are_read():
    assert payloads_of(iter_messages(nested(MAX_WRAPPER_DEPTH))) == [b"p"]


def test_wrappers_nested_deeper_than_max_depth_are_refused():
    head = encode_message_set([b"first"])
    with pytest.raises(CorruptWrapper) as info:
        list(iter_messages(head + nested(MAX_WRAPPER_DEPTH + 1), base_offset=1000))
    assert info.value.position == len(head)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY])
def test_undecompressable_wrapper_is_a_corrupt_wrapper_at_its_position(codec):
    head = encode_message_set([b"first"])
    garbage = encode_messages([make_message(b"not compressed at all", codec=codec)])
    with pytest.raises(CorruptWrapper) as info:
        list(iter_messages(head + garbage, base_offset=1000))
    assert info.value.position == len(head)


def test_wrapper_holding_a_malformed_inner_set_is_a_corrupt_wrapper():
    inner = encode_message_set([b"a"]) + b"\x00\x00\x00\x06" b"\x07" b"\x00" b"\x00\x00\x00\x00"  # magic 7
    with pytest.raises(CorruptWrapper) as info:
        list(iter_messages(wrap(GZIP, inner)))
    assert info.value.position == 0
