"""KafkaServerProtocol on a StringTransport, over a real Broker and LogManager in tmp_path.

Flushes are inline (InlineFlusher, flush after every message), so a produce is visible at
once. StringTransport is not a TCP connection, so fetch responses stream through the
ChunkedFileProducer; StringTransport never calls ``resumeProducing`` by itself, so the tests
drive ``transport.producer`` by hand (``drain``).

Over 400 lines: it is the one place where every 0.7 request type meets the protocol's
framing, pacing and streaming on the same fixtures; split by request type, each part would
repeat the drain and framing helpers that are most of its length.
"""

from __future__ import annotations

import os
import struct
import zlib

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from twisted_broker.network.kafka07 import KafkaServerProtocol
from twisted_broker.network.file_streaming import CHUNK_BYTES, ChunkedFileProducer
from twisted_broker.handlers.kafka07.broker import Broker
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.storage.flusher import InlineFlusher
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_manager import LogManager

MAX_REQUEST_BYTES = 4 * 1024 * 1024

FETCH_A_0 = (b"\x00\x00\x00\x15"                   # size: 21 bytes follow
             b"\x00\x01"                           # request type: fetch
             b"\x00\x01" b"a"                      # topic: "a"
             b"\x00\x00\x00\x00"                   # partition: 0
             b"\x00\x00\x00\x00\x00\x00\x00\x00"   # offset: 0
             b"\x00\x00\x10\x00")                  # max size: 4096

HELLO_SET = (b"\x00\x00\x00\x0b"                   # entry length: 11
             b"\x01"                               # magic: 1
             b"\x00"                               # attributes: no compression
             b"\x36\x10\xa6\x86"                   # crc32("hello")
             b"hello")                             # payload

PRODUCE_A_0_HELLO = (b"\x00\x00\x00\x1c"           # size: 28 bytes follow
                     b"\x00\x00"                   # request type: produce
                     b"\x00\x01" b"a"              # topic: "a"
                     b"\x00\x00\x00\x00"           # partition: 0
                     b"\x00\x00\x00\x0f"           # message set size: 15
                     + HELLO_SET)

OFFSETS_A_0_LATEST = (b"\x00\x00\x00\x15"          # size: 21 bytes follow
                      b"\x00\x04"                  # request type: offsets
                      b"\x00\x01" b"a"             # topic: "a"
                      b"\x00\x00\x00\x00"          # partition: 0
                      b"\xff\xff\xff\xff\xff\xff\xff\xff"  # time: -1, latest
                      b"\x00\x00\x00\x01")         # max number of offsets: 1

EMPTY_FETCH_RESPONSE = b"\x00\x00\x00\x02" b"\x00\x00"  # size 2, no error, no messages
HELLO_FETCH_RESPONSE = b"\x00\x00\x00\x11" b"\x00\x00" + HELLO_SET  # size 17, no error, the set


# --- helpers ------------------------------------------------------------------------------

def message_set(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">iBBI", 6 + len(p), 1, 0, zlib.crc32(p) & 0xFFFFFFFF) + p
                    for p in payloads)


def request(request_type: int, body: bytes) -> bytes:
    return struct.pack(">ih", 2 + len(body), request_type) + body


