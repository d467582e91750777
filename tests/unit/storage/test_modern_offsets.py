"""Modern offsets over a partition log (D1): firsts, the end, lookups, the shift, the index file."""

import os

import pytest

from twisted_broker.errors import OffsetOutOfRange
from twisted_broker.storage.stored_batch import read_stored_header
from twisted_broker.storage.record_offsets import (
    append_batch, earliest, iter_batch_headers, locate, modern_end, next_offset,
)
from twisted_broker.storage.offset_index import ROW, ROW_INTERVAL_BYTES
from twisted_broker.storage.replica_log import ReplicaLog
from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.message_set import (
    ValidatedMessageSet, encode_compressed_message_set, encode_message_set, iter_entries,
)


def appended(log, payloads) -> list[int]:
    """Append 0.7 messages; return their byte offsets."""
    data = encode_message_set(payloads)
    base = log.append(ValidatedMessageSet(memoryview(data), len(payloads)))
    return [base + position for position, _next, _m in iter_entries(data)]


def index_rows(log, number=0) -> list[tuple]:
    with open(log.segments[number].path[:-len(".kafka")] + ".index", "rb") as file:
        return list(ROW.iter_unpack(file.read()))


def test_0_7_messages_have_their_byte_offset_as_modern_offset(make_log):
    log = make_log()
    offsets = appended(log, [b"a" * 100, b"b", b"c" * 50])
    log.flush()
    assert modern_end(log) == offsets[-1] + 1  # the last record's offset + 1
    for offset in offsets:
        assert locate(log, offset)[1].first == offset
    # An offset between two messages' records (inside the first one's bytes) finds the next.
    assert locate(log, offsets[0] + 1)[1].first == offsets[1]
    assert locate(log, modern_end(log)) is None
    assert (earliest(log), next_offset(log)) == (0, log.written_end)


def test_unflushed_data_is_not_visible_to_modern_queries(make_log, batch):
    log = make_log(flush_interval_messages=1000)
    first = appended(log, [b"x"])[0]
    log.flush()
    appended(log, [b"y"])
    assert modern_end(log) == first + 1 and locate(log, first + 1) is None
    log.flush()
    assert modern_end(log) == log.written_end - 11 + 1


def test_a_stored_batch_gets_base_offset_first_p_and_each_record_its_own(make_log, make_batch):
    log = make_log()
    appended(log, [b"old"])
    values = [b"v%d" % i for i in range(5)]
    base = append_batch(log, make_batch(values), values, leader_epoch=3)
    assert base == 13  # its byte offset: the 0.7 message before it is 13 bytes
    log.flush()
    assert modern_end(log) == base + 5
    for record in range(5):
        segment, entry = locate(log, base + record)
        assert (entry.first, entry.count) == (base, 5)
    region = log.read(base, 10_000)
    header = read_stored_header(region.read()[:87])
    region.close()
    assert (header.base_offset, header.partition_leader_epoch) == (base, 3)
    following = appended(log, [b"new"])[0]
    log.flush()
    assert locate(log, base + 5)[1].first == following  # the gap after the batch's records


def test_a_wrapper_that_compresses_past_its_size_shifts_the_next_offsets(make_log):
    log = make_log()
    wrapper = encode_compressed_message_set([b""] * 2000, GZIP)  # 2000 records in ~100 bytes
    assert len(wrapper) < 2000
    log.append(ValidatedMessageSet(memoryview(wrapper), 2000))
    after = appended(log, [b"a", b"b" * 3000, b"c"])
    log.flush()
    assert locate(log, 0)[1].count == 2000
    shifted = locate(log, 1999)[1]
    assert (shifted.position, shifted.first) == (0, 0)
    entry = locate(log, 2000)[1]
    assert (entry.position, entry.first) == (after[0], 2000)  # shifted past its byte offset
    entry = locate(log, 2001)[1]
    assert (entry.position, entry.first) == (after[1], 2001)  # still shifted: "a" absorbs 10
    assert locate(log, 2002)[1].first == after[2]  # absorbed: back to the byte offset
    assert modern_end(log) == after[2] + 1


