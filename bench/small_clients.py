"""The clients of issue 24's small-request rows: plain blocking sockets sending requests the
project's codecs encoded once, before the clock, so the client spends next to nothing per
request and the server's CPU is what bounds each row (bench/small_requests.py runs them
against the broker and against bench/small_floor.py alike).

- ``pipelined``: ``n`` copies of one request written back to back (0.7 Produce has no answer),
  then one Offsets request, whose answer says the server has read them all.
- ``one_at_a_time``: a request, its whole answer, the next: round trips in ns.
- ``fetch_woken``: a consumer's 0.7 Fetch held at the log end, then a Produce of one message
  from another connection; the Fetch's answer wakes the consumer, which asks again at the new
  end. One message per wake.
- ``paced_latency``: one-message Produce requests at a fixed rate (stamped with their send
  time) while a consumer long-polls at the end: latencies in ns and the messages delivered.
"""

from __future__ import annotations

import selectors
import socket
import struct
import time

from twisted_broker.codec.kafka import record_batch
from twisted_broker.codec.kafka.protocol import decode_response, encode_request
from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.codec.kafka07.replication import ProduceAckRequest, encode_replication_request
from twisted_broker.codec.kafka07.requests import (
    LATEST_TIME, FetchRequest, MultiProduceRequest, OffsetRequest, ProduceRequest, encode_request as encode_07,
)

SMALL_PAYLOAD = bytes(range(32, 232))  # 200 bytes, as bench/paper.py's messages
SMALL_FETCH_BYTES = 1 << 20
PRODUCE_API_KEY, PRODUCE_VERSION = 0, 3  # Produce v3: the first with record batches (magic 2)
_SIZE = struct.Struct(">i")
_STAMP = struct.Struct(">q")


# -- requests, encoded once --------------------------------------------------------------------

def produce_07(topic: str, payload: bytes = SMALL_PAYLOAD) -> bytes:
    """A 0.7 Produce request of one message to partition 0."""
    return encode_07(ProduceRequest(topic, 0, encode_message_set([payload])))


def offsets_07(topic: str) -> bytes:
    """A 0.7 Offsets request for partition 0's latest offset."""
    return encode_07(OffsetRequest(topic, 0, LATEST_TIME, 1))


def fetch_07(topic: str, offset: int) -> bytes:
    return encode_07(FetchRequest(topic, 0, offset, SMALL_FETCH_BYTES))


def produce_ack_07(topic: str, acks: int, payload: bytes = SMALL_PAYLOAD) -> bytes:
    """replication's ProduceAck request (type 102 on the 0.7 port) of one message."""
    produce = MultiProduceRequest((ProduceRequest(topic, 0, encode_message_set([payload])),))
    return encode_replication_request(ProduceAckRequest(acks, 30_000, produce))


def modern_produce(topic: str, acks: int, payload: bytes = SMALL_PAYLOAD, correlation_id: int = 1) -> bytes:
    """A Produce v3 request of one record batch of one record (no key) to partition 0."""
    batch = record_batch.build_batch([(int(time.time() * 1000), None, payload, ())])
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 30_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    return encode_request(PRODUCE_API_KEY, PRODUCE_VERSION, correlation_id, "bench-small", body)


def modern_produce_errors(frame: bytes) -> list[int]:
    """The partitions' error codes of a Produce v3 answer (its bytes after the size)."""
    _correlation_id, body = decode_response(PRODUCE_API_KEY, PRODUCE_VERSION, frame)
    return [p["error_code"] for t in body["responses"] for p in t["partition_responses"]]


def error_07(frame: bytes) -> int:
    """The error code of a 0.7 answer (its bytes after the size)."""
    return struct.unpack_from(">h", frame, 0)[0]


# -- sockets -------------------------------------------------------------------------------------

