"""Retention: by last-write time and by size, never giving up the end offset (spec 4.7)."""

import os

import pytest

from twisted_broker.errors import OffsetOutOfRange
from twisted_broker.storage.log import LogPolicy
from twisted_broker.codec.kafka07.message_set import encode_message_set

ENTRY = encode_message_set([b"ab"])  # 12 bytes; with file_size=100 a segment holds 9 (108 bytes)


@pytest.fixture
def aged_log(make_log, batch, clock):
    """Segments 0, 108, 216, 324 last written at start+100, +200, +300, +400; 432 is the end.

    Returns (log, start). The policy is replaced by each test.
    """
    log = make_log(file_size=100, flush_interval_messages=1)
    start = clock()
    for i in range(36):
        clock.time = start + 100 * (i // 9 + 1)
        log.append(batch([b"ab"]))
    log.flush()  # publishes the last flush (an inline flusher's job is done, not yet reaped)
    assert [(s.start, s.flushed_size, s.modified_time - start) for s in log.segments] == [
        (0, 108, 100), (108, 108, 200), (216, 108, 300), (324, 108, 400)]
    return log, start


def starts(log):
    return [segment.start for segment in log.segments]


def test_time_retention_deletes_the_segments_last_written_before_the_limit(aged_log, clock):
    log, start = aged_log
    log.policy = LogPolicy(retention_ms=150_000)
    clock.time = start + 400
    deleted = log.delete_old_segments(clock())
    assert [segment.start for segment in deleted] == [0, 108]  # 100 and 200 are before 250
    assert all(not os.path.exists(segment.path) for segment in deleted)
    assert starts(log) == [216, 324]
    assert sorted(os.listdir(log.directory)) == ["00000000000000000216.kafka", "00000000000000000324.kafka"]
    with pytest.raises(OffsetOutOfRange):
        log.read(108, 1000)
    with log.read(216, 1000) as region:
        assert region.read() == ENTRY * 9


def test_time_retention_keeps_a_segment_written_exactly_at_the_limit(aged_log, clock):
    log, start = aged_log
    log.policy = LogPolicy(retention_ms=200_000)
    clock.time = start + 400
    assert [segment.start for segment in log.delete_old_segments(clock())] == [0]


def test_time_retention_stops_at_the_first_segment_it_keeps(aged_log, clock):
    log, start = aged_log
    log.segments[1].touch(start + 380)  # kept: newer than the limit of +350
    log.policy = LogPolicy(retention_ms=50_000)
    clock.time = start + 400
    # 0 (+100) goes; 108 (+380) is kept, so 216 (+300) stays although it is older than the limit.
    assert [segment.start for segment in log.delete_old_segments(clock())] == [0]
    assert starts(log) == [108, 216, 324]


@pytest.mark.parametrize("retention_bytes, deleted", [
    (433, []),                  # under the limit
    (432, []),                  # at the limit: no excess covers a whole segment
    (324, [0]),                 # excess 108 covers exactly the first segment
    (323, [0]),                 # excess 109: the second segment (108) is not covered too
    (216, [0, 108]),
    (109, [0, 108]),            # excess 323 covers three segments' 324 bytes only in part
    (-1, []),                   # no size limit
])
def test_size_retention_deletes_oldest_segments_while_the_excess_covers_them(aged_log, clock,
                                                                            retention_bytes, deleted):
    log, start = aged_log
    log.policy = LogPolicy(retention_bytes=retention_bytes)
    clock.time = start + 400
    assert [segment.start for segment in log.delete_old_segments(clock())] == deleted
    assert log.size == 432 - 108 * len(deleted)


def test_size_retention_counts_only_what_time_retention_left(aged_log, clock):
    log, start = aged_log
    # Time removes 0 (written at +100); of the 324 bytes left, the excess over 300 is 24, which
    # covers no whole segment. (0.7 runs the time pass, then the size pass on what is left;
    # counting the excess over all 432 bytes would take 108 too.)
    log.policy = LogPolicy(retention_ms=250_000, retention_bytes=300)
    clock.time = start + 400
    assert [segment.start for segment in log.delete_old_segments(clock())] == [0]
    assert starts(log) == [108, 216, 324]


def test_when_every_segment_expires_the_log_rolls_and_keeps_its_end_offset(aged_log, batch, clock):
    log, start = aged_log
    log.policy = LogPolicy(retention_ms=1000, flush_interval_messages=1)
    clock.time = start + 10_000
    deleted = log.delete_old_segments(clock())
    assert [segment.start for segment in deleted] == [0, 108, 216, 324]
    assert starts(log) == [432]
    assert os.listdir(log.directory) == ["00000000000000000432.kafka"]
    assert (log.first_offset, log.end_offset) == (432, 432)
    assert log.read(432, 1000) is None
    assert log.offsets_before(-2, 10) == log.offsets_before(-1, 10) == [432]
    assert log.append(batch([b"ab"])) == 432


def test_size_retention_of_everything_also_rolls_first(aged_log, clock):
    log, _ = aged_log
    log.policy = LogPolicy(retention_bytes=0)
    assert len(log.delete_old_segments(clock())) == 4
    assert starts(log) == [432] and log.end_offset == 432


def test_an_empty_newest_segment_is_kept_and_touched(aged_log, clock):
    log, start = aged_log
    log.roll()  # the newest segment, 432, is empty
    log.segments[-1].modified_time = start  # and old
    log.policy = LogPolicy(retention_ms=1000)
    clock.time = start + 10_000
    assert [segment.start for segment in log.delete_old_segments(clock())] == [0, 108, 216, 324]
    assert starts(log) == [432]
    assert log.segments[0].modified_time == clock()
    assert os.stat(log.segments[0].path).st_mtime == clock()


def test_a_single_empty_segment_is_never_deleted(make_log, clock):
    log = make_log(retention_ms=1000, retention_bytes=0)
    clock.advance(10_000)
    assert log.delete_old_segments(clock()) == []
    assert starts(log) == [0] and os.path.exists(log.segments[0].path)


def test_a_region_read_before_its_segment_is_deleted_stays_readable(aged_log, clock):
    log, start = aged_log
    region = log.read(0, 10_000)
    log.policy = LogPolicy(retention_ms=1000)
    clock.time = start + 10_000
    assert log.delete_old_segments(clock())[0].start == 0
    assert not os.path.exists(os.path.join(log.directory, "00000000000000000000.kafka"))
    assert region.read() == ENTRY * 9
    region.close()


def test_log_manager_cleanup_counts_the_deleted_segments(make_manager, batch, clock):
    manager = make_manager(policy_for=lambda topic: LogPolicy(
        file_size=100, flush_interval_messages=1, retention_ms=60_000))
    for topic, count in (("a", 20), ("b", 10)):
        log = manager.get_or_create_log(topic, 0)
        for _ in range(count):
            log.append(batch([b"ab"]))
    assert manager.cleanup() == 0
    clock.advance(61)
    # a: 0, 108 and 216 go after a roll to 240; b: 0 and 108 go after a roll to 120.
    assert manager.cleanup() == 5
    assert [starts(log) for log in manager.logs()] == [[240], [120]]