def string16(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode("ascii")


def produce(topic: str, partition: int, messages: bytes) -> bytes:
    return request(0, string16(topic) + struct.pack(">ii", partition, len(messages)) + messages)


def fetch(topic: str, partition: int = 0, offset: int = 0, max_size: int = 64 << 20) -> bytes:
    return request(1, string16(topic) + struct.pack(">iqi", partition, offset, max_size))


def offsets(topic: str, partition: int = 0, time_ms: int = -1, max_offsets: int = 1) -> bytes:
    return request(4, string16(topic) + struct.pack(">iqi", partition, time_ms, max_offsets))


def fetch_response(messages: bytes) -> bytes:
    return struct.pack(">ih", 2 + len(messages), 0) + messages


def drain(transport: StringTransport, max_steps: int = 1000) -> int:
    """Call the registered producer until none is left; return the number of calls."""
    steps = 0
    while transport.producer is not None:
        assert steps < max_steps, "the producer never unregistered"
        transport.producer.resumeProducing()
        steps += 1
    return steps


def visible_end(logs: LogManager, topic: str, partition: int = 0) -> int:
    """The end offset an Offsets(-1) request would answer (publishes finished flushes)."""
    return logs.get_log(topic, partition).offsets_before(-1, 1)[0]


def written_bytes(logs: LogManager, topic: str, partition: int = 0) -> int:
    """Bytes appended to the partition so far, flushed or not."""
    return sum(segment.size for segment in logs.get_log(topic, partition).segments)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class FakeClock:
    def __init__(self, time: float = 1_000_000.0) -> None:
        self.time = time

    def __call__(self) -> float:
        return self.time


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def logs(tmp_path, clock):
    manager = LogManager(str(tmp_path / "logs"), now=clock, partitions_for=lambda topic: 2,
                         policy_for=lambda topic: LogPolicy(flush_interval_messages=1, file_size=3 << 20,
                                                            retention_ms=3600 * 1000),
                         flusher=InlineFlusher())
    manager.open()
    yield manager
    manager.close()


@pytest.fixture
def empty_broker(logs, clock) -> Broker:
    return Broker(logs, BrokerStats(RequestStats(600, clock)), max_message_size=2 << 20)


@pytest.fixture
def connect(empty_broker):
    def connect() -> tuple[StringTransport, KafkaServerProtocol]:
        transport = StringTransport()
        protocol = KafkaServerProtocol(empty_broker, max_request_size=MAX_REQUEST_BYTES)
        protocol.makeConnection(transport)
        return transport, protocol
    return connect


# --- one request at a time ----------------------------------------------------------------

def test_fetch_split_across_reads_is_answered_once(empty_broker):
    transport, proto = StringTransport(), KafkaServerProtocol(empty_broker, max_request_size=1024)
    proto.makeConnection(transport)
    for i in range(len(FETCH_A_0)):
        assert transport.value() == b""  # nothing before the last byte
        proto.dataReceived(FETCH_A_0[i:i + 1])
    assert transport.value() == EMPTY_FETCH_RESPONSE
    assert not transport.disconnecting


def test_produce_split_across_reads_is_appended_once(connect, logs):
    transport, proto = connect()
    for i in range(len(PRODUCE_A_0_HELLO)):
        proto.dataReceived(PRODUCE_A_0_HELLO[i:i + 1])
    assert transport.value() == b""  # produce has no response
    assert written_bytes(logs, "a") == visible_end(logs, "a") == len(HELLO_SET)


def test_fetch_response_streams_region_through_chunked_producer(connect):
    transport, proto = connect()
    proto.dataReceived(PRODUCE_A_0_HELLO + FETCH_A_0)
    assert transport.value() == HELLO_FETCH_RESPONSE[:6]  # the header; the set streams
    assert isinstance(transport.producer, ChunkedFileProducer)
    assert transport.streaming is False  # a pull producer
    assert drain(transport) == 1
    assert transport.value() == HELLO_FETCH_RESPONSE
    assert not transport.disconnecting


def test_offsets_answer_is_written_at_once(connect):
    transport, proto = connect()
    proto.dataReceived(PRODUCE_A_0_HELLO + OFFSETS_A_0_LATEST)
    assert transport.value() == (b"\x00\x00\x00\x0e" b"\x00\x00"    # size 14, no error
                                 b"\x00\x00\x00\x01"                # one offset
                                 b"\x00\x00\x00\x00\x00\x00\x00\x0f")  # 15
    assert transport.producer is None


def test_large_region_is_written_one_bounded_chunk_per_call(connect):
    transport, proto = connect()
    messages = message_set(*(bytes([i]) * 700_000 for i in range(4)))  # 2.8 MB, one segment
    proto.dataReceived(produce("big", 0, messages) + fetch("big"))
    sizes = [len(transport.value())]
    while transport.producer is not None:
        transport.producer.resumeProducing()
        sizes.append(len(transport.value()))
    chunks = [after - before for before, after in zip(sizes, sizes[1:])]
    assert chunks == [CHUNK_BYTES, CHUNK_BYTES, len(messages) - 2 * CHUNK_BYTES]
    assert transport.value() == fetch_response(messages)


# --- queueing while a response streams ----------------------------------------------------

def test_transport_pauses_when_a_request_arrives_mid_stream_and_resumes_after(connect):
    transport, proto = connect()
    proto.dataReceived(PRODUCE_A_0_HELLO)
    proto.dataReceived(FETCH_A_0)
    assert transport.producerState == "producing"  # a client that waits costs no pause/resume
    proto.dataReceived(OFFSETS_A_0_LATEST)  # a pipelining client: stop reading from it
    assert transport.producerState == "paused"
    drain(transport)
    assert transport.producerState == "producing"


def test_frames_arriving_while_streaming_are_answered_in_order_after_it(connect, logs):
    transport, proto = connect()
    proto.dataReceived(PRODUCE_A_0_HELLO)
    proto.dataReceived(FETCH_A_0)
    streaming = transport.value()
    second = message_set(b"second")
    # Arrives mid-stream (a real transport would not read it; a pipelining client sends it anyway).
    proto.dataReceived(OFFSETS_A_0_LATEST + produce("a", 0, second) + FETCH_A_0 + OFFSETS_A_0_LATEST)
    assert transport.value() == streaming  # nothing answered out of order
    assert written_bytes(logs, "a") == len(HELLO_SET)  # the produce waits its turn too
    drain(transport)
    assert transport.value() == (
        HELLO_FETCH_RESPONSE
        + struct.pack(">ihiq", 14, 0, 1, len(HELLO_SET))  # offsets, before the produce
        + fetch_response(HELLO_SET + second)  # the fetch sees the produce queued before it
        + struct.pack(">ihiq", 14, 0, 1, len(HELLO_SET + second)))
    assert transport.producerState == "producing"


def test_requests_read_together_are_streamed_one_after_the_other(connect):
    transport, proto = connect()
    proto.dataReceived(PRODUCE_A_0_HELLO)
    proto.dataReceived(FETCH_A_0 + FETCH_A_0)
    first = transport.producer
    first.resumeProducing()
    assert transport.value() == HELLO_FETCH_RESPONSE + HELLO_FETCH_RESPONSE[:6]
    assert transport.producer is not None and transport.producer is not first
    drain(transport)
    assert transport.value() == HELLO_FETCH_RESPONSE * 2
    assert transport.producerState == "producing"


def test_multifetch_streams_each_region_between_its_headers(connect):
    transport, proto = connect()
    other = message_set(b"other partition")
    proto.dataReceived(PRODUCE_A_0_HELLO + produce("a", 1, other))
    parts = (("a", 0, 0, 4096), ("a", 1, 0, 4096), ("a", 0, 15, 4096))
    body = struct.pack(">h", len(parts)) + b"".join(
        string16(t) + struct.pack(">iqi", p, o, m) for t, p, o, m in parts)
    proto.dataReceived(request(2, body))
    drain(transport)
    inner = fetch_response(HELLO_SET) + fetch_response(other) + fetch_response(b"")
    assert transport.value() == struct.pack(">ih", 2 + len(inner), 0) + inner


def test_connection_lost_while_streaming_releases_region_and_answers_nothing_more(connect):
    transport, proto = connect()
    proto.dataReceived(PRODUCE_A_0_HELLO)
    before = open_fds()
    proto.dataReceived(FETCH_A_0)
    assert open_fds() == before + 1  # the region's own descriptor
    proto.dataReceived(FETCH_A_0)  # queued
    producer = transport.producer
    proto.connectionLost(None)  # what the reactor does: the protocol, then the producer
    producer.stopProducing()
    assert open_fds() == before
    assert transport.value() == HELLO_FETCH_RESPONSE[:6]


# --- retention while streaming ------------------------------------------------------------

def test_segment_deleted_by_retention_mid_stream_is_still_sent_complete(connect, logs, clock, tmp_path):
    transport, proto = connect()
    batches = [message_set(*(bytes([b * 4 + i]) * 500_000 for i in range(4))) for b in range(3)]
    for messages in batches:  # 2 MB per batch; segments roll past 3 MB
        proto.dataReceived(produce("r", 0, messages))
    log = logs.get_log("r", 0)
    oldest = log.segments[0]
    assert len(log.segments) >= 2 and oldest.start == 0
    oldest_bytes = open(oldest.path, "rb").read()
    assert oldest_bytes == b"".join(batches)[:len(oldest_bytes)]

    proto.dataReceived(fetch("r"))
    transport.producer.resumeProducing()  # one chunk out, the rest still to stream
    assert len(transport.value()) == 6 + CHUNK_BYTES < 6 + len(oldest_bytes)
    clock.time += 2 * 3600  # every segment is now past log.retention.hours
    assert logs.cleanup() >= 1
    assert not os.path.exists(oldest.path)
    assert log.first_offset > 0
    drain(transport)
    assert transport.value() == fetch_response(oldest_bytes)
    assert not transport.disconnecting


# --- refusals -----------------------------------------------------------------------------

BAD_FRAMES = {
    "size-zero": b"\x00\x00\x00\x00",
    "size-negative": b"\xff\xff\xff\xff",
    "size-over-limit": struct.pack(">i", MAX_REQUEST_BYTES + 1),
    "unknown-type": request(9, b""),
    "truncated-fetch": request(1, FETCH_A_0[6:-1]),
    "trailing-bytes": request(1, FETCH_A_0[6:] + b"\x00"),
    "produce-bad-crc": produce("a", 0, HELLO_SET[:-1] + b"H"),
    "produce-first-message-incomplete": produce("a", 0, HELLO_SET[:-1]),
    "produce-invalid-topic": produce("..", 0, HELLO_SET),
    "produce-wrong-partition": produce("a", 2, HELLO_SET),
    "offsets-wrong-partition": offsets("a", 2),
    "offsets-negative-max": offsets("a", 0, -1, -1),
}


@pytest.mark.parametrize("frame", BAD_FRAMES.values(), ids=BAD_FRAMES.keys())
def test_bad_frame_closes_connection_without_answer(connect, logs, frame):
    transport, proto = connect()
    proto.dataReceived(frame)
    assert transport.disconnecting
    assert transport.value() == b""
    log = logs.get_log("a", 0)  # a produce to a valid partition creates the log, as 0.7
    assert log is None or log.segments[-1].size == 0  # but appends nothing


def test_frames_after_a_bad_one_are_not_answered(connect):
    transport, proto = connect()
    proto.dataReceived(FETCH_A_0 + request(9, b"") + FETCH_A_0)
    assert transport.value() == EMPTY_FETCH_RESPONSE  # only the one before it
    assert transport.disconnecting
    proto.dataReceived(FETCH_A_0)
    assert transport.value() == EMPTY_FETCH_RESPONSE


@pytest.mark.parametrize("bad_size", [0, -1, MAX_REQUEST_BYTES + 1])
@pytest.mark.parametrize("same_read", [True, False], ids=["same-read", "separate-reads"])
def test_requests_before_a_bad_frame_size_are_served_then_connection_closes(
        connect, logs, bad_size, same_read):
    transport, proto = connect()
    pieces = [PRODUCE_A_0_HELLO + OFFSETS_A_0_LATEST, struct.pack(">i", bad_size) + FETCH_A_0]
    for data in [b"".join(pieces)] if same_read else pieces:
        proto.dataReceived(data)
    assert transport.value() == struct.pack(">ihiq", 14, 0, 1, len(HELLO_SET))  # then nothing
    assert transport.disconnecting
    assert written_bytes(logs, "a") == len(HELLO_SET)


def test_oversize_message_is_dropped_and_connection_stays_open(connect, logs):
    transport, proto = connect()
    proto.dataReceived(produce("a", 0, message_set(b"x" * ((2 << 20) + 1))) + FETCH_A_0)
    assert not transport.disconnecting
    assert transport.value() == EMPTY_FETCH_RESPONSE
    assert written_bytes(logs, "a") == 0


# --- fetch.wait.max.ms: caught-up fetches held until a flush ------------------------------

WAIT_S = 0.5


@pytest.fixture
def connect_waiting(empty_broker):
    """Connections that hold caught-up fetches up to WAIT_S, on a fake reactor clock."""
    reactor_clock = Clock()

    def connect() -> tuple[StringTransport, KafkaServerProtocol]:
        transport = StringTransport()
        protocol = KafkaServerProtocol(empty_broker, max_request_size=MAX_REQUEST_BYTES, clock=reactor_clock,
                                       fetch_wait_max_ms=int(WAIT_S * 1000))
        protocol.makeConnection(transport)
        return transport, protocol
    connect.clock = reactor_clock
    return connect


def multifetch(*parts: tuple[str, int, int, int]) -> bytes:
    return request(2, struct.pack(">h", len(parts)) + b"".join(
        string16(t) + struct.pack(">iqi", p, o, m) for t, p, o, m in parts))


def test_caught_up_fetch_is_answered_when_a_flush_publishes_new_data(connect_waiting, logs):
    _, writer = connect_waiting()
    writer.dataReceived(PRODUCE_A_0_HELLO)
    transport, proto = connect_waiting()
    proto.dataReceived(fetch("a", 0, len(HELLO_SET), 4096))
    connect_waiting.clock.advance(WAIT_S / 2)
    assert transport.value() == b""  # held, not answered empty
    second = message_set(b"second")
    writer.dataReceived(produce("a", 0, second))  # flushed at once (InlineFlusher, every message)
    assert transport.value() == b""  # answered from the reactor's next step, not inside the produce
    connect_waiting.clock.advance(0)
    drain(transport)
    assert transport.value() == fetch_response(second)
    assert logs.get_log("a", 0)._flush_watchers == []
    assert connect_waiting.clock.getDelayedCalls() == []


def test_caught_up_fetch_is_answered_empty_when_the_wait_runs_out(connect_waiting):
    transport, proto = connect_waiting()
    proto.dataReceived(PRODUCE_A_0_HELLO + fetch("a", 0, len(HELLO_SET), 4096))
    connect_waiting.clock.advance(WAIT_S - 0.001)
    assert transport.value() == b""
    connect_waiting.clock.advance(0.001)
    assert transport.value() == EMPTY_FETCH_RESPONSE


@pytest.mark.parametrize("data", [
    fetch("a", 0, 0, 4096),  # data to send
    fetch("a", 1, 0, 4096),  # a partition with no log yet: 0.7 answers empty at once
    fetch("a", 0, 999, 4096),  # past the end: an error code at once
    fetch("a", 0, len(HELLO_SET), 0),  # a zero-size fetch can never get anything
    multifetch(("a", 0, len(HELLO_SET), 4096), ("a", 0, 0, 4096)),  # one part has data
    OFFSETS_A_0_LATEST,
], ids=["data", "no-log", "out-of-range", "zero-size", "multifetch-with-data", "offsets"])
def test_requests_with_something_to_say_are_answered_at_once(connect_waiting, data):
    transport, proto = connect_waiting()
    proto.dataReceived(PRODUCE_A_0_HELLO + data)
    drain(transport)
    assert transport.value() != b""
    assert connect_waiting.clock.getDelayedCalls() == []


def test_caught_up_multifetch_wakes_on_a_flush_of_any_of_its_partitions(connect_waiting, logs):
    _, writer = connect_waiting()
    writer.dataReceived(PRODUCE_A_0_HELLO + produce("a", 1, HELLO_SET))
    transport, proto = connect_waiting()
    proto.dataReceived(multifetch(("a", 0, len(HELLO_SET), 4096), ("a", 1, len(HELLO_SET), 4096)))
    assert transport.value() == b""
    second = message_set(b"second")
    writer.dataReceived(produce("a", 1, second))
    connect_waiting.clock.advance(0)
    drain(transport)
    inner = fetch_response(b"") + fetch_response(second)
    assert transport.value() == struct.pack(">ih", 2 + len(inner), 0) + inner
    assert logs.get_log("a", 0)._flush_watchers == logs.get_log("a", 1)._flush_watchers == []


def test_requests_behind_a_held_fetch_are_answered_after_it_in_order(connect_waiting):
    transport, proto = connect_waiting()
    proto.dataReceived(PRODUCE_A_0_HELLO + fetch("a", 0, len(HELLO_SET), 4096) + OFFSETS_A_0_LATEST)
    assert transport.value() == b""
    connect_waiting.clock.advance(WAIT_S)
    assert transport.value() == EMPTY_FETCH_RESPONSE + struct.pack(">ihiq", 14, 0, 1, len(HELLO_SET))


def test_connection_lost_while_held_answers_nothing_and_leaves_no_watcher(connect_waiting, logs):
    transport, proto = connect_waiting()
    proto.dataReceived(PRODUCE_A_0_HELLO + fetch("a", 0, len(HELLO_SET), 4096))
    proto.connectionLost(None)
    assert logs.get_log("a", 0)._flush_watchers == []
    assert connect_waiting.clock.getDelayedCalls() == []
    _, writer = connect_waiting()
    writer.dataReceived(produce("a", 0, message_set(b"late")))
    connect_waiting.clock.advance(WAIT_S)
    assert transport.value() == b""


# --- the figures of each connection (the debug port's cons) ---------------------------------

def test_each_connection_counts_its_requests_responses_and_bytes_until_it_closes(connect, empty_broker, clock):
    transport, proto = connect()
    requests = empty_broker.stats.requests
    (connection,) = requests.open_connections
    peer = transport.getPeer()
    assert (connection.host, connection.port, connection.last_request) == (peer.host, peer.port, "NA")
    clock.time += 3
    proto.dataReceived(PRODUCE_A_0_HELLO)
    proto.dataReceived(FETCH_A_0[:7])
    assert connection.queued() == 0 and connection.reading()
    proto.dataReceived(FETCH_A_0[7:])  # its response streams...
    proto.dataReceived(FETCH_A_0)  # ...so the second waits behind it, and reading stops
    assert connection.queued() == 1 and not connection.reading()
    drain(transport)
    drain(transport)
    assert (connection.requests, connection.responses, connection.last_request) == (3, 2, "fetch")
    assert connection.bytes_received == len(PRODUCE_A_0_HELLO) + 2 * len(FETCH_A_0)
    assert connection.bytes_sent == len(transport.value()) == 2 * len(HELLO_FETCH_RESPONSE)
    assert connection.last_activity_s == connection.established_s + 3
    proto.connectionLost(None)
    assert not requests.open_connections and requests.connections == 0


def test_fetched_messages_are_counted_out(connect, empty_broker):
    transport, proto = connect()
    proto.dataReceived(produce("a", 0, message_set(b"one", b"two")) + FETCH_A_0)
    drain(transport)
    topic = empty_broker.stats.topic("a").snapshot()
    assert (topic["messages_in"], topic["messages_out"]) == (2, 2)