def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class FrameReader:
    """Reads ``int32 size`` frames from a blocking socket; ``frame()`` returns one's bytes
    after the size."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()

    def frame(self) -> bytes:
        buffer = self.buffer
        while len(buffer) < 4 or len(buffer) < 4 + _SIZE.unpack_from(buffer, 0)[0]:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("the server closed the connection")
            buffer += data
        end = 4 + _SIZE.unpack_from(buffer, 0)[0]
        frame = bytes(buffer[4:end])
        del buffer[:end]
        return frame

    def ready(self) -> bool:
        """A whole frame is buffered already."""
        return len(self.buffer) >= 4 and len(self.buffer) >= 4 + _SIZE.unpack_from(self.buffer, 0)[0]


def latest_offset(port: int, topic: str) -> int:
    with connect(port) as sock:
        sock.sendall(offsets_07(topic))
        frame = FrameReader(sock).frame()
    return struct.unpack_from(">q", frame, 6)[0]  # error int16, count int32, offset int64


# -- the drivers ---------------------------------------------------------------------------------

def pipelined(port: int, request: bytes, n: int, topic: str) -> None:
    """``n`` copies of ``request`` written back to back, then an Offsets request; returns once
    it is answered (the server reads one connection's requests in order)."""
    chunk = request * 1000
    with connect(port) as sock:
        for _ in range(n // 1000):
            sock.sendall(chunk)
        sock.sendall(request * (n % 1000) + offsets_07(topic))
        frame = FrameReader(sock).frame()
    if error_07(frame):
        raise RuntimeError(f"Offsets after the pipelined requests answered error {error_07(frame)}")


def one_at_a_time(port: int, request: bytes, n: int, check) -> list[int]:
    """``n`` round trips of ``request``; ``check(answer)`` raises on a wrong first and last
    answer. Returns each round trip in ns."""
    rtts = []
    with connect(port) as sock:
        reader = FrameReader(sock)
        send, frame, clock = sock.sendall, reader.frame, time.perf_counter_ns
        check(_round_trip(sock, reader, request))
        for _ in range(n - 2):
            started = clock()
            send(request)
            frame()
            rtts.append(clock() - started)
        check(_round_trip(sock, reader, request))
    return rtts


def _round_trip(sock: socket.socket, reader: FrameReader, request: bytes) -> bytes:
    sock.sendall(request)
    return reader.frame()


def fetch_woken(port: int, topic: str, n: int) -> int:
    """``n`` messages, each produced once the consumer's Fetch for it is on its way; returns
    the messages delivered (n: each answer brings one)."""
    entry_bytes = len(encode_message_set([SMALL_PAYLOAD]))
    produce = produce_07(topic)
    offset = latest_offset(port, topic)
    delivered = 0
    with connect(port) as consumer, connect(port) as producer:
        reader = FrameReader(consumer)
        while delivered < n:
            consumer.sendall(fetch_07(topic, offset))
            producer.sendall(produce)
            got = 0
            while not got:  # a held fetch that times out (fetch.wait.max.ms) answers empty
                frame = reader.frame()
                if error_07(frame):
                    raise RuntimeError(f"Fetch answered error {error_07(frame)}")
                got = len(frame) - 2
                if not got:
                    consumer.sendall(fetch_07(topic, offset))
            offset += got
            delivered += got // entry_bytes
    return delivered


def paced_latency(port: int, topic: str, n: int, rate: float) -> tuple[list[int], int]:
    """``n`` one-message Produce requests at ``rate`` per second while one consumer long-polls
    at the end; returns (latencies in ns, Fetch answers that brought messages)."""
    stamped = SMALL_PAYLOAD[_STAMP.size:]
    probe = encode_message_set([SMALL_PAYLOAD])
    stamp_at, entry_bytes = probe.index(SMALL_PAYLOAD), len(probe)
    offset = latest_offset(port, topic)
    latencies: list[int] = []
    answers = 0
    with connect(port) as consumer, connect(port) as producer:
        reader = FrameReader(consumer)
        selector = selectors.DefaultSelector()
        selector.register(consumer, selectors.EVENT_READ)
        consumer.sendall(fetch_07(topic, offset))
        interval_ns = int(1e9 / rate)
        started = time.perf_counter_ns()
        sent = 0
        deadline = started + n * interval_ns + 10 * 10**9
        while len(latencies) < n:
            now = time.perf_counter_ns()
            if now > deadline:
                break
            if sent < n and now >= started + sent * interval_ns:
                producer.sendall(produce_07(topic, _STAMP.pack(now) + stamped))
                sent += 1
                continue
            wait_s = max(0.0, (started + sent * interval_ns - now) / 1e9) if sent < n else 0.1
            if not reader.ready() and not selector.select(wait_s):
                continue
            frame = reader.frame()
            received = time.perf_counter_ns()
            data = memoryview(frame)[2:]
            for position in range(0, len(data) - entry_bytes + 1, entry_bytes):
                latencies.append(received - _STAMP.unpack_from(data, position + stamp_at)[0])
            offset += len(data)
            answers += 1 if len(data) else 0
            consumer.sendall(fetch_07(topic, offset))
        selector.close()
    return latencies, answers
