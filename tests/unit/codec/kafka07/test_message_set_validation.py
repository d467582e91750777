"""scan and validate_message_set: each problem is reported at the byte position of its entry.

validate_message_set is the broker's produce check (spec 2.4, 3.6): sizes first, then CRCs,
then the inner messages of wrappers; a partial tail after complete entries is dropped silently.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.errors import (
    CorruptWrapper, CrcMismatch, InvalidMessage, InvalidMessageSize, MessageSizeTooLarge,
    TruncatedMessage, UnknownCodec, UnknownMagic,
)
from twisted_broker.codec.kafka07.compression import GZIP, NO_COMPRESSION, SNAPPY, compress
from twisted_broker.codec.kafka07.message import MAGIC_0, MAGIC_1, Message, make_message
from twisted_broker.codec.kafka07 import message_set
from twisted_broker.codec.kafka07.message_set import (
    MAX_WRAPPER_DEPTH, encode_compressed_message_set, encode_message_set, encode_messages, scan,
    validate_message_set,
)

GOOD = encode_message_set([b"one", b"two"])  # two 13-byte entries
GOOD_TAIL = encode_message_set([b"three"], magic=MAGIC_0)


def wrap(codec: int, message_set: bytes) -> bytes:
    """A one-entry set holding ``message_set`` compressed in a wrapper (with a valid CRC)."""
    return encode_messages([make_message(compress(codec, message_set), codec=codec)])


def nested(depth: int) -> bytes:
    """A one-entry set: one message inside ``depth`` GZIP wrappers, each inside the next."""
    message_set = encode_message_set([b"p"])
    for _ in range(depth):
        message_set = wrap(GZIP, message_set)
    return message_set


def assert_rejected_at(buf: bytes, position: int, error: type[InvalidMessage], count: int) -> None:
    """scan stops at ``position`` with ``error``; validate_message_set raises it."""
    result = scan(buf, deep=True)
    assert type(result.error) is error
    assert result.error.position == result.valid_bytes == position
    assert result.message_count == count
    with pytest.raises(error) as info:
        validate_message_set(buf)
    assert info.value.position == position
    assert info.value.code == 2  # InvalidMessage on the wire


def test_flipped_payload_byte_of_the_third_message_is_a_crc_mismatch_at_its_entry():
    buf = bytearray(encode_message_set([b"first", b"second", b"third", b"fourth"]))
    third = (10 + 5) + (10 + 6)
    buf[third + 10] ^= 0x20  # "third" -> "Third"
    assert_rejected_at(bytes(buf), third, CrcMismatch, count=2)


def test_crc_mismatch_in_a_magic_0_entry_is_found_too():
    bad = encode_messages([Message(MAGIC_0, 0, 0x12345678, b"x")])
    assert_rejected_at(GOOD + bad, len(GOOD), CrcMismatch, count=2)


# Each bad entry is tried last (where fewer than 10 bytes may remain) and followed by a good one.
@pytest.mark.parametrize("tail", [b"", GOOD_TAIL], ids=["last", "followed"])
@pytest.mark.parametrize("bad, error", [
    (b"\x00\x00\x00\x04" b"\x01\x00\x00\x00", InvalidMessageSize),           # length 4 < 5
    (b"\x00\x00\x00\x00", InvalidMessageSize),                               # length 0
    (b"\x80\x00\x00\x00" b"\x01\x00\x00\x00\x00\x00", InvalidMessageSize),   # negative length
    (b"\x00\x00\x00\x05" b"\x01" b"\x00\x00\x00\x00", InvalidMessageSize),   # magic 1, length 5
    (b"\x00\x00\x00\x06" b"\x02" b"\x00" b"\x00\x00\x00\x00", UnknownMagic),  # magic 2, empty
    (b"\x00\x00\x00\x05" b"\xff" b"\x00\x00\x00\x00", UnknownMagic),         # magic 255
    (b"\x00\x00\x00\x07" b"\x01" b"\x03" b"\x8c\xdc\x16\x83" b"x", UnknownCodec),  # codec 3
    (b"\x00\x00\x00\x07" b"\x01" b"\xff" b"\x8c\xdc\x16\x83" b"x", UnknownCodec),  # 0xff: codec 3
], ids=["length-4", "length-0", "length-negative", "magic-1-length-5", "magic-2", "magic-255",
        "codec-3", "attributes-ff"])
def test_malformed_entry_is_reported_at_its_position(bad, error, tail):
    assert_rejected_at(GOOD + bad + tail, len(GOOD), error, count=2)


@pytest.mark.parametrize("buf", [
    b"\x00", b"\x00\x00\x00", GOOD[:4], GOOD[:12],
    b"\x00\x00\x00\x0b" b"\x01\x00",  # length 11, then only 2 bytes
], ids=["1-byte", "3-bytes", "length-only", "one-byte-short", "header-cut"])
def test_truncated_first_entry_is_refused(buf):
    result = scan(buf)
    assert type(result.error) is TruncatedMessage
    assert (result.valid_bytes, result.message_count, result.error.position) == (0, 0, 0)
    with pytest.raises(TruncatedMessage) as info:
        validate_message_set(buf)
    assert info.value.position == 0


@pytest.mark.parametrize("cut", [1, 3, 4, 9, 12])
def test_partial_tail_after_complete_entries_is_dropped_silently(cut):
    buf = GOOD + GOOD_TAIL + GOOD[:cut]
    result = scan(buf)
    assert type(result.error) is TruncatedMessage
    assert result.error.position == result.valid_bytes == len(GOOD + GOOD_TAIL)
    validated = validate_message_set(buf)
    assert bytes(validated.buffer) == GOOD + GOOD_TAIL
    assert (len(validated), validated.message_count) == (len(GOOD + GOOD_TAIL), 3)


def test_a_validated_set_is_a_view_of_bytes_input_and_of_one_copy_of_other_input():
    data = GOOD + b"\x00\x00"
    assert validate_message_set(data).buffer.obj is data
    buf = bytearray(data)
    copied = validate_message_set(buf).buffer
    assert copied.obj is not buf and bytes(copied) == GOOD
    buf[:] = bytes(len(buf))  # the connection's buffer is reused: the set to append is not
    assert bytes(copied) == GOOD


def test_a_set_larger_than_the_copy_limit_is_checked_through_a_view(monkeypatch):
    monkeypatch.setattr(message_set, "COPY_TO_SCAN_BYTES", len(GOOD) - 1)
    buf = bytearray(GOOD)
    validated = validate_message_set(buf)
    assert validated.buffer.obj is buf and validated.message_count == 2


def test_empty_set_is_valid_and_holds_nothing():
    assert scan(b"") == scan(b"", deep=True)
    assert (scan(b"").valid_bytes, scan(b"").message_count, scan(b"").error) == (0, 0, None)
    validated = validate_message_set(b"")
    assert (len(validated), validated.message_count) == (0, 0)


def test_scan_without_check_crc_accepts_a_bad_crc():
    bad = encode_messages([Message(MAGIC_1, 0, 0, b"x")])
    assert scan(GOOD + bad, check_crc=False).error is None
    assert type(scan(GOOD + bad).error) is CrcMismatch


def bad_crc_inside(codec: int) -> bytes:
    """A wrapper with a valid CRC over its compressed bytes, holding one message with a bad CRC."""
    inner = encode_messages([make_message(b"a"), Message(MAGIC_1, 0, 0xBAD, b"b")])
    return wrap(codec, inner)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY])
def test_bad_crc_inside_a_wrapper_is_a_corrupt_wrapper_at_the_wrapper(codec):
    buf = GOOD + bad_crc_inside(codec) + GOOD_TAIL
    assert scan(buf, deep=False).error is None  # the wrapper's own CRC is fine
    assert_rejected_at(buf, len(GOOD), CorruptWrapper, count=2)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY])
def test_undecompressable_wrapper_is_a_corrupt_wrapper_at_its_position(codec):
    bad = encode_messages([make_message(b"plain bytes, not compressed", codec=codec)])
    assert_rejected_at(GOOD + bad + GOOD_TAIL, len(GOOD), CorruptWrapper, count=2)


def test_wrapper_of_a_malformed_inner_set_is_a_corrupt_wrapper():
    inner = GOOD + b"\x00\x00\x00\x06" b"\x07" b"\x00" b"\x00\x00\x00\x00"  # magic 7
    assert_rejected_at(GOOD + wrap(GZIP, inner), len(GOOD), CorruptWrapper, count=2)


@pytest.mark.parametrize("cut", [1, 5, 11])
def test_a_wrapper_whose_inner_set_ends_in_a_partial_entry_is_a_corrupt_wrapper(cut):
    # A partial tail is dropped silently at the top level only: inside a wrapper the whole
    # inner set was compressed at once, so a cut one is damage.
    inner = encode_message_set([b"one", b"two"])
    assert_rejected_at(GOOD + wrap(GZIP, inner[:-cut]), len(GOOD), CorruptWrapper, count=2)


def test_an_inner_set_of_magic_0_and_magic_1_messages_counts_each():
    inner = encode_message_set([b"a", b"b"], magic=MAGIC_0) + encode_message_set([b"c"], magic=MAGIC_1)
    assert validate_message_set(GOOD + wrap(GZIP, inner)).message_count == 2 + 3


def test_wrapper_expanding_past_max_decompressed_bytes_is_refused():
    buf = GOOD + encode_compressed_message_set([bytes(10_000)], GZIP)
    assert validate_message_set(buf, max_decompressed_bytes=10_010).message_count == 3
    with pytest.raises(CorruptWrapper) as info:
        validate_message_set(buf, max_decompressed_bytes=10_009)
    assert info.value.position == len(GOOD)


def test_wrappers_nested_max_depth_deep_are_accepted():
    assert validate_message_set(GOOD + nested(MAX_WRAPPER_DEPTH)).message_count == 3


def test_wrappers_nested_deeper_than_max_depth_are_refused():
    assert_rejected_at(GOOD + nested(MAX_WRAPPER_DEPTH + 1), len(GOOD), CorruptWrapper, count=2)


def test_deep_message_count_counts_inner_messages():
    buf = (GOOD + encode_compressed_message_set([b"a", b"b", b"c"], GZIP)
           + encode_compressed_message_set([b"d", b"e"], SNAPPY) + nested(2))
    assert scan(buf, deep=True).message_count == 2 + 3 + 2 + 1
    assert scan(buf, deep=False).message_count == 2 + 1 + 1 + 1
    assert validate_message_set(buf).message_count == 8


@pytest.mark.parametrize("magic", [MAGIC_0, MAGIC_1])
def test_oversize_payload_is_refused_before_an_earlier_bad_crc(magic):
    # 0.7.2 checks every size before any CRC, so the request is dropped, not the connection.
    bad_crc = encode_messages([Message(MAGIC_1, 0, 0, b"x")])
    big = encode_message_set([b"y" * 101], magic=magic)
    with pytest.raises(MessageSizeTooLarge) as info:
        validate_message_set(GOOD + bad_crc + GOOD_TAIL + big, max_message_size=100)
    error = info.value
    assert (error.position, error.size, error.limit) == (len(GOOD + bad_crc + GOOD_TAIL), 101, 100)


@pytest.mark.parametrize("magic", [MAGIC_0, MAGIC_1])
def test_payload_of_exactly_the_limit_after_a_bad_crc_leaves_the_crc_error(magic):
    bad_crc = encode_messages([Message(MAGIC_1, 0, 0, b"x")])
    at_limit = encode_message_set([b"y" * 100], magic=magic)
    with pytest.raises(CrcMismatch) as info:
        validate_message_set(GOOD + bad_crc + at_limit, max_message_size=100)
    assert info.value.position == len(GOOD)


@pytest.mark.parametrize("magic", [MAGIC_0, MAGIC_1])
def test_oversize_payload_is_refused_when_all_else_is_valid(magic):
    with pytest.raises(MessageSizeTooLarge) as info:
        validate_message_set(GOOD + encode_message_set([b"y" * 101], magic=magic), max_message_size=100)
    assert info.value.position == len(GOOD)


def test_payload_of_exactly_max_message_size_is_accepted():
    buf = GOOD + encode_message_set([b"y" * 100]) + encode_message_set([b"z" * 100], magic=MAGIC_0)
    assert validate_message_set(buf, max_message_size=100).message_count == 4


def test_max_message_size_applies_to_the_compressed_wrapper_not_its_inner_messages():
    wrapper = encode_compressed_message_set([bytes(1000)] * 3, GZIP)
    assert len(wrapper) - 10 < 100
    assert validate_message_set(wrapper, max_message_size=100).message_count == 3


def test_oversize_payload_behind_an_unknown_magic_is_not_reached():
    # The size pass stops where entries stop parsing, as 0.7's shallow iterator does.
    unknown = b"\x00\x00\x00\x06" b"\x02" b"\x00" b"\x00\x00\x00\x00"
    buf = GOOD + unknown + encode_message_set([b"y" * 101])
    with pytest.raises(UnknownMagic):
        validate_message_set(buf, max_message_size=100)


plain_group = st.tuples(st.just(NO_COMPRESSION), st.binary(max_size=30).map(lambda p: [p]),
                        st.sampled_from([MAGIC_0, MAGIC_1]))
wrapper_group = st.tuples(st.sampled_from([GZIP, SNAPPY]),
                          st.lists(st.binary(max_size=30), min_size=1, max_size=4), st.just(MAGIC_1))
groups = st.lists(st.one_of(plain_group, wrapper_group), min_size=1, max_size=5)


def build(groups) -> tuple[bytes, list[int], list[int], list[int]]:
    """The set, and per top-level entry: its start, its magic, and its deep message count."""
    parts, starts, magics, counts, position = [], [], [], [], 0
    for codec, items, magic in groups:
        part = (encode_message_set(items, magic=magic) if codec == NO_COMPRESSION
                else encode_compressed_message_set(items, codec))
        parts.append(part)
        starts.append(position)
        magics.append(magic)
        counts.append(len(items))
        position += len(part)
    return b"".join(parts), starts, magics, counts


@given(groups)
def test_valid_sets_scan_whole_with_their_deep_count(groups):
    buf, _starts, _magics, counts = build(groups)
    result = scan(buf, deep=True)
    assert (result.valid_bytes, result.message_count, result.error) == (len(buf), sum(counts), None)
    validated = validate_message_set(buf)
    assert (bytes(validated.buffer), validated.message_count) == (buf, sum(counts))


@given(groups, st.data())
def test_a_cut_set_keeps_its_complete_entries(groups, data):
    buf, starts, _magics, counts = build(groups)
    cut = data.draw(st.integers(0, len(buf)))
    complete = sum(start <= cut for start in starts + [len(buf)]) - 1  # entries wholly before cut
    boundary = (starts + [len(buf)])[complete]
    result = scan(buf[:cut], deep=True)
    assert (result.valid_bytes, result.message_count) == (boundary, sum(counts[:complete]))
    if cut == boundary:
        assert result.error is None
    else:
        assert type(result.error) is TruncatedMessage and result.error.position == boundary
    if cut == boundary or boundary > 0:
        assert bytes(validate_message_set(buf[:cut]).buffer) == buf[:boundary]
    else:
        with pytest.raises(TruncatedMessage):
            validate_message_set(buf[:cut])


@given(groups, st.data())
def test_a_flipped_byte_is_caught_at_its_entry_unless_it_is_an_attributes_byte(groups, data):
    # Every byte but magic 1's attributes is protected: the CRC covers the payload (and catches
    # any single-byte error in it); a changed length, magic or codec makes the entry unparseable,
    # its CRC (computed over other bytes) wrong, or its wrapper undecompressable. Attribute bits
    # 2-7 are unused, and codec gzip/snappy -> none leaves a valid (if meaningless) message.
    buf, starts, magics, counts = build(groups)
    index = data.draw(st.integers(0, len(buf) - 1), label="index")
    corrupted = bytearray(buf)
    corrupted[index] ^= data.draw(st.integers(1, 255), label="mask")
    entry = max(k for k, start in enumerate(starts) if start <= index)
    result = scan(bytes(corrupted), deep=True)
    if result.error is None:
        assert result.valid_bytes == len(buf)
        assert magics[entry] == MAGIC_1 and index == starts[entry] + 5
        return
    assert result.error.position == result.valid_bytes == starts[entry]
    assert result.message_count == sum(counts[:entry])
    if isinstance(result.error, TruncatedMessage) and starts[entry] > 0:
        assert len(validate_message_set(bytes(corrupted))) == starts[entry]
    else:
        with pytest.raises(type(result.error)) as info:
            validate_message_set(bytes(corrupted))
        assert info.value.position == starts[entry]


def _general_only(data, pos, end, size_limit):
    return pos, 0  # _scan_plain walking nothing: every entry takes scan's general path


@given(groups, st.data())
def test_the_fast_walk_of_plain_entries_changes_no_result(groups, data):
    buf, _starts, _magics, _counts = build(groups)
    corrupted = bytearray(buf)
    if data.draw(st.booleans(), label="flip"):
        corrupted[data.draw(st.integers(0, len(buf) - 1), label="index")] ^= data.draw(st.integers(1, 255))
    cut = bytes(corrupted[:data.draw(st.integers(0, len(buf)), label="cut")])
    longest = max(len(payload) for _codec, items, _magic in groups for payload in items)
    limit = data.draw(st.one_of(st.none(), st.integers(0, longest)), label="max_payload_bytes")

    def outcome(buffer):
        try:
            result = scan(buffer, deep=True, max_payload_bytes=limit)
        except MessageSizeTooLarge as exc:
            return "too large", exc.position
        return result.valid_bytes, result.message_count, type(result.error), getattr(result.error, "position", None)

    fast = [outcome(cut), outcome(memoryview(cut))]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(message_set, "_scan_plain", _general_only)
        assert fast == [outcome(cut)] * 2
