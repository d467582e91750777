"""Startup: recovery of the newest segment after an unclean shutdown, and the clean marker (spec 4.8)."""

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import CLEAN_SHUTDOWN_MARKER
from twisted_broker.storage.recovery import recover_segment
from twisted_broker.storage.segment import Segment
from twisted_broker.codec.kafka07.message import MAGIC_0
from twisted_broker.codec.kafka07.message_set import encode_message_set, iter_entries, valid_bytes

FIXTURE = Path(__file__).parents[2] / "fixtures" / "MagicByte0-0" / "00000000000000000000.kafka"
FIXTURE_SHA256 = "0db77e65c9cbe560e47d45e6dd43b8e61adf0c0e39c6ed9fe16890ef8d109625"

PAYLOADS = [f"message {i} ".encode() * (i % 7 + 1) for i in range(40)]


@pytest.fixture
def crashed(make_manager, batch, log_dir):
    """A partition of several segments whose broker stopped without the clean-shutdown marker.

    Returns (segment paths oldest first, the bytes of every segment, the offsets of the messages).
    """
    manager = make_manager(policy_for=lambda topic: LogPolicy(file_size=300, flush_interval_messages=1))
    log = manager.get_or_create_log("t", 0)
    offsets = [log.append(batch([payload])) for payload in PAYLOADS]
    paths = [segment.path for segment in log.segments]
    manager.close()
    os.unlink(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER))  # as if it had crashed after a flush
    assert len(paths) > 3
    return paths, [Path(path).read_bytes() for path in paths], offsets


def newest_entries(contents):
    """(position, bytes) of each entry of a segment's contents."""
    return [(start, contents[start:following]) for start, following, _ in iter_entries(contents)]


def corrupt_payload(contents):
    last_start = newest_entries(contents)[-1][0]
    damaged = bytearray(contents)
    damaged[-1] ^= 0xFF  # the last payload byte: the CRC no longer matches
    return bytes(damaged), last_start


def tear_last_message(contents):
    last_start = newest_entries(contents)[-1][0]
    return contents[:-3], last_start


def torn_new_message(contents):
    return contents + encode_message_set([b"never fully written"])[:9], len(contents)


def garbage_negative_length(contents):
    return contents + b"\xff\xff\xff\xff" + b"junk", len(contents)


def garbage_length_past_the_end(contents):
    return contents + b"\x00\x00\x10\x00" + b"\x01\x00" + b"\x00" * 20, len(contents)


def garbage_length_below_minimum(contents):
    return contents + b"\x00\x00\x00\x04" + b"\x01\x00\x00\x00", len(contents)


def garbage_short_tail(contents):
    return contents + b"\x00\x00", len(contents)


def zeroed_tail(contents):
    return contents + b"\x00" * 512, len(contents)  # e.g. a file extended but never written


DAMAGE = [corrupt_payload, tear_last_message, torn_new_message, garbage_negative_length,
          garbage_length_past_the_end, garbage_length_below_minimum, garbage_short_tail, zeroed_tail]


@pytest.mark.parametrize("damage", DAMAGE)
def test_recovery_cuts_the_newest_segment_after_its_last_valid_message(crashed, damage, make_manager,
                                                                       read_all):
    paths, contents, offsets = crashed
    damaged, keep = damage(contents[-1])
    Path(paths[-1]).write_bytes(damaged)

    manager = make_manager()
    assert manager.recovered_bytes == len(damaged) - keep
    assert Path(paths[-1]).read_bytes() == contents[-1][:keep]  # every valid byte still there
    for path, original in zip(paths[:-1], contents[:-1]):
        assert Path(path).read_bytes() == original
    log = manager.get_log("t", 0)
    newest_start = log.segments[-1].start
    assert log.end_offset == newest_start + keep
    expected = [(o, p) for o, p in zip(offsets, PAYLOADS) if o < newest_start + keep]
    assert read_all(log, 10_000) == expected


@pytest.mark.parametrize("damage", [torn_new_message, corrupt_payload])
def test_a_recovered_log_appends_after_the_cut(crashed, damage, make_manager, batch, read_all):
    paths, contents, offsets = crashed
    damaged, _ = damage(contents[-1])
    Path(paths[-1]).write_bytes(damaged)

    manager = make_manager(policy_for=lambda topic: LogPolicy(file_size=10**6, flush_interval_messages=1))
    log = manager.get_log("t", 0)
    end = log.end_offset
    assert log.append(batch([b"after recovery"])) == end
    kept = [(o, p) for o, p in zip(offsets, PAYLOADS) if o < end]
    assert read_all(log, 10_000) == kept + [(end, b"after recovery")]


