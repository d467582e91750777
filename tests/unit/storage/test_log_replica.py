"""A replica's log: readers see up to the high watermark replication publishes, flushed or
not; the tail past it can be cut to match the leader (docs/replication.md §3, §6)."""

import os
from pathlib import Path

import pytest

from twisted_broker.errors import OffsetOutOfRange
from twisted_broker.storage.replica_log import ReplicaLog
from twisted_broker.codec.kafka07.message_set import encode_message_set

ENTRY = encode_message_set([b"ab"])  # 12 bytes


@pytest.fixture
def make_replica_log(make_log):
    def make(high_watermark=0, **policy):
        return make_log(log_class=ReplicaLog, log_options={"high_watermark": high_watermark}, **policy)
    return make


def test_appended_data_is_invisible_until_published_even_once_flushed(make_replica_log, batch, read_all):
    log = make_replica_log(flush_interval_messages=1)
    log.append(batch([b"ab"]))
    log.append(batch([b"cd"]))
    assert log.flushed_end == 24 and log.written_end == 24
    assert log.end_offset == 0 and read_all(log, 100) == []
    log.publish_to(12)
    assert log.end_offset == 12 and read_all(log, 100) == [(0, b"ab")]


def test_committed_data_is_served_before_any_flush(make_replica_log, batch, read_all):
    log = make_replica_log(flush_interval_messages=1000)
    log.append(batch([b"ab", b"cd"]))
    assert log.flushed_end == 0
    log.publish_to(log.written_end)
    assert read_all(log, 100) == [(0, b"ab"), (12, b"cd")]


def test_a_fetch_between_the_high_watermark_and_the_written_end_is_empty_not_out_of_range(make_replica_log, batch):
    log = make_replica_log()
    log.append(batch([b"ab", b"cd"]))
    log.publish_to(12)
    assert log.read(12, 100) is None
    assert log.read(24, 100) is None
    with pytest.raises(OffsetOutOfRange):
        log.read(36, 100)


def test_the_high_watermark_never_moves_back_nor_past_what_is_written(make_replica_log, batch):
    log = make_replica_log()
    log.append(batch([b"ab"]))
    log.publish_to(100)
    assert log.end_offset == 12
    log.publish_to(0)
    assert log.end_offset == 12


def test_opening_a_replica_hides_what_its_checkpoint_did_not_commit(make_log, make_replica_log, batch, read_all):
    log = make_log(flush_interval_messages=1)
    log.append(batch([b"ab"]))
    log.append(batch([b"cd"]))
    assert log.end_offset == 24  # 0.7's rule: flushed, so visible
    log.close()
    log = make_replica_log(high_watermark=12)
    assert log.end_offset == 12 and read_all(log, 100) == [(0, b"ab")]
    assert log.offsets_before(-1, 10) == [12, 0]


def test_publishing_wakes_held_fetches_and_flushing_does_not(make_replica_log, batch):
    log = make_replica_log(flush_interval_messages=1)
    woken = []
    log.watch_flush(lambda at_once: woken.append(True))
    log.append(batch([b"ab"]))
    log.flush()
    assert woken == []
    log.publish_to(12)
    assert woken == [True]


def test_the_high_watermark_follows_across_a_roll(make_replica_log, batch, read_all):
    log = make_replica_log(file_size=20, flush_interval_messages=1000)
    for payload in (b"ab", b"cd", b"ef", b"gh"):
        log.append(batch([payload]))
    assert len(log.segments) > 1
    assert read_all(log, 100) == []
    log.publish_to(36)
    assert [p for _, p in read_all(log, 100)] == [b"ab", b"cd", b"ef"]
    assert log.read(36, 100) is None


def test_truncate_cuts_whole_segments_and_the_tail_of_the_one_holding_the_offset(make_replica_log, batch, read_all):
    log = make_replica_log(file_size=20, flush_interval_messages=1)
    for payload in (b"ab", b"cd", b"ef", b"gh", b"ij"):
        log.append(batch([payload]))
    log.publish_to(60)
    starts = [segment.start for segment in log.segments]
    assert log.truncate_to(24) == 36
    assert log.written_end == 24 and log.end_offset == 24
    assert [segment.start for segment in log.segments] == [s for s in starts if s <= 24]
    assert all(Path(segment.path).exists() for segment in log.segments)
    assert [p for _, p in read_all(log, 100)] == [b"ab", b"cd"]
    log.append(batch([b"zz"]))  # appends go on from the cut
    log.publish_to(36)
    assert [p for _, p in read_all(log, 100)] == [b"ab", b"cd", b"zz"]


def test_truncate_keeps_what_was_not_committed_hidden(make_replica_log, batch):
    log = make_replica_log(flush_interval_messages=1)
    for payload in (b"ab", b"cd", b"ef"):
        log.append(batch([payload]))
    log.truncate_to(24)
    assert log.end_offset == 0 and log.read(0, 100) is None
    assert log.truncate_to(100) == 0
    with pytest.raises(ValueError, match="before its start"):
        log.truncate_to(-1)


