"""Connection handling over real sockets: partial reads, pipelining, many clients, large and
slow responses (the sendfile path), and a segment file unlinked while a response streams from it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import struct
import termios
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

from tests.support.polling import latest_offset, wait_for_end
from tests.support.spec_encoding import MB, fetch, fetch_response, message_set_of, offsets, produce

# These tests produce megabytes: they wait longer for the visible end than wait_for_end's default.
VISIBLE_WITHIN_S = 10.0


def bytes_waiting(sock: socket.socket) -> int:
    """Bytes received on ``sock`` and not read yet. Counting them does not read them, so the
    window stays closed and the sender stays blocked."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


def nothing_more_arrives(client, wait_s: float = 0.2) -> bool:
    """True if the connection stays open and silent for ``wait_s``."""
    client.sock.settimeout(wait_s)
    try:
        client.sock.recv(1)  # a byte: an extra answer; b"": the broker closed the connection
    except socket.timeout:
        return True
    return False


def send_byte_by_byte(client, frame: bytes) -> None:
    for i in range(len(frame)):
        client.send(frame[i:i + 1])
        time.sleep(0.0005)  # let the broker see (mostly) one byte per read


def connect_with_small_receive_buffer(port: int, receive_bytes: int = 4096) -> socket.socket:
    # Set before connect, so the advertised window is small from the start.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_bytes)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    return sock


def recv_exactly(sock: socket.socket, count: int) -> bytes:
    buf = bytearray()
    while len(buf) < count:
        chunk = sock.recv(min(count - len(buf), 4 * MB))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {count} bytes")
        buf += chunk
    return bytes(buf)


def produce_backlog(client, topic: str, total_bytes: int, payload_bytes: int = 100_000,
                    per_request: int = 10) -> bytes:
    """Produce about ``total_bytes`` of distinct messages; wait until visible; return the log bytes."""
    sets = []
    produced_bytes = 0
    index = 0
    while produced_bytes < total_bytes:
        payloads = [index.to_bytes(8, "big") + os.urandom(payload_bytes - 8)
                    for index in range(index, index + per_request)]
        index += per_request
        sets.append(message_set_of(*payloads))
        client.send(produce(topic, 0, sets[-1]))
        produced_bytes += len(sets[-1])
    log_bytes = b"".join(sets)
    assert wait_for_end(client, topic, len(log_bytes), timeout_s=VISIBLE_WITHIN_S) == len(log_bytes)
    return log_bytes


def assert_valid_entries(data: bytes) -> int:
    """Every entry of ``data`` is complete and passes its CRC; return how many there are."""
    position = count = 0
    while position < len(data):
        size, magic, _attributes, crc = struct.unpack_from(">iBBI", data, position)
        assert magic == 1 and position + 4 + size <= len(data)
        assert zlib.crc32(data[position + 10:position + 4 + size]) & 0xFFFFFFFF == crc
        position += 4 + size
        count += 1
    return count


# --- partial reads and pipelining ---------------------------------------------------------

def test_requests_sent_one_byte_at_a_time_get_exactly_one_answer(broker):
    sent = message_set_of(b"hello")
    with broker.connect() as client:
        client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        send_byte_by_byte(client, produce("bytewise", 0, sent))
        wait_for_end(client, "bytewise", len(sent), timeout_s=VISIBLE_WITHIN_S)
        send_byte_by_byte(client, fetch("bytewise") + offsets("bytewise", 0, -1, 1))
        assert client.read_exactly(4 + 2 + len(sent)) == fetch_response(sent)
        assert client.read_exactly(18) == struct.pack(">ihiq", 14, 0, 1, len(sent))
        assert nothing_more_arrives(client)


def test_pipelined_requests_are_answered_in_order(broker):
    small = {topic: message_set_of(topic.encode() * 3) for topic in ("p-a", "p-b", "p-c")}
    big = message_set_of(*(bytes([i]) * 500_000 for i in range(3)))  # streamed: 1.5 MB
    with broker.connect() as client:
        for topic, messages in small.items():
            client.send(produce(topic, 0, messages))
        client.send(produce("p-big", 0, big))
        for topic, messages in [*small.items(), ("p-big", big)]:
            wait_for_end(client, topic, len(messages), timeout_s=VISIBLE_WITHIN_S)
        pipeline = [(fetch("p-big", max_size=4 * MB), fetch_response(big)),
                    (fetch("p-c"), fetch_response(small["p-c"])),
                    (offsets("p-a"), struct.pack(">ihiq", 14, 0, 1, len(small["p-a"]))),
                    (fetch("p-a"), fetch_response(small["p-a"])),
                    (fetch("p-big", offset=4 + 6 + 500_000, max_size=600_000),
                     fetch_response(big[500_010:1_000_020])),
                    (fetch("p-b", offset=len(small["p-b"]) + 1), fetch_response(b"", error=1)),
                    (fetch("p-b"), fetch_response(small["p-b"]))]
        client.send(b"".join(frame for frame, _answer in pipeline))
        for _frame, answer in pipeline:
            assert client.read_exactly(len(answer)) == answer
        assert nothing_more_arrives(client)