def test_rows_are_written_every_interval_and_reused_by_a_reopened_log(make_log, clock):
    log = make_log()
    offsets = appended(log, [b"p" * 990] * 40)
    log.flush()
    assert modern_end(log) == offsets[-1] + 1
    rows = index_rows(log)
    assert {row[0] for row in rows} <= set(offsets)  # rows are at entries
    gaps = [b[0] - a[0] for a, b in zip(rows, rows[1:])]
    assert rows[0][:2] == (0, 0) and all(ROW_INTERVAL_BYTES <= gap < ROW_INTERVAL_BYTES + 1000 for gap in gaps)
    assert all(position == first for position, first, _t in rows)
    for segment in log.segments:
        segment.close()
    reopened = make_log()
    assert list(reopened.segments[0].offset_index.positions) == [row[0] for row in rows]
    assert modern_end(reopened) == offsets[-1] + 1 and locate(reopened, offsets[20])[1].first == offsets[20]


def test_a_missing_or_damaged_index_is_walked_again_to_the_same_rows(make_log, make_batch):
    log = make_log()
    appended(log, [b"p" * 500] * 30)
    append_batch(log, make_batch([b"v"] * 3), [b"v"] * 3, 0)
    appended(log, [b"q" * 500] * 30)
    log.flush()
    end = modern_end(log)
    rows = index_rows(log)
    path = log.segments[0].path[:-len(".kafka")] + ".index"
    for segment in log.segments:
        segment.close()
    os.unlink(path)
    rebuilt = make_log()
    assert modern_end(rebuilt) == end
    # The same rows; only 0.7 timestamps differ (the appends' times are gone: the file's mtime).
    assert [r[:2] for r in index_rows(rebuilt)] == [r[:2] for r in rows]
    for segment in rebuilt.segments:
        segment.close()
    with open(path, "r+b") as file:  # a row out of order and half a row: cut there, walked again
        file.seek(ROW.size * 3)
        file.write(ROW.pack(1, 1, 0) + b"\x00" * 5)
    again = make_log()
    assert len(again.segments[0].offset_index.positions) == 3
    assert modern_end(again) == end
    assert [r[:2] for r in index_rows(again)] == [r[:2] for r in rows]


def test_followers_appending_the_same_bytes_in_other_chunks_get_the_same_rows(make_log, make_batch):
    leader = make_log("t", 0)
    for round_ in range(6):
        appended(leader, [b"%d" % round_ * 300] * 7)
        append_batch(leader, make_batch([b"v"] * 4), [b"v"] * 4, 1)
    leader.flush()
    leader_end = modern_end(leader)
    with open(leader.segments[0].path, "rb") as file:
        data = file.read()
    follower = make_log("t", 1)
    entries = [(start, end) for start, end, _m in iter_entries(data)]
    cuts = [start for start, _end in entries[::5]] + [len(data)]  # not the leader's appends
    for start, stop in zip(cuts, cuts[1:]):
        follower.append(ValidatedMessageSet(memoryview(data)[start:stop], 1))
    follower.flush()
    assert modern_end(follower) == leader_end
    assert [r[:2] for r in index_rows(follower)] == [r[:2] for r in index_rows(leader)]


