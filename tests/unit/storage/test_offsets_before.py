"""Offsets requests: segment starts by last-write time, newest first (spec 4.4)."""

import os

import pytest


@pytest.fixture
def spec_log(make_log, batch, clock):
    """0.7.2 LogOffsetTest: log.file.size=100, 20 appends of one 12-byte entry, all flushed.

    Each segment is written at its own second, so the segments' last-write times are
    start+1 (0), start+2 (108) and start+3 (216); the request comes at start+10.
    """
    log = make_log(file_size=100, flush_interval_messages=1)
    start = clock()
    for i in range(20):
        clock.time = start + 1 + i // 9  # appends 0-8 in the first second, 9-17 the next...
        log.append(batch([b"ab"]))
    clock.time = start + 10
    assert [s.start for s in log.segments] == [0, 108, 216]
    return log, start


def test_latest_lists_the_flushed_end_then_every_segment_start(spec_log):
    log, _ = spec_log
    assert log.offsets_before(-1, 10) == [240, 216, 108, 0]


def test_earliest_is_the_first_segment_start(spec_log):
    log, _ = spec_log
    assert log.offsets_before(-2, 10) == [0]


@pytest.mark.parametrize("seconds, expected", [
    (1, [0]),               # only the first segment was last written by then
    (1.5, [0]),
    (2, [108, 0]),
    (3, [216, 108, 0]),     # every segment, but not the end: it is stamped with the request time
    (9.999, [216, 108, 0]),
    (10, [240, 216, 108, 0]),
])
def test_a_time_picks_the_newest_segment_last_written_at_or_before_it(spec_log, seconds, expected):
    log, start = spec_log
    assert log.offsets_before(round((start + seconds) * 1000), 10) == expected


def test_a_time_before_every_segment_gives_no_offsets(spec_log):
    log, start = spec_log
    assert log.offsets_before(round((start + 0.999) * 1000), 10) == []
    assert log.offsets_before(0, 10) == []


@pytest.mark.parametrize("time_ms, max_count, expected", [
    (-1, 2, [240, 216]),
    (-1, 1, [240]),
    (-1, 0, []),
    (-2, 0, []),
    (-1, 4, [240, 216, 108, 0]),
])
def test_max_count_bounds_the_list(spec_log, time_ms, max_count, expected):
    log, _ = spec_log
    assert log.offsets_before(time_ms, max_count) == expected


def test_a_negative_max_count_is_refused(spec_log):
    log, _ = spec_log
    with pytest.raises(ValueError):
        log.offsets_before(-1, -1)


def test_an_empty_partition_answers_zero_for_latest_and_earliest(make_log):
    log = make_log()
    assert log.offsets_before(-1, 10) == [0]
    assert log.offsets_before(-2, 10) == [0]


def test_latest_is_the_newest_start_when_the_newest_segment_has_nothing_flushed(make_log, batch):
    log = make_log(file_size=20, flush_interval_messages=1000)
    for _ in range(3):
        log.append(batch([b"ab"]))  # the third rolls (flushing 24 bytes) and stays unflushed
    assert log.offsets_before(-1, 10) == [24, 0]
    assert log.offsets_before(-2, 10) == [0]


def test_a_loaded_segment_is_dated_by_its_file_mtime(make_manager, batch):
    manager = make_manager()
    log = manager.get_or_create_log("t", 0)
    log.append(batch([b"ab"]))
    manager.close()
    os.utime(os.path.join(log.directory, "00000000000000000000.kafka"), (500.0, 500.0))
    log = make_manager().get_log("t", 0)
    assert log.offsets_before(500_000, 10) == [0]
    assert log.offsets_before(499_999, 10) == []
