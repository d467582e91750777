"""Appends across segments, and reads: boundaries, segment limits, OffsetOutOfRange (spec 4.3, 4.5)."""

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twisted_broker.errors import OffsetOutOfRange
from twisted_broker.storage import segment as segment_module
from twisted_broker.storage.log import Log, LogPolicy
from twisted_broker.storage.log_directory import open_log_directory
from twisted_broker.storage.segment import INDEX_INTERVAL_BYTES
from twisted_broker.codec.kafka07.message_set import (
    encode_message_set, iter_entries, valid_bytes, validate_message_set,
)

ENTRY = encode_message_set([b"ab"])  # 12 bytes


def payloads_of(sizes, tag=0):
    """Distinct payloads of the given sizes, so a read-back in the wrong order shows."""
    return [(f"{tag}:{i}:".encode() * size)[:size] for i, size in enumerate(sizes)]


def length_of(payload):
    return len(encode_message_set([payload]))


def file_bytes(log):
    return {segment.start: Path(segment.path).read_bytes() for segment in log.segments}


def test_every_message_is_read_back_in_order_across_many_segments(make_log, batch, read_all):
    log = make_log(file_size=1000, flush_interval_messages=1)
    payloads = payloads_of([(i * 37) % 300 for i in range(200)])
    offsets = [log.append(batch([payload])) for payload in payloads]
    assert len(log.segments) > 10
    for max_size in (400, 1000, 5000):
        assert read_all(log, max_size) == list(zip(offsets, payloads))


def test_append_returns_the_offset_of_each_message_set(make_log, batch):
    log = make_log(flush_interval_messages=1)
    assert log.append(batch([b"ab"])) == 0
    assert log.append(batch([b"ab", b"cd"])) == 12
    assert log.append(batch([b"ab"])) == 36
    assert log.offsets_before(-1, 1) == [48]


def test_the_log_rolls_only_when_the_newest_segment_is_strictly_larger_than_file_size(make_log, batch):
    log = make_log(file_size=96, flush_interval_messages=1)
    for _ in range(20):
        log.append(batch([b"ab"]))
    # At 96 bytes (8 entries) the segment is not over 96, so it takes a ninth: starts 0, 108, 216.
    assert [segment.start for segment in log.segments] == [0, 108, 216]
    assert [segment.size for segment in log.segments] == [108, 108, 24]
    assert sorted(os.listdir(log.directory)) == [
        "00000000000000000000.kafka", "00000000000000000108.kafka", "00000000000000000216.kafka"]


def test_the_size_check_runs_before_the_append_so_a_segment_overshoots(make_log, batch):
    log = make_log(file_size=100, flush_interval_messages=1)
    log.append(batch([b"x" * 500]))
    assert [(s.start, s.size) for s in log.segments] == [(0, 510)]
    log.append(batch([b"y"]))
    assert [(s.start, s.size) for s in log.segments] == [(0, 510), (510, 11)]


def test_the_log_rolls_when_its_newest_segment_was_first_written_roll_ms_ago(make_log, batch, clock):
    log = make_log(roll_ms=60_000, flush_interval_messages=1)
    log.append(batch([b"ab"]))
    clock.advance(60)
    log.append(batch([b"ab"]))
    assert [s.start for s in log.segments] == [0]
    clock.advance(0.001)
    log.append(batch([b"ab"]))
    assert [s.start for s in log.segments] == [0, 24]


def test_a_read_never_spans_two_segments(make_log, batch):
    log = make_log(file_size=96, flush_interval_messages=1)
    for _ in range(20):
        log.append(batch([b"ab"]))
    with log.read(0, 10_000) as region:
        assert region.read() == ENTRY * 9
    with log.read(96, 10_000) as region:  # the last entry of the first segment
        assert region.read() == ENTRY
    with log.read(108, 10_000) as region:
        assert region.read() == ENTRY * 9


