"""Reading pages of messages forward and backward over an in-memory log that answers fetches
as a 0.7 broker does (from any byte offset, never across a segment boundary)."""

from __future__ import annotations

import struct

from twisted.internet.defer import ensureDeferred, succeed

from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.message import make_message
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, encode_message_set, encode_messages
from twisted_broker.codec.kafka07.requests import FetchRequest
from webui.message_browser import decode_entries, read_backward, read_forward


class SegmentedLog:
    """Segments of message-set bytes; fetch(offset, max) as spec 4.3."""

    def __init__(self, segments: list[bytes], base: int = 0) -> None:
        self.starts, self.segments = [], segments
        position = base
        for segment in segments:
            self.starts.append(position)
            position += len(segment)
        self.earliest, self.latest = base, position
        self.fetches: list[tuple[int, int]] = []

    def fetch(self, offset: int, max_size: int):
        self.fetches.append((offset, max_size))
        request = FetchRequest("t", 0, offset, max_size)
        if not self.earliest <= offset <= self.latest:
            return succeed(FetchedMessageSet(request, 1, b""))
        for start, segment in zip(self.starts, self.segments):
            if start <= offset < start + len(segment):
                position = offset - start
                return succeed(FetchedMessageSet(request, 0, segment[position:position + max_size]))
        return succeed(FetchedMessageSet(request, 0, b""))


def run(coroutine):
    d = ensureDeferred(coroutine)
    assert d.called, "the fake log answers synchronously"
    return d.result


def payloads(result) -> list[bytes]:
    return [m.payload for m in result.messages]


def numbered(count: int, start: int = 0) -> list[bytes]:
    return [b"message %04d" % i for i in range(start, start + count)]


def test_decode_entries_expands_compressed_wrappers_and_marks_bad_crcs():
    wrapper = encode_compressed_message_set([b"a", b"b", b"c"], GZIP)
    bad = make_message(b"payload")
    bad.crc ^= 1
    first = encode_message_set([b"x"])  # 4 + 6 + 1 = 11 bytes
    data = first + wrapper + encode_messages([bad])
    messages, consumed, problem = decode_entries(data, 100, 10)
    assert problem is None and consumed == len(data)
    assert [m.offset for m in messages] == [100, 111, 111 + len(wrapper)]
    assert messages[1].codec == "gzip" and [m.payload for m in messages[1].inner] == [b"a", b"b", b"c"]
    assert all(m.offset == 111 and m.next_offset == 111 + len(wrapper) for m in messages[1].inner)
    assert [m.valid for m in messages] == [True, True, False]


def test_decode_entries_reports_an_entry_that_cannot_be_framed():
    data = encode_message_set([b"ok"]) + struct.pack(">i", 2) + b"\x01\x00"
    messages, consumed, problem = decode_entries(data, 0, 10)
    assert [m.payload for m in messages] == [b"ok"]
    assert "offset 12" in problem


def test_read_forward_crosses_segments_and_stops_at_the_count():
    log = SegmentedLog([encode_message_set(numbered(10)), encode_message_set(numbered(10, 10))])
    result = run(read_forward(log.fetch, 0, 15))
    assert payloads(result) == numbered(15)
    assert result.end == log.starts[1] + len(encode_message_set(numbered(5)))


def test_read_forward_grows_the_fetch_for_a_large_message():
    big = b"x" * 300_000
    log = SegmentedLog([encode_message_set([b"small", big, b"after"])])
    result = run(read_forward(log.fetch, 0, 3))
    assert payloads(result) == [b"small", big, b"after"]
    assert result.problem is None


def test_read_forward_from_the_end_is_empty():
    log = SegmentedLog([encode_message_set(numbered(3))])
    result = run(read_forward(log.fetch, log.latest, 10))
    assert result.messages == [] and result.problem is None


def test_read_forward_from_a_misaligned_offset_says_so():
    log = SegmentedLog([encode_message_set(numbered(3))])
    result = run(read_forward(log.fetch, 5, 10))
    assert result.problem is not None


def test_read_backward_returns_the_newest_messages():
    log = SegmentedLog([encode_message_set(numbered(30)), encode_message_set(numbered(30, 30))], base=1000)
    result = run(read_backward(log.fetch, log.latest, 5, earliest=log.earliest))
    assert payloads(result) == numbered(5, 55)
    assert result.end == log.latest
    # Paging on: the five before them, across the segment boundary.
    older = run(read_backward(log.fetch, result.start, 30, earliest=log.earliest))
    assert payloads(older) == numbered(30, 25)


def test_read_backward_widens_its_window_until_it_has_enough():
    payload = b"y" * 20_000
    log = SegmentedLog([encode_message_set([payload] * 12)])
    result = run(read_backward(log.fetch, log.latest, 10, earliest=log.earliest))
    assert len(result.messages) == 10
    assert result.start == log.latest - 10 * len(encode_message_set([payload]))


def test_read_backward_stops_at_the_earliest_offset():
    log = SegmentedLog([encode_message_set(numbered(3))], base=500)
    result = run(read_backward(log.fetch, log.latest, 50, earliest=log.earliest))
    assert payloads(result) == numbered(3)
    assert result.start == 500


def test_read_backward_over_binary_payloads_that_look_like_entries():
    # Payloads full of small big-endian numbers and magic bytes: many positions frame as
    # entries, none chains to the end with valid CRCs but the real boundaries.
    tricky = [struct.pack(">iBBI", 6, 1, 0, 0) * 4 + bytes([i]) for i in range(40)]
    log = SegmentedLog([encode_message_set(tricky)])
    result = run(read_backward(log.fetch, log.latest, 10, earliest=log.earliest))
    assert payloads(result) == tricky[-10:]


def test_read_backward_past_a_corrupt_message_starts_after_it():
    good = encode_message_set(numbered(5))
    bad = make_message(b"corrupt")
    bad.crc ^= 1
    log = SegmentedLog([good + encode_messages([bad]) + encode_message_set(numbered(3, 5))])
    result = run(read_backward(log.fetch, log.latest, 20, earliest=log.earliest))
    assert payloads(result) == numbered(3, 5)
