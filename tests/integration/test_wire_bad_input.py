"""The broker's reaction to every bad-input row of spec 2.4, over real sockets.

Produce and Offsets cannot carry an error code, so 0.7 answers bad input by closing the
connection (``refused``), except for an oversize message, which it drops silently. After each
refusal a new connection must still be served. "Nothing appended" is checked by producing a
sentinel message afterwards and reading the whole partition back: a wrongly appended request
would sit before the sentinel.

All tests share one broker with small limits; each uses topics of its own.
"""

from __future__ import annotations

import os
import struct

import pytest

from tests.support.brokers import BrokerProcess
from tests.support.polling import fetch_all, wait_for_end
from tests.support.spec_encoding import (
    fetch, fetch_body, message, message_set, multiproduce, offsets, produce, produce_body, request, string16)
from twisted_broker.codec.kafka07.compression import GZIP, SNAPPY, compress

MAX_REQUEST_BYTES = 65536
MAX_MESSAGE_BYTES = 1000

GOOD = message_set(message(b"good"))
SENTINEL = message_set(message(b"sentinel"))
OVERSIZE = message_set(message(b"o" * (MAX_MESSAGE_BYTES + 1)))


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("bad-input"), properties={
        "max.socket.request.bytes": str(MAX_REQUEST_BYTES),
        "max.message.size": str(MAX_MESSAGE_BYTES)}).start()
    yield broker
    broker.kill()


@pytest.fixture
def client(shared_broker):
    with shared_broker.connect() as connection:
        yield connection


@pytest.fixture
def topic(request) -> str:
    """A topic name of this test's own."""
    return "t-" + "".join(c if c.isalnum() else "-" for c in request.node.name)[-100:]


def assert_refused(client) -> None:
    assert client.is_closed_by_peer(), "the broker did not close the connection"


def assert_still_serving(broker) -> None:
    """A new connection gets an answer: the broker survived the refused request."""
    with broker.connect() as fresh:
        assert fresh.request(offsets("still-serving", 0, -2, 1)) == struct.pack(">hiq", 0, 1, 0)


def assert_log_holds(broker, topic: str, expected: bytes, partition: int = 0) -> None:
    """The partition holds exactly ``expected``: produce a sentinel after it and read all back."""
    with broker.connect() as fresh:
        fresh.send(produce(topic, partition, SENTINEL))
        end = wait_for_end(fresh, topic, len(expected) + len(SENTINEL), partition)
        data = fetch_all(fresh, topic, partition)
    assert (end, data) == (len(expected) + len(SENTINEL), expected + SENTINEL)


def directories(root) -> set[str]:
    return {os.path.join(path, name) for path, names, _files in os.walk(root) for name in names}


# --- framing ------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [0, -1, -2147483648])
def test_frame_size_not_positive_closes_connection(shared_broker, client, size):
    client.send(struct.pack(">i", size) + b"\x00\x01")
    assert_refused(client)
    assert_still_serving(shared_broker)


def test_frame_size_over_max_socket_request_bytes_closes_connection(shared_broker, client):
    client.send(struct.pack(">i", MAX_REQUEST_BYTES + 1))  # refused before any body arrives
    assert_refused(client)
    assert_still_serving(shared_broker)


def test_request_of_exactly_max_socket_request_bytes_is_served(client, topic):
    set_bytes = MAX_REQUEST_BYTES - 2 - len(string16(topic)) - 8  # type, topic, partition, set size
    full = (set_bytes - 10) // (10 + MAX_MESSAGE_BYTES)  # entries with the largest allowed payload
    payload_bytes = [MAX_MESSAGE_BYTES] * full + [set_bytes - full * (10 + MAX_MESSAGE_BYTES) - 10]
    messages = message_set(*(message(bytes([65 + i % 26]) * n) for i, n in enumerate(payload_bytes)))
    frame = produce(topic, 0, messages)
    assert struct.unpack_from(">i", frame)[0] == MAX_REQUEST_BYTES
    client.send(frame)
    assert wait_for_end(client, topic, len(messages)) == len(messages)
    assert fetch_all(client, topic) == messages


@pytest.mark.parametrize("request_type", [5, 6, 99, -1, 0x7FFF])
def test_unknown_request_type_closes_connection(shared_broker, client, request_type):
    client.send(request(request_type, fetch_body("x")))
    assert_refused(client)
    assert_still_serving(shared_broker)