def test_a_read_is_cut_at_the_last_whole_message_that_fits(make_log, batch):
    log = make_log(flush_interval_messages=1)
    entries = [encode_message_set([payload]) for payload in payloads_of([90, 10, 50, 200])]
    for entry in entries:
        log.append(batch([entry[10:]]))  # entry[10:] is the payload again
    sizes = [len(entry) for entry in entries]  # 100, 20, 60, 210
    assert sizes == [100, 20, 60, 210]
    for max_size, expected in [(100, 1), (119, 1), (120, 2), (179, 2), (180, 3), (389, 3), (390, 4)]:
        with log.read(0, max_size) as region:
            assert region.read() == b"".join(entries[:expected]), max_size
    with log.read(100, 80) as region:  # from a later boundary
        assert region.read() == entries[1] + entries[2]


def test_a_first_message_larger_than_max_size_gives_the_raw_max_size_prefix(make_log, batch):
    log = make_log(flush_interval_messages=1)
    log.append(batch([b"x" * 90, b"y"]))
    contents = file_bytes(log)[0]
    with log.read(0, 30) as region:
        data = region.read()
    assert data == contents[:30]
    assert valid_bytes(data) == 0  # the client sees an incomplete first message
    with log.read(100, 5) as region:  # the second entry (11 bytes) from its own start
        assert region.read() == contents[100:105]


def test_a_read_at_the_flushed_end_returns_none(make_log, batch):
    log = make_log(flush_interval_messages=1)
    assert log.read(0, 1000) is None  # an empty log
    log.append(batch([b"ab"]))
    assert log.read(12, 1000) is None


def test_a_read_of_zero_bytes_returns_none_and_a_negative_size_is_refused(make_log, batch):
    log = make_log(flush_interval_messages=1)
    log.append(batch([b"ab"]))
    assert log.read(0, 0) is None
    with pytest.raises(ValueError):
        log.read(0, -1)


@pytest.mark.parametrize("offset", [13, 24, 10**12])
def test_a_read_past_the_end_is_out_of_range(make_log, batch, offset):
    log = make_log(flush_interval_messages=1)
    log.append(batch([b"ab"]))
    with pytest.raises(OffsetOutOfRange):
        log.read(offset, 1000)


def test_a_read_before_the_first_segment_is_out_of_range(make_log, batch, clock):
    log = make_log(file_size=96, flush_interval_messages=1, retention_ms=1000)
    for _ in range(12):
        log.append(batch([b"ab"]))
    log.segments[0].modified_time = clock() - 10  # expire only the first segment
    log.delete_old_segments(clock())
    assert log.first_offset == 108
    for offset in (-1, 0, 96, 107):
        with pytest.raises(OffsetOutOfRange):
            log.read(offset, 1000)
    with log.read(108, 1000) as region:
        assert region.read() == ENTRY * 3


def test_a_read_inside_the_unflushed_tail_is_out_of_range(make_log, batch):
    log = make_log(flush_interval_messages=1000)
    log.append(batch([b"ab"]))
    log.flush()
    log.append(batch([b"ab", b"ab"]))  # written, not flushed
    assert log.end_offset == 12
    assert log.read(12, 1000) is None
    for offset in (13, 24, 35, 36):
        with pytest.raises(OffsetOutOfRange):
            log.read(offset, 1000)