def test_offsets_carry_across_segments_and_segments_go_with_retention(make_log, clock):
    log = make_log(file_size=3050)
    wrapper = encode_compressed_message_set([b""] * 5000, GZIP)
    appended(log, [b"a" * 3000])
    log.append(ValidatedMessageSet(memoryview(wrapper), 5000))  # the last entry of segment 0
    log.flush()
    assert modern_end(log) == 3010 + 5000  # a modern client is reading the log
    clock.advance(1)
    after = appended(log, [b"b"])[0]  # rolls: the first entry of segment 1
    log.flush()
    assert len(log.segments) == 2 and log.segments[1].start == after
    wrapper_end = 3010 + 5000
    number, entry = locate(log, after + 1)  # a record of the wrapper, past segment 1's start
    assert (number, entry.position, entry.first) == (0, 3010, 3010)
    number, entry = locate(log, wrapper_end)
    assert (number, entry.position, entry.first) == (1, 0, wrapper_end)
    assert modern_end(log) == wrapper_end + 1
    index_path = log.segments[0].path[:-len(".kafka")] + ".index"
    assert os.path.exists(index_path)
    clock.advance(8 * 24 * 3600)
    log.delete_old_segments(clock())
    assert not os.path.exists(index_path)
    # Everything expired: the log is empty, and its next record comes after the last one given.
    assert earliest(log) == modern_end(log) == next_offset(log) == wrapper_end + 1


def test_a_replica_truncated_to_its_leader_cuts_its_index_too(make_log, make_batch):
    log = make_log(log_class=ReplicaLog)
    keep = appended(log, [b"k" * 2000] * 4)
    cut_at = log.written_end
    append_batch(log, make_batch([b"v"] * 9), [b"v"] * 9, 1)
    appended(log, [b"z" * 2000] * 4)
    log.publish_to(log.written_end)
    assert modern_end(log) > cut_at + 9
    log.truncate_to(cut_at)
    assert modern_end(log) == keep[-1] + 1
    assert all(row[0] < cut_at - log.segments[0].start for row in index_rows(log))
    base = append_batch(log, make_batch([b"w"] * 2), [b"w"] * 2, 2)
    log.publish_to(log.written_end)
    assert base == cut_at and modern_end(log) == cut_at + 2
    assert [h.records_count for _f, h in iter_batch_headers(log)] == [2]


def test_a_replicas_modern_end_is_its_high_watermark(make_log, make_batch):
    log = make_log(log_class=ReplicaLog)
    base = append_batch(log, make_batch([b"v"] * 3), [b"v"] * 3, 0)
    log.flush()
    assert modern_end(log) == 0 and locate(log, 0) is None
    log.publish_to(log.written_end)
    assert modern_end(log) == base + 3


def test_batch_headers_come_with_their_producer_fields_committed_or_not(make_log, make_batch):
    log = make_log(log_class=ReplicaLog)
    appended(log, [b"x"])
    bases = [append_batch(log, make_batch([b"v"] * 2, producer_id=42, producer_epoch=1, base_sequence=seq), [b"v"] * 2, 0)
             for seq in (0, 2, 4)]
    found = list(iter_batch_headers(log))
    assert [first for first, _h in found] == bases
    assert [(h.producer_id, h.base_sequence, h.last_sequence, h.base_offset) for _f, h in found] == [
        (42, 0, 1, bases[0]), (42, 2, 3, bases[1]), (42, 4, 5, bases[2])]
    assert [first for first, _h in iter_batch_headers(log, bases[1])] == bases[1:]


def test_an_offset_before_the_log_is_out_of_range(make_log, clock):
    log = make_log(file_size=100)
    appended(log, [b"a" * 200])
    clock.advance(1)
    appended(log, [b"b"])
    log.flush()
    clock.advance(8 * 24 * 3600)
    log.delete_old_segments(clock())
    with pytest.raises(OffsetOutOfRange):
        locate(log, 0)


def test_a_segment_no_modern_query_walked_is_not_walked_to_start_the_next(make_log, clock):
    log = make_log(file_size=1000)
    appended(log, [b"a" * 2000])
    clock.advance(1)
    after = appended(log, [b"b"])[0]  # segment 1
    log.flush()
    assert modern_end(log) == after + 1
    assert log.segments[0].offset_index.walked == 0  # ListOffsets latest did not walk segment 0
    assert locate(log, 0)[1].first == 0