@pytest.mark.parametrize("frame", [
    request(1, fetch_body("x")[:-1]),                         # fetch without a whole max size
    request(1, b""),                                          # no body at all
    struct.pack(">i", 1) + b"\x00",                           # not even a request type
    request(4, string16("x") + b"\x00\x00"),                  # offsets cut in the partition
    request(1, struct.pack(">h", 50) + b"x"),                 # topic longer than the body
    request(1, struct.pack(">h", -1) + b"\x00" * 16),         # null topic (0.7's int16 -1)
    request(0, string16("x") + struct.pack(">ii", 0, 100) + b"\x00" * 20),  # set size past the end
    request(0, string16("x") + struct.pack(">ii", 0, -1)),    # negative set size
    request(2, struct.pack(">h", 2) + fetch_body("x")),       # multifetch missing its 2nd part
    request(3, struct.pack(">h", 2) + produce_body("x", 0, GOOD)),  # multiproduce likewise
    request(2, struct.pack(">h", -1)),                        # negative count
    request(1, struct.pack(">h", 2) + b"\xff\xfe" + b"\x00" * 16),  # topic bytes not UTF-8
], ids=["fetch-short", "fetch-empty", "no-type", "offsets-short", "topic-past-end", "null-topic",
        "produce-set-past-end", "produce-negative-set", "multifetch-short", "multiproduce-short",
        "negative-count", "topic-not-utf8"])
def test_truncated_or_malformed_body_closes_connection(shared_broker, client, frame):
    client.send(frame)
    assert_refused(client)
    assert_still_serving(shared_broker)


def test_trailing_garbage_after_fetch_body_closes_connection(shared_broker, client):
    client.send(request(1, fetch_body("x") + b"\x00"))
    assert_refused(client)
    assert_still_serving(shared_broker)


def test_trailing_garbage_after_produce_closes_connection_and_appends_nothing(shared_broker, client, topic):
    client.send(request(0, produce_body(topic, 0, GOOD) + b"junk"))
    assert_refused(client)
    assert_log_holds(shared_broker, topic, b"")


# --- produce: refused message sets --------------------------------------------------------

def _wrapper_with_inner_bad_crc() -> bytes:
    inner = message_set(message(b"ok"), message(b"bad", crc=0x12345678))
    return message_set(message(compress(GZIP, inner), codec=GZIP))


REFUSED_SETS = {
    "bad-crc": message_set(message(b"hello", crc=0)),
    "bad-crc-after-good": GOOD + message_set(message(b"hello", crc=0)),
    "bad-crc-magic-0": message_set(message(b"hello", magic=0, crc=1)),
    "codec-3": message_set(message(b"hello", codec=3)),
    "unknown-magic": struct.pack(">ib", 6, 2) + b"\x00" * 5,
    "length-below-minimum": GOOD + struct.pack(">i", 4) + b"\x00" * 4,
    "undecompressable-gzip": message_set(message(b"this is not gzip data", codec=GZIP)),
    "undecompressable-snappy": message_set(message(b"\x82SNAPPY\x00garbage!", codec=SNAPPY)),
    "truncated-gzip": message_set(message(compress(GZIP, GOOD * 20)[:-8], codec=GZIP)),
    "bad-crc-inside-gzip": _wrapper_with_inner_bad_crc(),
    "first-message-incomplete": GOOD[:-1],
    "first-length-only": struct.pack(">i", 20),
}


@pytest.mark.parametrize("messages", REFUSED_SETS.values(), ids=REFUSED_SETS.keys())
def test_produce_of_invalid_message_set_closes_connection_and_appends_nothing(
        shared_broker, client, topic, messages):
    client.send(produce(topic, 0, GOOD))  # the same connection, before: this one is kept
    client.send(produce(topic, 0, messages))
    client.send(produce(topic, 0, GOOD))  # after: never read
    assert_refused(client)
    assert_log_holds(shared_broker, topic, GOOD)
    assert_still_serving(shared_broker)


def test_oversize_message_is_dropped_silently_and_connection_serves_next_request(
        shared_broker, client, topic):
    client.send(produce(topic, 0, GOOD + OVERSIZE))  # the whole request is dropped
    client.send(produce(topic, 0, OVERSIZE))
    client.send(produce(topic, 0, GOOD))
    assert wait_for_end(client, topic, len(GOOD)) == len(GOOD)  # same connection, still open
    assert fetch_all(client, topic) == GOOD
    assert_log_holds(shared_broker, topic, GOOD)


def test_message_of_exactly_max_message_size_is_appended(client, topic):
    largest = message_set(message(b"m" * MAX_MESSAGE_BYTES))
    client.send(produce(topic, 0, largest))
    assert wait_for_end(client, topic, len(largest)) == len(largest)
    assert fetch_all(client, topic) == largest


