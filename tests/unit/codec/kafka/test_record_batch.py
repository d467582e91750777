"""Record batches (magic 2): built, decoded, CRC32C-checked, every codec, bad input refused."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twisted_broker.codec.kafka import record_compression
from twisted_broker.codec.kafka.batch_header import read_header, stamp
from twisted_broker.codec.kafka.record_batch import (
    CorruptBatch, Header, Record, batch_values, build_batch, check_batch, crc_ok, decode_batch,
    record_set_magic, split_batches,
)
from twisted_broker.codec.kafka.record_compression import UnsupportedCompression

CODECS = sorted(record_compression.RECORD_CODEC_NAMES)

# One record, no compression: a batch written out field by field.
ONE_RECORD = (
    b"\x00\x00\x00\x00\x00\x00\x00\x05"  # base offset: 5
    b"\x00\x00\x00\x3b"                  # batch length: 59 bytes follow
    b"\xff\xff\xff\xff"                  # partition leader epoch: -1
    b"\x02"                              # magic: 2
    b"\xe8\x0b\x71\xc7"                  # CRC32C of attributes .. end
    b"\x00\x00"                          # attributes: no compression, CreateTime
    b"\x00\x00\x00\x00"                  # last offset delta: 0
    b"\x00\x00\x01\x7f\x00\x00\x00\x00"  # first timestamp
    b"\x00\x00\x01\x7f\x00\x00\x00\x00"  # max timestamp
    b"\xff\xff\xff\xff\xff\xff\xff\xff"  # producer id: -1
    b"\xff\xff"                          # producer epoch: -1
    b"\xff\xff\xff\xff"                  # base sequence: -1
    b"\x00\x00\x00\x01"                  # records: 1
    b"\x12"                              # record length: 9 (zigzag)
    b"\x00"                              # attributes
    b"\x00"                              # timestamp delta: 0
    b"\x00"                              # offset delta: 0
    b"\x02" b"k"                         # key: 1 byte (zigzag 2)
    b"\x04" b"vv"                        # value: 2 bytes (zigzag 4)
    b"\x00"                              # headers: none
)


def test_build_batch_writes_kafkas_layout():
    assert build_batch([(0x17F00000000, b"k", b"vv")], base_offset=5) == ONE_RECORD


def test_golden_batch_decodes():
    header, records = decode_batch(ONE_RECORD)
    assert header.records_count == 1 and header.base_offset == 5
    assert records == [Record(5, 0x17F00000000, b"k", b"vv", ())]


records_strategy = st.lists(
    st.tuples(st.integers(0, 1 << 42), st.one_of(st.none(), st.binary(max_size=20)),
              st.one_of(st.none(), st.binary(max_size=200)),
              st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=3)),
    min_size=1, max_size=20)


@settings(max_examples=40, deadline=None)
@given(records_strategy, st.sampled_from(CODECS), st.integers(0, 1 << 40))
def test_batches_round_trip_under_every_codec(items, codec, base_offset):
    batch = build_batch(items, base_offset=base_offset, compression=codec)
    header, records = decode_batch(batch)
    assert header.compression == codec and header.records_count == len(items)
    assert [(r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in records] == \
        [(base_offset + i, t, k, v, list(h)) for i, (t, k, v, h) in enumerate(items)]
    assert batch_values(batch) == [v for _, _, v, _ in items]


def test_batch_values_reads_long_varints_and_null_values():
    items = [(1 << 40, b"k" * 300, None, [("h", b"x")]), (0, None, b"v" * 70000, [])]
    assert batch_values(build_batch(items)) == [None, b"v" * 70000]


def test_log_append_time_gives_every_record_the_max_timestamp():
    batch = build_batch([(10, None, b"a"), (20, None, b"b")], log_append_time=True)
    assert [r.timestamp for r in decode_batch(batch)[1]] == [20, 20]


def test_stamped_base_offset_keeps_the_crc_and_moves_offsets():
    batch = bytearray(build_batch([(1, None, b"a"), (2, None, b"b")]))
    stamp(batch, 1000, 7)
    header, records = decode_batch(batch)
    assert header.partition_leader_epoch == 7
    assert [r.offset for r in records] == [1000, 1001]


def test_a_flipped_bit_fails_the_crc():
    batch = bytearray(build_batch([(1, b"k", b"value")]))
    batch[-3] ^= 0x01
    assert not crc_ok(batch)
    with pytest.raises(CorruptBatch, match="CRC32C"):
        check_batch(batch)


@pytest.mark.parametrize("cut", [1, 10, 60, 70])
def test_a_truncated_batch_is_corrupt(cut):
    batch = build_batch([(1, b"k", b"value" * 10)])
    with pytest.raises(CorruptBatch):
        decode_batch(batch[:-cut])


def test_records_that_overrun_their_declared_count_are_corrupt():
    batch = bytearray(build_batch([(1, None, b"a"), (1, None, b"b")]))
    batch[57:61] = (3).to_bytes(4, "big")  # claims 3 records, holds 2
    with pytest.raises(CorruptBatch):
        decode_batch(batch, verify=False)
    with pytest.raises(CorruptBatch):
        batch_values(batch)


def test_garbage_compressed_records_are_corrupt_not_a_crash():
    for codec in CODECS[1:]:
        batch = bytearray(build_batch([(1, None, b"a" * 100)], compression=codec))
        batch[61:] = b"\x13" * (len(batch) - 61)
        with pytest.raises(CorruptBatch):
            batch_values(batch)


def test_unknown_codec_is_unsupported_compression():
    batch = bytearray(build_batch([(1, None, b"a")]))
    batch[22] |= 0x05
    with pytest.raises(UnsupportedCompression):
        decode_batch(batch, verify=False)


def test_decompression_is_bounded():
    batch = build_batch([(1, None, b"\0" * 100_000)], compression=record_compression.ZSTD)
    with pytest.raises(CorruptBatch, match="expands past"):
        batch_values(batch, max_bytes=10_000)


def test_raw_snappy_as_librdkafka_sends_it_is_read():
    import snappy
    batch = build_batch([(1, b"k", b"v" * 50)])
    header = read_header(batch)
    raw = snappy.compress(batch[61:])
    body = bytearray(batch[:61]) + raw
    body[8:12] = (len(body) - 12).to_bytes(4, "big")
    body[22] |= record_compression.SNAPPY
    assert batch_values(body) == [b"v" * 50]
    assert header.records_count == 1


def test_split_batches_views_each_batch_and_drops_a_partial_tail_only_when_asked():
    a, b = build_batch([(1, None, b"a")]), build_batch([(2, None, b"bb")], base_offset=1)
    assert [bytes(x) for x in split_batches(a + b)] == [a, b]
    assert [bytes(x) for x in split_batches(a + b[:-1], allow_partial=True)] == [a]
    with pytest.raises(CorruptBatch):
        split_batches(a + b[:-1])


def test_record_set_magic_tells_message_sets_from_batches():
    assert record_set_magic(build_batch([(1, None, b"a")])) == 2
    assert record_set_magic(b"\0" * 16 + b"\x01" + b"\0" * 20) == 1


def test_headers_are_header_objects():
    batch = build_batch([Record(0, 5, None, b"v", (Header("trace", b"1"),))])
    assert decode_batch(batch)[1][0].headers == (Header("trace", b"1"),)


def test_lz4_bytes_after_the_frame_are_corrupt():
    batch = bytearray(build_batch([(1, None, b"a" * 100)], compression=record_compression.LZ4))
    batch += b"\x00\x01"
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    with pytest.raises(CorruptBatch, match="after the frame"):
        batch_values(batch)


@pytest.mark.parametrize("codec", CODECS[1:])
def test_a_truncated_compressed_body_is_corrupt(codec):
    batch = bytearray(build_batch([(1, None, bytes(range(256)) * 20)], compression=codec))
    del batch[-8:]
    batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
    with pytest.raises(CorruptBatch):
        batch_values(batch)