def test_a_misaligned_offset_gives_raw_bytes_from_the_middle_of_a_message(make_log, batch):
    log = make_log(flush_interval_messages=1)
    for payload in payloads_of([30, 5, 70]):
        log.append(batch([payload]))
    contents = file_bytes(log)[0]
    for offset in range(1, len(contents)):
        for max_size in (1, 7, 40, 1000):
            region = log.read(offset, max_size)
            with region:
                data = region.read()
            assert 0 < len(data) <= max_size
            assert data == contents[offset:offset + len(data)]


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=3000), min_size=1, max_size=40),
    file_size=st.integers(min_value=0, max_value=20_000),
    flush_every=st.integers(min_value=1, max_value=5),
    slack=st.integers(min_value=0, max_value=20_000),
    offset_choice=st.integers(min_value=0),
)
def test_reading_from_the_start_yields_exactly_the_flushed_messages(tmp_path, clock, sizes, file_size,
                                                                   flush_every, slack, offset_choice):
    payloads = payloads_of(sizes)
    with tempfile.TemporaryDirectory(dir=tmp_path) as directory:  # one per example
        log = Log(directory, "t", 0, open_log_directory(directory, clock()),
                  policy=LogPolicy(file_size=file_size, flush_interval_messages=flush_every), now=clock)
        offsets = [log.append(validate_message_set(encode_message_set([payload]))) for payload in payloads]
        entry_sizes = [len(encode_message_set([payload])) for payload in payloads]
        max_size = max(entry_sizes) + slack
        flushed_end = log.offsets_before(-1, 1)[0]
        flushed = [(o, p) for o, p, n in zip(offsets, payloads, entry_sizes) if o + n <= flushed_end]
        # Visible: everything up to the last flush, which the count or a roll started.
        assert flushed_end == (flushed[-1][0] + length_of(flushed[-1][1]) if flushed else 0)
        assert len(payloads) - len(flushed) < flush_every
        bounds = {segment.start: segment.end for segment in log.segments}
        length_at = dict(zip(offsets, entry_sizes))

        found, offset = [], 0
        while (region := log.read(offset, max_size)) is not None:
            with region:
                data = region.read()
            segment_start = max(start for start in bounds if start <= offset)
            assert offset + len(data) <= bounds[segment_start]  # within one segment
            assert valid_bytes(data) == len(data) <= max_size  # cut at a message boundary
            end = offset + len(data)
            assert end == bounds[segment_start] or len(data) + length_at[end] > max_size  # as much as fits
            entries = list(iter_entries(data, offset))
            found += [(start, bytes(message.payload)) for start, _next, message in entries]
            offset = entries[-1][1]
        assert found == flushed
        assert offset == flushed_end

        # A read from any committed offset is cut the same way.
        if flushed:
            start = flushed[offset_choice % len(flushed)][0]
            with log.read(start, max_size) as region:
                data = region.read()
            assert valid_bytes(data) == len(data) > 0
        log.close()


def test_reads_from_committed_offsets_after_a_cold_reopen_are_cut_at_boundaries(make_manager, batch):
    # One segment of ~200 KiB: more than the walk window, and nothing of it in the sparse
    # boundary index after the reopen except its start and end.
    manager = make_manager(policy_for=lambda topic: LogPolicy(flush_interval_messages=1))
    log = manager.get_or_create_log("t", 0)
    payloads = payloads_of([(i * 7919) % 2500 for i in range(160)])
    offsets = [log.append(batch([payload])) for payload in payloads]
    entries = [encode_message_set([payload]) for payload in payloads]
    end = log.offsets_before(-1, 1)[0]
    manager.close()

    log = make_manager().get_log("t", 0)
    assert (len(log.segments), log.end_offset) == (1, end)
    for i in range(0, len(offsets), 7):
        for max_size in (3000, 9000, 70_000):
            expected, total = [], 0
            for entry in entries[i:]:
                if total + len(entry) > max_size:
                    break
                expected.append(entry)
                total += len(entry)
            with log.read(offsets[i], max_size) as region:
                assert region.read() == b"".join(expected), (offsets[i], max_size)


class CountingPread:
    """Stands in for ``os`` inside segment.py, counting the bytes that pread returns."""

    def __init__(self) -> None:
        self.bytes_read = 0

    def pread(self, fd, length, position):
        data = os.pread(fd, length, position)
        self.bytes_read += len(data)
        return data

    def __getattr__(self, name):
        return getattr(os, name)


def test_walked_boundaries_are_indexed_so_a_later_read_skips_most_of_the_walk(make_manager, batch,
                                                                              monkeypatch):
    manager = make_manager(policy_for=lambda topic: LogPolicy(flush_interval_messages=1000))
    log = manager.get_or_create_log("t", 0)
    for _ in range(10):
        log.append(batch([b"x" * 990] * 100))  # 1000 entries of 1000 bytes
    manager.close()
    log = make_manager().get_log("t", 0)  # cold: only the start and the end are known boundaries
    end = log.end_offset
    assert end == 1_000_000
    # Each read walks length fields to find its last boundary; the later half first.
    with log.read(500_000, 499_999) as region:
        assert region.length == 499_000
    with log.read(0, 500_500) as region:
        assert region.length == 500_000

    counting = CountingPread()
    monkeypatch.setattr(segment_module, "os", counting)
    with log.read(1000, end - 2500) as region:  # up to 998500: cut back to the boundary at 998000
        assert region.length == end - 3000
    assert counting.bytes_read <= INDEX_INTERVAL_BYTES + 1000  # not the ~1 MB in between
