"""BrokerConnection: one blocking TCP connection to one broker, under SyncProducer and SimpleConsumer.

Kafka 0.7 has no correlation ids: a request with a response (Fetch, MultiFetch, Offsets) is
answered before the broker reads the next request, and Produce/MultiProduce get no answer at
all. So a connection serves one call at a time; callers that share one serialize (this class
holds no lock).

Responses are read with ``recv_into`` straight into one buffer, reused from call to call and
grown to the largest response seen (up to KEEP_BUFFER_BYTES; a bigger one gets a buffer of its
own), so a 1 MiB fetch costs no per-chunk joins. The view ``request`` returns is only valid
until the next call on this connection: a caller that keeps the bytes copies them.

Broken connections, as 0.7's clients handle them:

- a call that finds the connection broken (EOF, reset, broken pipe) reconnects and sends the
  request once more, then gives up (0.7's SimpleConsumer retries a fetch once the same way).
  Reads are idempotent. A produce may have reached the broker before the error, so its retry
  can duplicate messages (0.7 is at-least-once there too). 0.7.2's SyncProducer only
  disconnected and rethrew, leaving resends to the async producer's ``num.retries``; the one
  resend here lets a sync producer ride over a broker restart;
- before each call the socket is polled (no wait): a 0.7 broker never speaks unasked, so a
  readable idle socket means the broker closed it (it restarted, or refused an earlier
  produce). We reconnect first, instead of writing into a dead socket, which the kernel would
  accept and lose;
- a timeout (``socket.timeout.ms``) leaves the connection out of step with its responses, so
  it is closed and TimeoutError raised, with no retry;
- ``reconnect.interval`` (calls) and ``reconnect.time.interval.ms`` make a fresh connection
  after that many calls or that long (0.7.1+; it spreads producers behind a load balancer).

Connecting retries with a growing pause (1 ms, x10, at most 1 s) until ``connect.timeout.ms``
has passed, like 0.7's SyncProducer.connect.

TLS (not in 0.7; for a broker listening on an ``ssl:`` endpoint): pass an ``ssl.SSLContext``.
An idle TLS socket may be readable without the broker having closed it (TLS 1.3 sends session
tickets after the handshake), so the idle check then reads without blocking: only an end of
stream or unexpected bytes count as closed.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import time
from collections.abc import Callable

from twisted_broker.codec.kafka07.primitives import INT32
from twisted_broker.codec.kafka07.responses import decode_error_and_body
from twisted_broker.errors import UnexpectedResponse

log = logging.getLogger(__name__)

Address = tuple[str, int]  # (host, port) of a broker
INITIAL_BUFFER_BYTES = 64 * 1024
KEEP_BUFFER_BYTES = 16 * 1024 * 1024  # a bigger response gets a one-off buffer
_MAX_CONNECT_PAUSE_S = 1.0


class BrokerConnection:
    """A blocking connection to ``host:port``; it connects on first use. Not thread-safe."""

    def __init__(self, host: str, port: int, *, connect_timeout_ms: int = 5000,
                 socket_timeout_ms: int = 30000, send_buffer_bytes: int | None = None,
                 receive_buffer_bytes: int | None = None, reconnect_interval: int | None = None,
                 reconnect_time_interval_ms: int | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.host, self.port = host, port
        self._ssl_context = ssl_context
        self._connect_timeout_s = connect_timeout_ms / 1000
        self._socket_timeout_s = socket_timeout_ms / 1000 if socket_timeout_ms > 0 else None
        self._send_buffer_bytes = send_buffer_bytes
        self._receive_buffer_bytes = receive_buffer_bytes
        self._reconnect_interval = reconnect_interval
        # 0.7.1+: a negative reconnect.time.interval.ms turns the timed reconnect off.
        self._reconnect_time_interval_s = (
            reconnect_time_interval_ms / 1000
            if reconnect_time_interval_ms is not None and reconnect_time_interval_ms >= 0 else None)
        self._clock, self._sleep = clock, sleep
        self._sock: socket.socket | None = None
        self._poll: select.poll | None = None
        self._connected_at = 0.0
        self._calls_on_connection = 0
        self._buffer = bytearray(INITIAL_BUFFER_BYTES)
        self._view = memoryview(self._buffer)

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port})"

    @property
    def is_connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> None:
        """Open the connection (closing any open one). Raises ConnectionError after
        ``connect.timeout.ms`` of failed attempts."""
        self.close()
        deadline = self._clock() + self._connect_timeout_s
        pause = 0.001
        while True:
            remaining = deadline - self._clock()
            try:
                sock = socket.create_connection((self.host, self.port), timeout=max(remaining, 0.001))
                break
            except OSError as exc:
                remaining = deadline - self._clock()
                if remaining <= 0:
                    raise ConnectionError(f"cannot connect to {self.host}:{self.port} within "
                                          f"{self._connect_timeout_s * 1000:.0f} ms: {exc}") from exc
                log.debug("connecting to %s:%d failed (%s); next attempt in %.3f s",
                          self.host, self.port, exc, min(pause, remaining))
                self._sleep(min(pause, remaining))
                pause = min(pause * 10, _MAX_CONNECT_PAUSE_S)
        try:
            # Every request goes out in one sendall, so Nagle has nothing to coalesce; without
            # this, back-to-back produces (which get no reply to piggyback ACKs on) could wait
            # for delayed ACKs.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._send_buffer_bytes:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer_bytes)
            if self._receive_buffer_bytes:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._receive_buffer_bytes)
            sock.settimeout(self._socket_timeout_s)
            if self._ssl_context is not None:
                sock = self._ssl_context.wrap_socket(sock, server_hostname=self.host)
        except OSError:  # ssl.SSLError included: a failed handshake fails the connect
            sock.close()
            raise
        self._sock = sock
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        self._connected_at = self._clock()
        self._calls_on_connection = 0
        log.debug("connected to %s:%d", self.host, self.port)

    def close(self) -> None:
        """Close the connection, if open; the next call connects again."""
        sock, self._sock, self._poll = self._sock, None, None
        if sock is not None:
            sock.close()

    def send(self, request: bytes) -> None:
        """Write a whole request that has no response (Produce, MultiProduce).

        Returning means the kernel took the bytes, not that the broker appended them: 0.7
        reports nothing for a produce. Raises ConnectionError (after one reconnect and resend)
        or TimeoutError.
        """
        self._call(request, expect_response=False)

    def request(self, request: bytes) -> tuple[int, memoryview]:
        """Write a request and read its response: ``(error code, body after the code)``.

        The body is a view into this connection's buffer, valid until the next call. Raises
        ConnectionError (after one reconnect and retry), TimeoutError, or UnexpectedResponse.
        """
        return self._call(request, expect_response=True)

    def _call(self, request: bytes, expect_response: bool) -> tuple[int, memoryview] | None:
        for attempt in (1, 2):
            self._prepare()
            try:
                self._sock.sendall(request)
                self._calls_on_connection += 1
                return self._read_response() if expect_response else None
            except ConnectionError as exc:
                self.close()
                if attempt == 2:
                    raise
                log.info("connection to %s:%d broke (%s); reconnecting to send the request again",
                         self.host, self.port, exc)
            except BaseException:
                # A timeout, a bad response or an interrupt leaves the stream at an unknown
                # point: a later response would answer the wrong request.
                self.close()
                raise

    def _prepare(self) -> None:
        """Connect, or reconnect when the interval is due or the broker closed the socket."""
        if self._sock is not None:
            if self._reconnect_interval is not None and self._calls_on_connection >= self._reconnect_interval:
                log.debug("%r: reconnecting after %d requests (reconnect.interval)",
                          self, self._calls_on_connection)
                self.close()
            elif (self._reconnect_time_interval_s is not None
                  and self._clock() - self._connected_at >= self._reconnect_time_interval_s):
                log.debug("%r: reconnecting (reconnect.time.interval.ms)", self)
                self.close()
            elif self._poll.poll(0) and self._closed_by_peer():
                # 0.7 says nothing else: a refused produce (bad CRC, bad topic) looks the same.
                log.warning("broker %s:%d closed the connection (it restarted, or refused a "
                            "request); reconnecting", self.host, self.port)
                self.close()
        if self._sock is None:
            self.connect()

    def _closed_by_peer(self) -> bool:
        """Whether an idle socket that polls readable was closed (0.7 never speaks unasked)."""
        if self._ssl_context is None:
            return True
        sock = self._sock
        sock.setblocking(False)
        try:
            sock.recv(1)  # b"" (closed) or bytes nobody asked for: either way, start afresh
        except ssl.SSLWantReadError:
            return False  # only TLS housekeeping (a session ticket) was waiting
        except OSError:
            pass
        finally:
            sock.settimeout(self._socket_timeout_s)
        return True

    def _read_response(self) -> tuple[int, memoryview]:
        sock, view = self._sock, self._view
        received = 0
        while received < 4:
            # Read as much as fits: only this response can be in flight, and a small one then
            # arrives in one call.
            count = sock.recv_into(view[received:])
            if not count:
                raise ConnectionError(f"{self.host}:{self.port} closed the connection before the response")
            received += count
        (size,) = INT32.unpack_from(view, 0)
        if size < 2:
            raise UnexpectedResponse(f"{self.host}:{self.port} sent a response of size {size}")
        end = 4 + size
        if received > end:
            raise UnexpectedResponse(f"{self.host}:{self.port} sent {received - end} bytes after the response")
        if end > len(view):
            view = self._grow(end, received)
        while received < end:
            count = sock.recv_into(view[received:end])
            if not count:
                raise ConnectionError(f"{self.host}:{self.port} closed the connection with "
                                      f"{end - received} bytes of the response unread")
            received += count
        return decode_error_and_body(view[4:end])

    def _grow(self, needed: int, received: int) -> memoryview:
        """A buffer of at least ``needed`` bytes starting with the ``received`` ones."""
        old = self._view
        if needed <= KEEP_BUFFER_BYTES:
            buffer = bytearray(min(max(needed, 2 * len(old)), KEEP_BUFFER_BYTES))
            # Replaced, never resized: a caller may still hold a view of the old one.
            self._buffer, self._view = buffer, memoryview(buffer)
        else:
            buffer = bytearray(needed)  # one-off: kept, it would pin up to 2 GiB per connection
        view = memoryview(buffer)
        view[:received] = old[:received]
        return view

    def __enter__(self) -> "BrokerConnection":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
