"""A record batch stored as a 0.7 gzip wrapper (D2): what 0.7 readers see, and the batch's pieces."""

import gzip
import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twisted_broker.codec.kafka.batch_header import read_header, stamp
from twisted_broker.storage.stored_batch import (
    HEAD_BYTES, MAX_PIECE_BYTES, MIN_SAMPLE_BYTES, SAMPLE_BYTES, StoredBatchError, batch_pieces, deflate_values,
    encode_stored_entry, is_stored_batch, read_stored_header, stored_pieces,
)
from twisted_broker.codec.kafka07.compression import GZIP, compress
from twisted_broker.codec.kafka07.message_set import (
    encode_compressed_message_set, encode_message_set, iter_entries, iter_messages, scan,
)

KIB = 1024


def noise(size: int) -> bytes:
    return random.Random(size).randbytes(size)


def values_for(size: int) -> list[bytes | None]:
    count = max(1, size // 5000)
    return [b"value-%d" % i if i % 7 else None for i in range(count)]


@pytest.mark.parametrize("size", [1, 61, MAX_PIECE_BYTES, MAX_PIECE_BYTES + 1, 200 * KIB, 1024 * KIB])
def test_a_stored_entry_reads_as_one_0_7_message_per_record_and_gives_the_batch_back(size):
    batch, values = noise(size), values_for(size)
    entry = encode_stored_entry(batch, values)
    # One top-level 0.7 message, gzip, its CRC valid.
    checked = scan(entry, check_crc=True, deep=True)
    assert (checked.error, checked.valid_bytes, checked.message_count) == (None, len(entry), len(values))
    [(_offset, _next, wrapper)] = list(iter_entries(entry))
    assert wrapper.codec == GZIP and wrapper.is_valid()
    # Python's gzip reads the concatenated members: the values' message set, nothing else.
    assert gzip.decompress(bytes(wrapper.payload)) == encode_message_set([v or b"" for v in values])
    # This project's 0.7 decoder: one message per record, the value as payload, CRCs valid.
    messages = [message for _o, _n, message in iter_messages(entry)]
    assert [bytes(m.payload) for m in messages] == [v or b"" for v in values]
    assert all(m.is_valid() and m.codec == 0 for m in messages)
    # The pieces, walked or computed from the size, are the batch's bytes in order.
    assert b"".join(stored_pieces(entry)) == batch
    assert b"".join(entry[p:p + n] for p, n in batch_pieces(size)) == batch
    assert len(batch_pieces(size)) == -(-size // MAX_PIECE_BYTES)


def test_every_member_is_a_gzip_member_with_the_batch_in_fextra():
    entry = encode_stored_entry(noise(3 * MAX_PIECE_BYTES), [b"v"])
    payload = entry[10:]
    pieces = batch_pieces(3 * MAX_PIECE_BYTES)
    for position, length in pieces:
        member = entry[position - 16:position]
        assert member[:4] == b"\x1f\x8b\x08\x04" and member[12:14] == b"TB"
        assert int.from_bytes(member[10:12], "little") == length + 4
    # zlib reads member by member and checks each member's CRC32 and ISIZE.
    unpacker, inflated, rest = None, b"", payload
    while rest:
        unpacker = zlib.decompressobj(31)
        inflated += unpacker.decompress(rest)
        assert unpacker.eof
        rest = unpacker.unused_data
    assert inflated == encode_message_set([b"v"])


def test_the_header_of_a_stored_batch_is_read_from_its_first_bytes_only(make_batch):
    batch = make_batch([b"x" * 1000] * 300, producer_id=7, producer_epoch=2, base_sequence=40)
    stamp(batch, 123456, 9)
    entry = encode_stored_entry(batch, [b"x" * 1000] * 300)
    assert is_stored_batch(entry[:26])
    header = read_stored_header(entry[:HEAD_BYTES])
    assert header == read_header(batch)
    assert (header.base_offset, header.partition_leader_epoch, header.records_count) == (123456, 9, 300)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 2, 40)
    assert header.size == len(batch) > MAX_PIECE_BYTES


def test_a_users_own_gzip_wrapper_is_not_a_stored_batch():
    users = encode_compressed_message_set([b"a", b"b"], GZIP)
    assert not is_stored_batch(users)
    python_gzip = encode_message_set([gzip.compress(b"x")])  # FLG 0 too
    assert not is_stored_batch(python_gzip)
    assert compress(GZIP, b"x")[3] == 0
    with pytest.raises(StoredBatchError):
        read_stored_header(users + bytes(HEAD_BYTES))


def test_a_damaged_stored_header_is_refused(make_batch):
    batch = make_batch([b"v"])
    entry = bytearray(encode_stored_entry(batch, [b"v"]))
    entry[26 + 16] = 7  # the batch's magic byte
    with pytest.raises(StoredBatchError, match="magic 7"):
        read_stored_header(entry[:HEAD_BYTES])


def test_an_empty_batch_cannot_be_stored():
    with pytest.raises(ValueError):
        encode_stored_entry(b"", [])


@given(st.binary(min_size=1, max_size=3 * MAX_PIECE_BYTES), st.lists(st.one_of(st.none(), st.binary(max_size=300)), max_size=20))
@settings(max_examples=30, deadline=None)
def test_any_batch_and_values_round_trip_through_a_stored_entry(batch, values):
    entry = encode_stored_entry(batch, values)
    assert b"".join(entry[p:p + n] for p, n in batch_pieces(len(batch))) == batch
    assert [bytes(m.payload) for _o, _n, m in iter_messages(entry)] == [v or b"" for v in values]


def hex_values(count: int) -> list[bytes]:
    """bench/peers' payloads: 200 hex digits, which level 1's fixed codes barely shrink."""
    rng = random.Random(count)
    return [rng.randbytes(100).hex().encode() for _ in range(count)]


def inflated(parts: list[bytes]) -> bytes:
    unpacker = zlib.decompressobj(-15)
    data = unpacker.decompress(b"".join(parts))
    assert unpacker.eof and not unpacker.unused_data
    return data


def test_values_level_1_barely_shrinks_are_stored_past_the_sample():
    message_set = encode_message_set(hex_values(2000))  # 420,000 bytes
    parts = deflate_values(message_set)
    assert inflated(parts) == message_set
    head, rest = parts[0], b"".join(parts[1:])
    assert len(head) < SAMPLE_BYTES  # the sample: level 1, kept as deflated
    # stored blocks: the bytes as they are, 5 bytes of block header per 64 KiB at most
    rest_size = len(message_set) - SAMPLE_BYTES
    assert rest_size < len(rest) <= rest_size + 5 * (rest_size // 65535 + 2)


def test_values_level_1_shrinks_are_deflated_whole_at_level_1():
    values = [b'{"user": %d, "event": "page-view", "page": "/products/%d"}' % (i, i % 50) for i in range(5000)]
    message_set = encode_message_set(values)
    parts = deflate_values(message_set)
    assert inflated(parts) == message_set
    assert len(b"".join(parts)) < len(message_set) / 4


def test_a_set_too_small_to_sample_is_deflated_whole():
    message_set = encode_message_set(hex_values(MIN_SAMPLE_BYTES * 4 // 210 - 1))
    parts = deflate_values(message_set)
    assert len(parts) == 1 and inflated(parts) == message_set  # one deflate call, no sample
    assert len(b"".join(parts)) < len(message_set)  # level 1 all through: no stored block


def test_an_entry_with_stored_values_reads_as_one_0_7_message_per_record():
    values = hex_values(2000)
    entry = encode_stored_entry(noise(1000), values)
    checked = scan(entry, check_crc=True, deep=True)
    assert (checked.error, checked.valid_bytes, checked.message_count) == (None, len(entry), len(values))
    [(_offset, _next, wrapper)] = list(iter_entries(entry))
    assert gzip.decompress(bytes(wrapper.payload)) == encode_message_set(values)
    assert [bytes(m.payload) for _o, _n, m in iter_messages(entry)] == values