@pytest.mark.parametrize("damage", [torn_new_message, garbage_length_past_the_end])
def test_reads_across_the_cut_are_still_cut_at_message_boundaries(crashed, damage, make_manager, batch):
    # The torn tail's end was a known boundary when the file was loaded; after the cut it must
    # not be mistaken for one inside the messages appended since.
    paths, contents, _ = crashed
    damaged, _ = damage(contents[-1])
    Path(paths[-1]).write_bytes(damaged)
    manager = make_manager(policy_for=lambda topic: LogPolicy(file_size=10**6, flush_interval_messages=1))
    log = manager.get_log("t", 0)
    for i in range(20):
        log.append(batch([f"new {i} ".encode() * 5]))
    for max_size in range(100, 300, 7):
        offset = log.segments[-1].start
        while (region := log.read(offset, max_size)) is not None:
            with region:
                data = region.read()
            assert valid_bytes(data) == len(data) > 0, (offset, max_size)
            offset += len(data)


def test_recovery_scans_only_the_newest_segment(crashed, make_manager):
    paths, contents, _ = crashed
    damaged, _ = corrupt_payload(contents[0])
    Path(paths[0]).write_bytes(damaged)
    manager = make_manager()
    assert manager.recovered_bytes == 0
    assert Path(paths[0]).read_bytes() == damaged


def test_an_undamaged_log_loses_nothing_in_recovery(crashed, make_manager):
    paths, contents, _ = crashed
    manager = make_manager()
    assert manager.recovered_bytes == 0
    assert [Path(path).read_bytes() for path in paths] == contents


def test_with_the_clean_shutdown_marker_recovery_is_skipped(crashed, make_manager, log_dir):
    paths, contents, _ = crashed
    damaged, _ = torn_new_message(contents[-1])
    Path(paths[-1]).write_bytes(damaged)
    marker = Path(log_dir) / CLEAN_SHUTDOWN_MARKER
    marker.touch()

    manager = make_manager()
    assert not marker.exists()  # a crash from now on must lead to recovery
    assert manager.recovered_bytes == 0
    assert Path(paths[-1]).read_bytes() == damaged
    log = manager.get_log("t", 0)
    assert log.end_offset == log.segments[-1].start + len(damaged)  # HW = file length


def test_close_writes_the_clean_shutdown_marker(make_manager, batch, log_dir):
    manager = make_manager()
    manager.get_or_create_log("t", 0).append(batch([b"ab"]))
    assert not os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER))
    manager.close()
    assert os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER))


def test_close_flushes_so_the_next_start_sees_every_message(make_manager, batch, read_all):
    manager = make_manager(policy_for=lambda topic: LogPolicy(flush_interval_messages=1000))
    manager.get_or_create_log("t", 0).append(batch([b"ab", b"cd"]))
    manager.close()
    assert read_all(make_manager().get_log("t", 0), 1000) == [(0, b"ab"), (12, b"cd")]


def test_recover_segment_leaves_an_empty_segment_alone(tmp_path):
    segment = Segment(str(tmp_path), 0, now=0.0)
    assert recover_segment(segment) == 0
    assert segment.size == 0
    segment.close()


def test_the_0_7_2_fixture_recovers_without_loss(make_manager, log_dir, read_all):
    assert hashlib.sha256(FIXTURE.read_bytes()).hexdigest() == FIXTURE_SHA256
    os.makedirs(os.path.join(log_dir, "MagicByte0-0"))
    shutil.copy(FIXTURE, os.path.join(log_dir, "MagicByte0-0"))

    manager = make_manager()  # no marker: an unclean start
    assert manager.recovered_bytes == 0
    log = manager.get_log("MagicByte0", 0)
    assert log.end_offset == 10900
    assert log.offsets_before(-1, 1) == [10900]
    assert log.offsets_before(-2, 1) == [0]
    messages = read_all(log, 1_000_000)
    assert [offset for offset, _ in messages] == list(range(0, 10900, 109))
    assert all(payload == b"x" * 100 for _, payload in messages)
    with log.read(0, 1_000_000) as region:
        data = region.read()
    assert all(message.magic == MAGIC_0 and message.is_valid() for _, _, message in iter_entries(data))
