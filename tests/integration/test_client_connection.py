"""BrokerConnection over loopback against a scripted server: responses in pieces, one retry on
a broken connection, stray bytes, timeouts, connect timeouts, the reconnect intervals.

A real broker answers correctly; these servers misbehave on purpose, one script per test.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable

import pytest

from twisted_broker.client.connection import INITIAL_BUFFER_BYTES, BrokerConnection
from twisted_broker.client.errors import UnexpectedResponse

REQUEST = struct.pack(">ih", 2, 9)  # any 6 bytes: these servers do not parse requests


def response(body: bytes, error: int = 0) -> bytes:
    return struct.pack(">ih", 2 + len(body), error) + body


class ScriptedServer:
    """Accepts connections on loopback; ``handle(conn, index)`` serves the index-th one."""

    def __init__(self, handle: Callable[[socket.socket, int], None]) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._handle = handle
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            index, self.connections = self.connections, self.connections + 1
            with conn:
                try:
                    self._handle(conn, index)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def serve():
    servers: list[ScriptedServer] = []

    def start(handle) -> ScriptedServer:
        servers.append(ScriptedServer(handle))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def read_request(conn: socket.socket) -> bool:
    data = b""
    while len(data) < len(REQUEST):
        chunk = conn.recv(len(REQUEST) - len(data))
        if not chunk:
            return False
        data += chunk
    return True


def answer_each(*answers: bytes):
    def handle(conn, index):
        for answer in answers:
            if not read_request(conn):
                return
            conn.sendall(answer)
        conn.recv(1)  # hold the connection open until the client closes it
    return handle


def test_a_response_arriving_in_pieces_is_read_whole(serve):
    body = bytes(range(256)) * 2

    def handle(conn, index):
        read_request(conn)
        for i, byte in enumerate(response(body, error=3)):
            conn.sendall(bytes([byte]))
            if i % 100 == 0:
                time.sleep(0.001)
        conn.recv(1)

    with BrokerConnection("127.0.0.1", serve(handle).port) as connection:
        error, received = connection.request(REQUEST)
        assert (error, bytes(received)) == (3, body)


def test_a_response_larger_than_the_buffer_grows_it(serve):
    big, small = bytes(range(256)) * (INITIAL_BUFFER_BYTES // 64), b"small"
    server = serve(answer_each(response(big), response(small)))
    with BrokerConnection("127.0.0.1", server.port) as connection:
        assert bytes(connection.request(REQUEST)[1]) == big
        assert bytes(connection.request(REQUEST)[1]) == small


def test_a_connection_broken_mid_request_is_reconnected_and_the_request_retried_once(serve):
    def handle(conn, index):
        read_request(conn)
        if index == 0:
            return  # close without answering
        conn.sendall(response(b"second try"))
        conn.recv(1)

    server = serve(handle)
    with BrokerConnection("127.0.0.1", server.port) as connection:
        assert bytes(connection.request(REQUEST)[1]) == b"second try"
    assert server.connections == 2


def test_a_second_broken_connection_raises(serve):
    server = serve(lambda conn, index: read_request(conn))
    with BrokerConnection("127.0.0.1", server.port) as connection:
        with pytest.raises(ConnectionError):
            connection.request(REQUEST)
    assert server.connections == 2


def test_bytes_after_the_response_are_refused_and_the_connection_closed(serve):
    server = serve(answer_each(response(b"ok") + b"stray"))
    connection = BrokerConnection("127.0.0.1", server.port)
    with pytest.raises(UnexpectedResponse):
        connection.request(REQUEST)
    assert not connection.is_connected


def test_a_response_size_below_2_is_refused(serve):
    server = serve(answer_each(struct.pack(">i", 1) + b"\x00"))
    with pytest.raises(UnexpectedResponse):
        BrokerConnection("127.0.0.1", server.port).request(REQUEST)


def test_a_timeout_closes_the_connection_and_the_next_call_reconnects(serve):
    def handle(conn, index):
        read_request(conn)
        if index == 0:
            conn.recv(1)  # never answer the first connection
            return
        conn.sendall(response(b"fresh"))
        conn.recv(1)

    server = serve(handle)
    connection = BrokerConnection("127.0.0.1", server.port, socket_timeout_ms=200)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        connection.request(REQUEST)
    assert 0.15 < time.monotonic() - started < 5
    assert not connection.is_connected
    assert bytes(connection.request(REQUEST)[1]) == b"fresh"
    connection.close()


def test_connecting_to_a_closed_port_gives_up_after_connect_timeout():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        connection = BrokerConnection("127.0.0.1", port, connect_timeout_ms=300)
        started = time.monotonic()
        with pytest.raises(ConnectionError, match="within 300 ms"):
            connection.send(REQUEST)
        assert 0.25 < time.monotonic() - started < 5  # retried until the timeout, then gave up


def test_reconnect_interval_opens_a_fresh_connection_every_n_calls(serve):
    server = serve(answer_each(*[response(b"")] * 10))
    with BrokerConnection("127.0.0.1", server.port, reconnect_interval=2) as connection:
        for _ in range(5):
            connection.request(REQUEST)
    assert server.connections == 3


def test_reconnect_time_interval_opens_a_fresh_connection_when_due(serve):
    now = [0.0]
    server = serve(answer_each(*[response(b"")] * 10))
    with BrokerConnection("127.0.0.1", server.port, reconnect_time_interval_ms=1000,
                          clock=lambda: now[0]) as connection:
        connection.request(REQUEST)
        now[0] = 0.5
        connection.request(REQUEST)
        now[0] = 1.0
        connection.request(REQUEST)
    assert server.connections == 2


def test_a_negative_reconnect_time_interval_never_reconnects(serve):
    now = [0.0]
    server = serve(answer_each(*[response(b"")] * 10))
    with BrokerConnection("127.0.0.1", server.port, reconnect_time_interval_ms=-1,
                          clock=lambda: now[0]) as connection:
        connection.request(REQUEST)
        now[0] = 1e9
        connection.request(REQUEST)
    assert server.connections == 1