def test_a_0_7_log_with_committed_visibility_shows_each_append_before_its_flush(make_log, batch, read_all):
    log = make_log(flush_interval_messages=1000)
    log.visible_at_append = True
    woken = []
    log.watch_flush(lambda at_once: woken.append(True))
    log.append(batch([b"ab"]))
    assert log.flushed_end == 0 and read_all(log, 100) == [(0, b"ab")] and woken == [True]


def test_a_leader_reads_for_its_followers_past_the_high_watermark_up_to_what_is_written(make_replica_log, batch):
    log = make_replica_log(file_size=20, flush_interval_messages=1000)
    for payload in (b"ab", b"cd", b"ef"):
        log.append(batch([payload]))
    with log.read_written(0, 100) as region:
        assert region.length == 24  # the first segment, whole (a region never spans two)
    with log.read_written(24, 100) as region:
        assert region.length == 12
    assert log.read_written(36, 100) is None
    with pytest.raises(OffsetOutOfRange):
        log.read_written(48, 100)


def test_a_follower_behind_its_leaders_start_restarts_empty_there(make_replica_log, batch, read_all):
    log = make_replica_log(flush_interval_messages=1)
    log.append(batch([b"ab"]))
    log.restart_at(500)
    assert (log.first_offset, log.written_end, log.end_offset) == (500, 500, 500)
    assert [s.start for s in log.segments] == [500]
    log.append(batch([b"cd"]))
    log.publish_to(512)
    assert read_all(log, 100) == [(500, b"cd")]


def test_a_read_for_followers_holds_at_least_the_first_whole_entry_whatever_its_size(make_replica_log, batch):
    # issue 22, defect 3 (KIP-74): part of an entry is of no use to a follower
    log = make_replica_log(flush_interval_messages=1000)
    log.append(batch([b"x" * 5000]))
    log.append(batch([b"y"]))
    first = log.written_end - 11
    with log.read_written(0, 1000) as region:
        assert (region.position, region.length) == (0, first)  # one whole entry, not 1000 bytes
    with log.read_written(0, first + 5) as region:
        assert region.length == first  # whole entries only, as before
    with log.read_written(first, 1) as region:
        assert region.length == 11


def test_after_a_truncation_an_offset_inside_the_new_entries_or_past_the_end_is_out_of_range(
        make_replica_log, batch, read_all):
    # issue 22, defect 8: a consumer read [0, 24) and [24, 36) before the cut at 12; the new
    # leader's entries since then start at 12 and 42: 24 and 36 fall inside them
    log = make_replica_log(flush_interval_messages=1000)
    for payload in (b"ab", b"cd", b"ef"):
        log.append(batch([payload]))
    log.publish_to(36)
    log.truncate_to(12)
    with pytest.raises(OffsetOutOfRange):
        log.read(24, 100)  # past the end
    log.append(batch([b"x" * 20]))
    log.append(batch([b"y" * 20]))
    log.publish_to(log.written_end)
    for inside in (24, 36):
        with pytest.raises(OffsetOutOfRange):
            log.read(inside, 100)
    assert read_all(log, 100) == [(0, b"ab"), (12, b"x" * 20), (42, b"y" * 20)]
    with pytest.raises(OffsetOutOfRange):
        log.read(log.written_end + 1, 100)


def test_a_loaded_replica_log_knows_its_entry_boundaries(make_replica_log, batch):
    log = make_replica_log(flush_interval_messages=1)
    for payload in (b"a" * 3000, b"b" * 3000, b"c"):
        log.append(batch([payload]))
    log.publish_to(log.written_end)
    segment = log.segments[-1]
    # as a broker's next run finds it: only the segment's start and end known
    segment._index[:] = type(segment._index)("q", [0, segment.size])
    with pytest.raises(OffsetOutOfRange):
        log.read(3005, 100)
    with log.read(3010, 10_000) as region:
        assert region.length == 3010 + 11


def test_far_into_a_loaded_replica_log_an_entry_start_is_known_by_its_crc(make_replica_log, batch):
    log = make_replica_log(flush_interval_messages=1)
    payloads = [os.urandom(4000) for _ in range(300)]  # 1.2 MB: too far to walk from the start
    for payload in payloads:
        log.append(batch([payload]))
    log.publish_to(log.written_end)
    segment = log.segments[-1]
    segment._index[:] = type(segment._index)("q", [0, segment.size])
    entry = len(encode_message_set([payloads[0]]))
    with pytest.raises(OffsetOutOfRange):
        log.read(290 * entry + 7, 100_000)
    with log.read(290 * entry, entry) as region:
        assert region.read() == encode_message_set([payloads[290]])
