"""Modern fetches, offsets for a time, recovery and CRC fencing over logs holding both kinds of entry."""

import os
import struct

import pytest

from twisted_broker.errors import InvalidMessage
from twisted_broker.codec.kafka.legacy_sets import decode_legacy_set
from twisted_broker.storage.log import Log, LogPolicy
from twisted_broker.storage.log_directory import open_log_directory
from twisted_broker.storage.record_offsets import (
    append_batch, locate, modern_end, offset_for_time, read_modern, record_for_time,
)
from twisted_broker.storage.recovery import recover_segment
from twisted_broker.storage.segment import FileRegion
from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.message_set import (
    ValidatedMessageSet, encode_compressed_message_set, encode_message_set,
)


def append_0_7(log, data: bytes, count: int) -> int:
    return log.append(ValidatedMessageSet(memoryview(data), count))


def legacy_offsets(data: bytes) -> list[int]:
    """The offsets of a magic-1 message set's entries."""
    offsets, position = [], 0
    while position < len(data):
        offset, size = struct.unpack_from(">qi", data, position)
        offsets.append(offset)
        position += 12 + size
    return offsets


def sent(pieces) -> bytes:
    return b"".join(piece.read() if isinstance(piece, FileRegion) else piece for piece in pieces)


def close_all(pieces) -> None:
    for piece in pieces:
        if isinstance(piece, FileRegion):
            piece.close()


def test_a_fetch_sends_stored_batches_as_file_regions_and_0_7_entries_as_magic_1_sets(make_log, make_batch):
    log = make_log()
    first_07 = append_0_7(log, encode_message_set([b"a", b"bb"]), 2)
    batch = make_batch([b"x" * 100_000, b"y"])  # two pieces: more than 65531 bytes
    base = append_batch(log, batch, [b"x" * 100_000, b"y"], 5)
    wrapped = append_0_7(log, encode_compressed_message_set([b"c", b"d"], GZIP), 2)
    log.flush()
    pieces = read_modern(log, first_07, 1 << 20)
    assert [type(p) for p in pieces] == [bytes, FileRegion, FileRegion, bytes]
    assert sent(pieces[1:3]) == bytes(batch)  # the batch as stamped, never read by the broker
    assert [r.value for r in decode_legacy_set(pieces[0])] == [b"a", b"bb"]
    assert legacy_offsets(pieces[0]) == [first_07, first_07 + 11]
    assert [r.value for r in decode_legacy_set(pieces[3])] == [b"c", b"d"]
    assert legacy_offsets(pieces[3]) == [wrapped, wrapped + 1]  # a wrapper's records, one offset each
    assert all(r.key is None and r.timestamp == 1_000_000_000 for r in decode_legacy_set(pieces[0]))
    close_all(pieces)
    # From inside the wrapper: only its records at and after the offset asked for.
    tail = read_modern(log, wrapped + 1, 1 << 20)
    assert legacy_offsets(tail[0]) == [wrapped + 1]
    assert read_modern(log, modern_end(log), 1 << 20) == []
    assert base == first_07 + 11 + 12


def test_a_fetch_sends_at_least_one_whole_batch_then_keeps_to_max_bytes(make_log, make_batch):
    log = make_log()
    batches = [make_batch([b"%d" % i * 2000] * 10) for i in range(4)]
    bases = [append_batch(log, batch, [b"v"] * 10, 0) for batch in batches]
    log.flush()
    one = read_modern(log, bases[0], 100)  # smaller than the batch: still the whole batch (KIP-74)
    assert sent(one) == bytes(batches[0])
    two = read_modern(log, bases[1] + 3, 2 * len(batches[0]) + 10)
    assert sent(two) == bytes(batches[1]) + bytes(batches[2])
    close_all(one + two)
    plain = [b"p" * 1000] * 50
    start = append_0_7(log, encode_message_set(plain), 50)
    log.flush()
    small = read_modern(log, start, 5000)
    assert 1 <= len(decode_legacy_set(small[0])) <= 5 and len(small[0]) <= 5000
    assert len(decode_legacy_set(read_modern(log, start, 10)[0])) == 1