def test_200_concurrent_connections_each_produce_and_fetch_their_own_topic(broker):
    count = 200
    ready = threading.Barrier(count, timeout=30)

    def client_session(index: int) -> tuple[bytes, bytes]:
        topic = f"many-{index}"
        messages = message_set_of(b"client %d" % index, b"x" * index)
        with broker.connect(timeout_s=30) as client:
            ready.wait()  # all 200 connections are open at once
            client.send(produce(topic, 0, messages))
            wait_for_end(client, topic, len(messages), timeout_s=30)
            client.send(fetch(topic))
            return client.read_exactly(6 + len(messages)), fetch_response(messages)

    with ThreadPoolExecutor(count) as pool:
        results = list(pool.map(client_session, range(count)))
    assert len(results) == count
    for got, expected in results:
        assert got == expected


# --- large and slow responses (sendfile) --------------------------------------------------

def test_large_fetch_response_arrives_intact(broker_factory):
    broker = broker_factory("large", properties={"log.file.size": str(1 << 30)})
    with broker.connect(timeout_s=30) as client:
        log_bytes = produce_backlog(client, "large", 50 * MB)
        client.send(fetch("large", max_size=64 * MB))
        size, error = struct.unpack(">ih", client.read_exactly(6))
        assert (size, error) == (2 + len(log_bytes), 0)
        data = client.read_exactly(len(log_bytes))
    assert hashlib.sha256(data).digest() == hashlib.sha256(log_bytes).digest()
    assert assert_valid_entries(data) == len(log_bytes) // (4 + 6 + 100_000)


def test_slow_reader_does_not_block_other_clients(broker_factory):
    broker = broker_factory("slow", properties={"socket.send.buffer": "65536"})
    with broker.connect(timeout_s=30) as client:
        log_bytes = produce_backlog(client, "slow", 8 * MB)
    slow = connect_with_small_receive_buffer(broker.port)
    try:
        slow.sendall(fetch("slow", max_size=64 * MB))
        assert recv_exactly(slow, 6) == struct.pack(">ih", 2 + len(log_bytes), 0)  # it is streaming
        with broker.connect(timeout_s=5) as other:  # served while the slow response is stuck
            other.send(produce("other", 0, message_set_of(b"meanwhile")))
            wait_for_end(other, "other", 19, timeout_s=VISIBLE_WITHIN_S)
            assert other.request(fetch("slow", max_size=20)) == b"\x00\x00" + log_bytes[:20]
        assert bytes_waiting(slow) < len(log_bytes)  # the slow response was still incomplete
        data = recv_exactly(slow, len(log_bytes))
    finally:
        slow.close()
    assert data == log_bytes


def test_segment_unlinked_while_streaming_is_still_sent_complete(broker_factory):
    broker = broker_factory("unlink", properties={"log.file.size": str(MB), "socket.send.buffer": "16384"})
    with broker.connect(timeout_s=30) as client:
        log_bytes = produce_backlog(client, "unlink", 4 * MB, payload_bytes=50_000)
    segments = sorted((broker.log_dir / "unlink-0").iterdir())
    assert len(segments) >= 3
    oldest = segments[0]
    oldest_bytes = oldest.read_bytes()
    assert oldest_bytes == log_bytes[:len(oldest_bytes)]
    slow = connect_with_small_receive_buffer(broker.port)
    try:
        slow.sendall(fetch("unlink", max_size=64 * MB))
        size, error = struct.unpack(">ih", recv_exactly(slow, 6))
        assert (size, error) == (2 + len(oldest_bytes), 0)  # the response never spans segments
        assert bytes_waiting(slow) < len(oldest_bytes)  # still streaming
        os.unlink(oldest)  # as retention does; the broker streams from its open descriptor
        data = recv_exactly(slow, len(oldest_bytes))
    finally:
        slow.close()
    assert data == oldest_bytes
    assert assert_valid_entries(data) > 0
    with broker.connect() as client:  # and the broker carries on
        assert client.request(offsets("unlink", 0, -1, 1)) == struct.pack(">hiq", 0, 1, len(log_bytes))


def test_client_disconnecting_mid_response_releases_descriptors_and_broker_keeps_serving(broker_factory):
    broker = broker_factory("disconnect")
    fd_dir = f"/proc/{broker.process.pid}/fd"
    with broker.connect(timeout_s=30) as client:
        log_bytes = produce_backlog(client, "gone", 4 * MB)
    with broker.connect() as control:
        assert latest_offset(control, "gone") == len(log_bytes)
        baseline = len(os.listdir(fd_dir))  # the log's segment and this connection included
        for reset in (False, True) * 5:
            sock = connect_with_small_receive_buffer(broker.port)
            sock.sendall(fetch("gone", max_size=64 * MB))
            recv_exactly(sock, 1000)  # the response is streaming
            if reset:  # close with an RST instead of a FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        deadline = time.monotonic() + 5
        while len(os.listdir(fd_dir)) > baseline:  # each socket and region descriptor closed
            assert time.monotonic() < deadline, f"descriptors leaked: {os.listdir(fd_dir)}"
            time.sleep(0.01)
        assert control.request(fetch("gone", max_size=100_020)) == b"\x00\x00" + log_bytes[:100_010]
