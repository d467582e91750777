"""produce_run and run_message_set: which pipelined Produce requests may be appended as one
message set, and the set they make (codec/kafka07/produce_run.py)."""

from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twisted_broker.codec.kafka07.compression import GZIP
from twisted_broker.codec.kafka07.message import MAGIC_0
from twisted_broker.codec.kafka07.message_set import (
    encode_compressed_message_set, encode_message_set, validate_message_set,
)
from twisted_broker.codec.kafka07.produce_run import MAX_RUN_BYTES, produce_run, run_message_set, unflushed_after
from twisted_broker.codec.kafka07.requests import (
    FetchRequest, OffsetRequest, ProduceRequest, decode_request, encode_request,
)
from twisted_broker.network.framing import FrameTooLarge


def frame(request) -> bytes:
    """The frame body the connection queues: the request without its size."""
    return encode_request(request)[4:]


def produce(topic: str = "a", partition: int = 0, *payloads: bytes) -> bytes:
    return frame(ProduceRequest(topic, partition, encode_message_set(payloads or [b"m"])))


def to_partition(topic: bytes, partition: int) -> tuple[bytes, int]:
    """A target that takes every partition: the run carries (topic as sent, partition)."""
    return topic, partition


def run_of(frames, limit: int = 100, max_message_size: int | None = None):
    return produce_run(frames, limit, max_message_size, to_partition)


def sets_of(run) -> list[bytes]:
    return [bytes(s) for s in run[1]]


class Counted:
    """Frames that count how many were read."""

    def __init__(self, frames) -> None:
        self.frames, self.read = list(frames), 0

    def __iter__(self):
        for frame in self.frames:
            self.read += 1
            yield frame


def test_leading_produces_to_one_partition_make_a_run_of_their_message_sets():
    frames = deque([produce("a", 0, b"x"), produce("a", 0, b"y", b"z"), produce("a", 0, b"w")])
    run = run_of(frames)
    assert run[0] == (b"a", 0)
    assert sets_of(run) == [bytes(decode_request(f).messages) for f in frames]
    assert run[2] == [1, 2, 1]


@pytest.mark.parametrize("breaker", [
    produce("a", 1), produce("b", 0), frame(FetchRequest("a", 0, 0, 100)), frame(OffsetRequest("a", 0, -1, 1)),
    produce("a", 0) + b"\x00",  # trailing bytes: the usual path refuses it
    produce("a", 0)[:-1],  # a message set shorter than its size field
    FrameTooLarge(1 << 30, 1 << 20, []),  # queued after the frames before a bad size
], ids=["other-partition", "other-topic", "fetch", "offsets", "trailing-bytes", "short-set", "frame-too-large"])
def test_a_run_ends_before_the_first_frame_that_is_not_a_produce_to_its_partition(breaker):
    run = run_of([produce(), produce(), breaker, produce()])
    assert len(run[1]) == 2


@pytest.mark.parametrize("first", [
    frame(FetchRequest("a", 0, 0, 100)), b"\x00", b"", produce("a", 0)[:9],
    b"\x00\x00\x80\x04" + produce("a", 0)[4:],  # a negative topic length (found by the fuzz test)
], ids=["fetch", "one-byte", "empty", "no-partition-field", "negative-topic-length"])
def test_no_run_when_the_first_frame_is_not_a_whole_produce(first):
    assert run_of([first, produce()]) is None


def test_a_run_takes_at_most_limit_frames():
    assert len(run_of([produce()] * 10, 4)[1]) == 4
    assert run_of([produce()], 0) is None