def test_unflushed_and_uncommitted_entries_are_not_fetched(make_log, make_batch):
    log = make_log(flush_interval_messages=10_000)
    base = append_batch(log, make_batch([b"v"]), [b"v"], 0)
    assert read_modern(log, base, 1 << 20) == []
    log.flush()
    pieces = read_modern(log, base, 1 << 20)
    assert len(pieces) == 1
    close_all(pieces)


def test_offsets_for_a_time_find_the_first_record_at_or_after_it(make_log, make_batch, clock):
    log = make_log()
    now_ms = int(clock() * 1000)
    early = append_0_7(log, encode_message_set([b"early"]), 1)  # appended now: its time is now
    bases = []
    for hour in range(3):
        times = [now_ms + 1_000_000 * (hour + 1) + i * 10 for i in range(5)]
        values = [b"%d" % hour * 1500] * 5  # rows between the batches
        bases.append(append_batch(log, make_batch(values, timestamps=times), values, 0))
    log.flush()
    assert offset_for_time(log, 0) == early
    assert offset_for_time(log, now_ms + 1) == bases[0]
    assert offset_for_time(log, now_ms + 2_000_000) == bases[1]
    assert offset_for_time(log, now_ms + 2_000_015) == bases[1] + 2
    assert record_for_time(log, now_ms + 2_000_015) == (bases[1] + 2, now_ms + 2_000_020)
    assert offset_for_time(log, now_ms + 2_000_015, lambda batch: [0] * 5) == bases[1]  # no record late enough
    assert offset_for_time(log, now_ms + 3_000_041) is None
    clock.advance(4000)  # past the batches' times: a 0.7 message appended now is found
    later = append_0_7(log, encode_message_set([b"late"]), 1)
    log.flush()
    assert offset_for_time(log, now_ms + 3_000_041) == later


def test_recovery_cuts_a_torn_stored_batch_and_the_index_follows(make_log, make_batch, tmp_path, clock):
    log = make_log()
    kept = append_batch(log, make_batch([b"k"] * 3), [b"k"] * 3, 0)
    append_0_7(log, encode_message_set([b"m" * 5000]), 1)
    torn = append_batch(log, make_batch([b"t" * 70_000]), [b"t" * 70_000], 0)
    log.flush()
    assert modern_end(log) == torn + 1
    path = log.segments[0].path
    for segment in log.segments:
        segment.close()
    with open(path, "r+b") as file:
        file.truncate(torn + 40_000)  # a crash in the middle of the batch's first piece
    segments = open_log_directory(os.path.dirname(path), clock())
    assert recover_segment(segments[0]) == 40_000
    recovered = Log(os.path.dirname(path), "t", 0, segments, policy=LogPolicy(), now=clock)
    assert modern_end(recovered) == torn - 5010 + 1
    again = append_batch(recovered, make_batch([b"n"] * 2), [b"n"] * 2, 1)
    recovered.flush()
    assert again == torn and modern_end(recovered) == torn + 2
    assert locate(recovered, kept + 2)[1].first == kept
    for segment in recovered.segments:
        segment.close()


def test_a_stored_batch_damaged_on_disk_is_fenced_not_sent(make_log, make_batch, clock):
    log = make_log()
    good = append_batch(log, make_batch([b"g"] * 2), [b"g"] * 2, 0)
    bad = append_batch(log, make_batch([b"b" * 500]), [b"b" * 500], 0)
    log.flush()
    path = log.segments[0].path
    for segment in log.segments:
        segment.close()
    with open(path, "r+b") as file:
        file.seek(bad + 200)
        file.write(b"\xff")  # a flipped byte inside the batch: the 0.7 CRC no longer matches
    reopened = Log(os.path.dirname(path), "t", 0, open_log_directory(os.path.dirname(path), clock()),
                   policy=LogPolicy(), now=clock)
    pieces = read_modern(reopened, good, 1 << 20)
    assert len(pieces) == 1  # the good batch, then the read stops before the damaged one
    close_all(pieces)
    with pytest.raises(InvalidMessage):
        read_modern(reopened, bad, 1 << 20)
    for segment in reopened.segments:
        segment.close()