def test_trailing_partial_message_is_dropped_and_complete_prefix_appended(shared_broker, client, topic):
    second = message_set(message(b"second"))
    client.send(produce(topic, 0, GOOD + second + message_set(message(b"partial"))[:-3]))
    assert wait_for_end(client, topic, len(GOOD + second)) == len(GOOD + second)
    assert fetch_all(client, topic) == GOOD + second  # connection still open
    assert_log_holds(shared_broker, topic, GOOD + second)


# --- multiproduce -------------------------------------------------------------------------

def test_multiproduce_skips_oversize_part_and_appends_the_others(shared_broker, client, topic):
    second = message_set(message(b"second"))
    client.send(multiproduce((topic, 0, GOOD), (topic, 0, OVERSIZE), (topic, 0, second)))
    assert wait_for_end(client, topic, len(GOOD + second)) == len(GOOD + second)
    assert fetch_all(client, topic) == GOOD + second  # connection still open
    assert_log_holds(shared_broker, topic, GOOD + second)


def test_multiproduce_failing_part_closes_connection_after_earlier_parts_appended(
        shared_broker, client, topic):
    later = message_set(message(b"later"))
    client.send(multiproduce((topic, 0, GOOD), (topic, 0, REFUSED_SETS["bad-crc"]), (topic, 0, later)))
    assert_refused(client)
    assert_log_holds(shared_broker, topic, GOOD)
    assert_still_serving(shared_broker)


def test_multiproduce_part_to_invalid_partition_closes_connection_after_earlier_parts(
        shared_broker, client, topic):
    client.send(multiproduce((topic, 0, GOOD), (topic, 7, GOOD), (topic, 0, GOOD)))
    assert_refused(client)
    assert_log_holds(shared_broker, topic, GOOD)
    assert not (shared_broker.log_dir / f"{topic}-7").exists()


# --- produce: invalid topic or partition --------------------------------------------------

@pytest.mark.parametrize("name", ["..", ".", "a/b", "", "../escape", "/abs", "x" * 256, "ctl\x07"])
def test_produce_to_invalid_topic_closes_connection_and_creates_no_directory(shared_broker, client, name):
    root = shared_broker.directory.parent  # this session's tmp tree, log.dir and what is around it
    before = directories(root)
    client.send(produce(name, 0, GOOD))
    assert_refused(client)
    assert_still_serving(shared_broker)
    assert directories(root) == before
    assert not os.path.exists("/abs-0")  # os.path.join(log.dir, "/abs-0") would leave the tree


@pytest.mark.parametrize("partition", [1, 2, -2, 2147483647])
def test_produce_to_invalid_partition_closes_connection_and_creates_no_log(
        shared_broker, client, topic, partition):
    client.send(produce(topic, partition, GOOD))
    assert_refused(client)
    assert_still_serving(shared_broker)
    assert not any(p.name.startswith(topic + "-") for p in shared_broker.log_dir.iterdir())


# --- offsets ------------------------------------------------------------------------------

@pytest.mark.parametrize("frame", [
    offsets("x", 1), offsets("x", -1), offsets("x", 0, -1, -1), offsets("..", 0), offsets("", 0),
    offsets("a/b", 0),
], ids=["partition-too-big", "partition-negative", "negative-max", "topic-dotdot", "topic-empty",
        "topic-slash"])
def test_offsets_with_invalid_request_closes_connection(shared_broker, client, frame):
    client.send(frame)
    assert_refused(client)
    assert_still_serving(shared_broker)


@pytest.mark.parametrize("bad_size", [0, MAX_REQUEST_BYTES + 1])
def test_requests_pipelined_before_a_bad_frame_size_are_served_then_connection_closes(
        shared_broker, client, topic, bad_size):
    client.send(fetch(topic) + produce(topic, 0, GOOD) + offsets(topic, 0, -2, 1)
                + struct.pack(">i", bad_size) + fetch(topic))  # one write: usually one read
    assert client.response() == b"\x00\x00"
    assert client.response() == struct.pack(">hiq", 0, 1, 0)
    assert_refused(client)
    assert_log_holds(shared_broker, topic, GOOD)


def test_connection_serves_requests_queued_before_a_refused_one(client, topic):
    client.send(fetch(topic) + offsets(topic, 0, -2, 1) + request(9, b""))
    assert client.response() == b"\x00\x00"
    assert client.response() == struct.pack(">hiq", 0, 1, 0)
    assert_refused(client)
