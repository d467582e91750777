"""FetchedMessageSet: 0.7 offsets through wrappers, errors by code, the too-large first message;
and iter_messages' fast path against the general reader it short-cuts."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.client.fetched_message_set import FetchedMessageSet, decode_multifetch_response
from twisted_broker.errors import (
    InvalidFetchSize, InvalidMessageSize, OffsetOutOfRange, UnexpectedResponse, UnknownError, UnknownMagic,
    WrongPartition,
)
from twisted_broker.codec.kafka07.compression import GZIP, SNAPPY
from twisted_broker.codec.kafka07.message import MAGIC_0, make_message
from twisted_broker.codec.kafka07.message_set import (
    encode_compressed_message_set, encode_message_set, expand_wrapper, iter_entries, iter_messages, valid_bytes,
)
from twisted_broker.codec.kafka07.requests import FetchRequest

F = 100  # the fetch offset of spec 3.5's worked example


def fetched(message_set: bytes, error: int = 0, offset: int = F, max_size: int = 1 << 20) -> FetchedMessageSet:
    return FetchedMessageSet(FetchRequest("t", 0, offset, max_size), error, message_set)


def triples(fetched_set: FetchedMessageSet) -> list[tuple[int, int, bytes]]:
    return [(offset, next_offset, bytes(message.payload)) for offset, next_offset, message in fetched_set]


@pytest.mark.parametrize("codec", [GZIP, SNAPPY])
def test_wrappers_are_expanded_with_0_7_offsets(codec):
    plain = encode_message_set([b"x"])                            # 11 bytes: F .. F+11
    wrapper = encode_compressed_message_set([b"a", b"b", b"c"], codec)
    end = F + len(plain) + len(wrapper)
    result = fetched(plain + wrapper)
    assert triples(result) == [(F, F + 11, b"x"), (F + 11, F + 11, b"a"), (F + 11, F + 11, b"b"),
                               (F + 11, end, b"c")]
    assert result.valid_bytes == len(plain) + len(wrapper)
    assert result.next_offset == end


def test_a_partial_tail_is_ignored_and_the_next_fetch_starts_before_it():
    whole = encode_message_set([b"one", b"two"])
    result = fetched(whole + encode_message_set([b"three"])[:7])
    assert [payload for _o, _n, payload in triples(result)] == [b"one", b"two"]
    assert result.size_bytes == len(whole) + 7
    assert result.next_offset == F + len(whole)


def test_an_empty_set_yields_nothing_and_stays_at_its_offset():
    result = fetched(b"")
    assert list(result) == []
    assert result.next_offset == F


def test_a_message_larger_than_the_fetch_size_raises_instead_of_yielding_nothing():
    big = encode_message_set([bytes(5000)])
    result = fetched(big[:4096], max_size=4096)
    assert result.valid_bytes == 0
    with pytest.raises(InvalidFetchSize, match="needs 5010 bytes, larger than the fetch size of 4096"):
        iter(result)
    with pytest.raises(InvalidFetchSize):
        result.iter_entries()


def test_a_fetch_smaller_than_a_length_field_is_too_small_too():
    with pytest.raises(InvalidFetchSize):
        iter(fetched(encode_message_set([b"m"])[:3], max_size=3))


def test_a_corrupt_first_length_is_reported_as_corrupt_not_as_too_large():
    with pytest.raises(InvalidMessageSize):
        list(fetched(struct.pack(">i", 2) + b"\x01\x00"))


@pytest.mark.parametrize("code, error", [(1, OffsetOutOfRange), (3, WrongPartition), (-1, UnknownError),
                                         (77, UnknownError)])
def test_the_broker_error_code_is_raised_by_check_and_by_iterating(code, error):
    result = fetched(b"", error=code)
    with pytest.raises(error, match=f"t-0 at offset {F}"):
        result.check()
    with pytest.raises(error):
        iter(result)


def test_no_error_checks_quietly():
    fetched(encode_message_set([b"m"])).check()


def test_shallow_iteration_keeps_wrappers_compressed():
    wrapper = encode_compressed_message_set([b"a", b"b"], GZIP)
    [(offset, next_offset, message)] = fetched(wrapper).iter_entries()
    assert (offset, next_offset, message.codec) == (F, F + len(wrapper), GZIP)


def test_payloads_are_bytes_that_outlive_the_fetched_buffer():
    data = bytearray(encode_message_set([b"payload"]) + encode_message_set([b"ab", b"cd"], magic=MAGIC_0)
                     + encode_compressed_message_set([b"inner"], GZIP))
    messages = [message for _o, _n, message in fetched(data)]
    data[:] = bytes(len(data))  # the buffer is reused for the next fetch
    assert [type(message.payload) for message in messages] == [bytes] * 4
    assert [message.payload for message in messages] == [b"payload", b"ab", b"cd", b"inner"]


# --- the fast path of iter_messages gives what the general reader gives ----------------------

def reference_messages(buf: bytes, base: int):
    """iter_messages as it was before the fast path: iter_entries, then expand wrappers."""
    out = []
    for offset, next_offset, message in iter_entries(buf, base):
        if not message.codec:
            out.append((offset, next_offset, message))
            continue
        inner = expand_wrapper(message, offset - base)
        out.extend((offset, next_offset if i == len(inner) - 1 else offset, m) for i, m in enumerate(inner))
    return out


entry = st.one_of(
    st.binary(max_size=30).map(lambda p: encode_message_set([p])),
    st.binary(max_size=30).map(lambda p: encode_message_set([p], magic=MAGIC_0)),
    st.lists(st.binary(max_size=20), min_size=1, max_size=4).map(
        lambda ps: encode_compressed_message_set(ps, GZIP)),
    st.binary(min_size=1, max_size=10).map(lambda p: struct.pack(">bbI", 1, 4, 0) + p).map(
        lambda m: struct.pack(">i", len(m)) + m),  # attribute bits above the codec: ignored
)


@given(st.lists(entry, max_size=6), st.integers(0, 40), st.integers(0, 2 ** 40))
def test_iter_messages_matches_the_general_reader(entries, cut, base):
    data = b"".join(entries)
    data = data[:max(len(data) - cut, 0)]  # often leaves a partial tail
    assert list(iter_messages(data, base)) == reference_messages(data, base)


@given(st.lists(entry, max_size=6), st.integers(0, 40), st.integers(0, 2 ** 40))
def test_iterating_to_the_end_reports_where_the_complete_entries_end(entries, cut, base):
    data = b"".join(entries)
    data = data[:max(len(data) - cut, 0)]
    ends: list[int] = []
    list(iter_messages(data, base, on_end=ends.append))
    assert ends == [valid_bytes(data)]
    result = fetched(data, offset=base)
    if data and valid_bytes(data) == 0:
        return  # a first entry larger than the set: iterating raises InvalidFetchSize
    list(result)
    assert result.next_offset == base + valid_bytes(data)


def test_iter_messages_still_raises_at_a_bad_entry_after_fast_ones():
    good = encode_message_set([b"a", b"b"])
    bad = struct.pack(">ibI", 6, 7, 0) + b"x"  # magic 7
    messages = iter_messages(good + bad, 1000)
    assert [n for _o, n, _m in (next(messages), next(messages))] == [1011, 1022]
    with pytest.raises(UnknownMagic) as caught:
        next(messages)
    assert caught.value.position == len(good)


def test_inner_messages_of_the_fast_path_are_ordinary_messages():
    [(_o, _n, message)] = iter_messages(encode_message_set([b"m"]))
    assert message == make_message(b"m") and message.is_valid()


# --- MultiFetch responses -------------------------------------------------------------------

def multifetch_body(*parts: tuple[int, bytes]) -> bytes:
    return b"".join(struct.pack(">ih", 2 + len(data), error) + data for error, data in parts)


def test_multifetch_parts_are_matched_to_their_requests_in_order():
    requests = [FetchRequest("a", 0, 0, 100), FetchRequest("b", 1, 50, 100)]
    data = encode_message_set([b"m"])
    first, second = decode_multifetch_response(requests, 0, multifetch_body((0, data), (1, b"")))
    assert (first.topic, first.partition, first.error_code, bytes(first.message_set)) == ("a", 0, 0, data)
    assert (second.topic, second.partition, second.offset, second.error_code) == ("b", 1, 50, 1)


def test_multifetch_with_a_missing_part_is_an_unexpected_response():
    with pytest.raises(UnexpectedResponse, match="1 parts for 2 fetches"):
        decode_multifetch_response([FetchRequest("a", 0, 0, 1)] * 2, 0, multifetch_body((0, b"")))


def test_multifetch_with_a_truncated_part_is_an_unexpected_response():
    with pytest.raises(UnexpectedResponse):
        decode_multifetch_response([FetchRequest("a", 0, 0, 1)], 0, multifetch_body((0, b"abc"))[:-1])