def test_a_run_holds_at_most_max_run_bytes_of_sets_after_its_first():
    big = produce("a", 0, b"x" * (MAX_RUN_BYTES // 2))
    assert len(run_of([big, big, big])[1]) == 1  # 2 x (half + headers) > the bound
    huge = produce("a", 0, b"x" * (MAX_RUN_BYTES + 1))
    assert len(run_of([huge, produce()])[1]) == 1  # a first set over the bound still goes


def test_memoryview_frames_are_read_as_bytes_are():
    frames = [memoryview(produce("a", 3, b"x")), produce("a", 3, b"y")]
    run = run_of(frames)
    assert run[0] == (b"a", 3) and len(run[1]) == 2


# -- what the run's sets must be, and what a request it cannot serve costs --------------

def with_set(message_set: bytes, partition: int = 0) -> bytes:
    return frame(ProduceRequest("a", partition, message_set))


@given(st.lists(st.lists(st.binary(max_size=40), max_size=4), min_size=1, max_size=6))
def test_a_plain_run_makes_the_set_its_sets_joined_validate_to(payload_lists):
    sets = [encode_message_set(payloads) for payloads in payload_lists]
    _, run_sets, counts = run_of([memoryview(with_set(s)) for s in sets], max_message_size=100)
    joined = run_message_set(run_sets, counts)
    expected = validate_message_set(b"".join(sets), max_message_size=100)
    assert counts == [len(payloads) for payloads in payload_lists]
    assert bytes(joined.buffer) == bytes(expected.buffer)
    assert joined.message_count == expected.message_count == sum(map(len, payload_lists))


ODD_SETS = [
    encode_message_set([b"x"])[:-1],  # a partial entry: 0.7 drops it silently, alone
    encode_message_set([b"x"]) + b"\x00\x00\x00",  # a partial tail after a whole entry
    encode_compressed_message_set([b"x"], GZIP),  # a wrapper: its inner messages are checked
    encode_message_set([b"x"], magic=MAGIC_0),  # magic 0
    encode_message_set([b"y" * 11]),  # over max_message_size: dropped silently, alone
    encode_message_set([b"x"])[:-1] + b"z",  # CRC wrong
]
ODD_IDS = ["partial", "partial-tail", "gzip", "magic-0", "oversize", "bad-crc"]


@pytest.mark.parametrize("odd", ODD_SETS, ids=ODD_IDS)
def test_a_run_ends_before_a_set_that_needs_the_full_check(odd):
    good = with_set(encode_message_set([b"ok"]))
    run = run_of([good, good, with_set(odd), good], max_message_size=10)
    assert sets_of(run) == [encode_message_set([b"ok"])] * 2 and run[2] == [1, 1]


@pytest.mark.parametrize("odd", ODD_SETS, ids=ODD_IDS)
def test_a_first_set_that_needs_the_full_check_is_no_run_and_no_other_frame_is_read(odd):
    frames = Counted([with_set(odd)] + [with_set(encode_message_set([b"ok"]))] * 50)
    assert run_of(frames, max_message_size=10) is None
    assert frames.read == 1  # a compressed producer's backlog costs one look per request


def test_a_partial_tail_is_not_read_as_the_start_of_the_next_set():
    whole = encode_message_set([b"abc"])
    # The first set's tail is the next set's first 9 bytes: joined, they would walk as one entry.
    assert run_of([with_set(whole + whole[:9]), with_set(whole[9:])]) is None


def test_the_target_is_asked_once_about_the_first_frame_and_a_refusal_reads_no_other():
    asked = []

    def refuse(topic, partition):
        asked.append((topic, partition))
        return None

    frames = Counted([produce("a", 2)] * 50)
    assert produce_run(frames, 100, None, refuse) is None
    assert asked == [(b"a", 2)] and frames.read == 1
    asked.clear()
    run = produce_run([produce("a", 2)] * 5, 100, None, lambda topic, partition: asked.append(topic) or "the log")
    assert run[0] == "the log" and len(run[1]) == 5 and asked == [b"a"]


@given(st.lists(st.one_of(st.binary(max_size=30), st.binary(max_size=30).map(lambda tail: b"\x00\x00" + tail)),
                max_size=5), st.integers(0, 6))
def test_any_frames_make_a_run_or_none_without_raising(frames, limit):
    run = run_of(frames, limit)
    if run is not None:  # every frame in the run decodes as the Produce it was read as
        (topic, partition), sets, _ = run
        for body, message_set in zip(frames, sets):
            try:
                request = decode_request(body)
            except UnicodeDecodeError:  # the connection's absorb sends such a run the usual way
                with pytest.raises(UnicodeDecodeError):
                    topic.decode()
                continue
            assert (request.topic.encode(), request.partition, bytes(request.messages)) == \
                (topic, partition, bytes(message_set))


@pytest.mark.parametrize("unflushed, counts, interval, expected", [
    (0, [1, 2, 1, 3, 1], 5, 1),  # 1, 3, 4, 7 (a flush: 0), 1
    (3, [1, 1], 5, 0),  # reaches 5 exactly at the last set: a flush, nothing left
    (0, [2, 2, 2, 2], 5, 2),  # 2, 4, 6 -> 0, 2
    (0, [1] * 7, 1, 0),  # every message flushes
    (4, [], 5, 4),
])
def test_the_flush_count_after_a_run_is_what_appending_each_set_in_turn_leaves(unflushed, counts, interval, expected):
    assert unflushed_after(unflushed, counts, interval) == expected
