"""Segment files: their names, loading a partition directory, and one segment's sizes and regions."""

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.storage.flusher import FlushJob
from twisted_broker.storage.log_directory import open_log_directory
from twisted_broker.storage.segment import Segment, parse_segment_file_name, segment_file_name
from twisted_broker.codec.kafka07.message_set import encode_message_set

ENTRY = encode_message_set([b"ab"])  # one 12-byte entry: length 8, magic 1, attributes, crc, "ab"


def flush(segment):
    """fsync the segment and publish its size, as an inline flusher does."""
    job = FlushJob(segment.fileno(), lambda: segment.size)
    job.run()
    segment.flushed(job.size)


def test_segment_file_name_is_the_start_offset_in_20_digits():
    assert segment_file_name(0) == "00000000000000000000.kafka"
    assert segment_file_name(536871001) == "00000000000536871001.kafka"


def test_parse_segment_file_name_accepts_any_digit_count():
    assert parse_segment_file_name("00000000000536871001.kafka") == 536871001
    assert parse_segment_file_name("00000000100.kafka") == 100  # the design page's 11 digits
    assert parse_segment_file_name("7.kafka") == 7


@pytest.mark.parametrize("name", [
    ".kafka", "abc.kafka", "00000000000000000000.kafka.swp", "00000000000000000000.log",
    "-1.kafka", "+1.kafka", "1 .kafka", "00000000000000000000.KAFKA", "notes.txt",
    "\u00b2.kafka",  # superscript two: str.isdigit() says yes, int() says no
    "\u0661.kafka",  # ARABIC-INDIC DIGIT ONE: not a name 0.7 or this broker writes
])
def test_parse_segment_file_name_refuses_other_names(name):
    assert parse_segment_file_name(name) is None


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_segment_file_name_round_trips(start):
    assert parse_segment_file_name(segment_file_name(start)) == start


@given(st.text())
def test_parse_segment_file_name_never_raises_and_only_takes_ascii_digits(name):
    start = parse_segment_file_name(name)
    if start is not None:
        digits = name.removesuffix(".kafka")
        assert digits.isascii() and digits.isdigit() and int(digits) == start


def test_open_log_directory_creates_the_first_segment_in_an_empty_directory(tmp_path):
    segments = open_log_directory(str(tmp_path), now=5.0)
    assert [s.start for s in segments] == [0]
    assert os.listdir(tmp_path) == ["00000000000000000000.kafka"]
    assert segments[0].size == 0 and segments[0].modified_time == 5.0
    segments[0].close()


def test_open_log_directory_sorts_segments_and_ignores_other_files(tmp_path):
    (tmp_path / segment_file_name(12)).write_bytes(ENTRY)
    (tmp_path / segment_file_name(0)).write_bytes(ENTRY)
    for stray in ["notes.txt", "abc.kafka", "00000000000000000024.kafka.swp", "\u00b2.kafka"]:
        (tmp_path / stray).write_bytes(b"not a segment")
    segments = open_log_directory(str(tmp_path), now=0.0)
    assert [(s.start, s.size) for s in segments] == [(0, 12), (12, 12)]
    assert (tmp_path / "notes.txt").read_bytes() == b"not a segment"  # left alone
    for segment in segments:
        segment.close()


def test_open_log_directory_loads_a_segment_named_with_fewer_digits(tmp_path):
    (tmp_path / "00000000000.kafka").write_bytes(ENTRY)
    (tmp_path / "12.kafka").write_bytes(ENTRY)
    segments = open_log_directory(str(tmp_path), now=0.0)
    assert [(s.start, s.size) for s in segments] == [(0, 12), (12, 12)]
    for segment in segments:
        with segment.region(0, 100) as region:
            assert region.read() == ENTRY
    assert sorted(os.listdir(tmp_path)) == ["00000000000.kafka", "12.kafka"]  # nothing new made
    for segment in segments:
        segment.close()


def test_open_log_directory_refuses_non_contiguous_segments(tmp_path):
    (tmp_path / segment_file_name(0)).write_bytes(ENTRY)
    (tmp_path / segment_file_name(100)).write_bytes(ENTRY)  # the first holds 12 bytes, not 100
    with pytest.raises(ValueError, match="not contiguous"):
        open_log_directory(str(tmp_path), now=0.0)


def test_a_loaded_segment_is_all_flushed_and_keeps_its_file_mtime(tmp_path):
    path = tmp_path / segment_file_name(0)
    path.write_bytes(ENTRY * 3)
    os.utime(path, (1234.0, 1234.0))
    segment = Segment(str(tmp_path), 0, now=99999.0)
    assert (segment.size, segment.flushed_size, segment.end) == (36, 36, 36)
    assert segment.modified_time == 1234.0
    segment.close()


def test_appended_bytes_count_in_size_but_not_in_end_until_flushed(tmp_path):
    segment = Segment(str(tmp_path), 100, now=0.0)
    segment.append(memoryview(ENTRY), now=7.0)
    assert (segment.size, segment.flushed_size, segment.end) == (12, 0, 100)
    assert segment.modified_time == 7.0
    flush(segment)
    assert (segment.size, segment.flushed_size, segment.end) == (12, 12, 112)
    assert (tmp_path / segment_file_name(100)).read_bytes() == ENTRY
    segment.close()


def test_a_region_stops_at_the_flushed_size(tmp_path):
    segment = Segment(str(tmp_path), 0, now=0.0)
    segment.append(memoryview(ENTRY), now=1.0)
    flush(segment)
    segment.append(memoryview(ENTRY), now=2.0)
    with segment.region(0, 1000) as region:
        assert region.read() == ENTRY
    segment.close()


def test_truncate_cuts_the_file_and_both_sizes(tmp_path):
    segment = Segment(str(tmp_path), 0, now=0.0)
    segment.append(memoryview(ENTRY * 3), now=1.0)
    segment.truncate(24)
    assert (segment.size, segment.flushed_size) == (24, 24)
    assert (tmp_path / segment_file_name(0)).read_bytes() == ENTRY * 2
    with segment.region(0, 30) as region:  # the index forgot the cut-off boundary at 36
        assert region.read() == ENTRY * 2
    segment.close()


def test_a_region_stays_readable_after_its_segment_is_deleted(tmp_path):
    segment = Segment(str(tmp_path), 0, now=0.0)
    segment.append(memoryview(ENTRY * 2), now=1.0)
    flush(segment)
    region = segment.region(0, 1000)
    segment.delete()
    assert segment.deleted and os.listdir(tmp_path) == []
    assert region.read() == ENTRY * 2
    region.close()


def test_damage_records_are_bounded_however_much_of_a_segment_is_damaged(tmp_path, monkeypatch):
    from twisted_broker.errors import InvalidMessage
    from twisted_broker.storage import segment as segment_module
    from twisted_broker.codec.kafka07.message_set import encode_message_set

    monkeypatch.setattr(segment_module, "MAX_DAMAGE_RECORDS", 3)
    data = bytearray(encode_message_set([b"x" * 100] * 20))
    entry = 4 + 6 + 100
    for index in range(20):  # flip one payload byte of every message: each fails its CRC
        data[index * entry + 10] ^= 0xFF
    (tmp_path / "00000000000000000000.kafka").write_bytes(data)
    loaded = segment_module.Segment(str(tmp_path), 0, now=0.0)  # loaded: nothing verified yet
    for index in range(20):
        with pytest.raises(InvalidMessage):
            loaded.region(index * entry, 1000)
    assert len(loaded.damaged_messages) == 3  # refused every time, remembered (and logged) 3 times
    loaded.close()
