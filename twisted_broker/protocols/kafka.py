"""The Kafka 0.7 wire protocol on a Twisted connection.

Kafka 0.7 has no correlation ids: a client matches responses to requests by order. So each
connection handles one request at a time: frames that arrive while a response is streaming
wait in a queue, and the connection stops reading from its socket until the queue is empty
again, so a client that pipelines requests without reading responses cannot make the broker
buffer without bound. Bad framing, an unknown request type or a malformed body close the
connection (0.7 answers nothing), with one WARNING naming the peer.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import deque

from twisted.internet.protocol import Factory, Protocol

from twisted_broker.errors import Truncated
from twisted_broker.protocols.producers import stream_region
from twisted_broker.server.broker import Broker, CloseConnection, Piece
from twisted_broker.storage.segment import FileRegion
from twisted_broker.wire.framing import FrameDecoder, FrameTooLarge
from twisted_broker.wire.requests import TrailingBytes, UnknownRequestType, decode_request

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 104_857_600


class KafkaServerProtocol(Protocol):
    def __init__(self, broker: Broker, *, max_request_size: int = DEFAULT_MAX_REQUEST_BYTES,
                 send_buffer_bytes: int | None = None, receive_buffer_bytes: int | None = None) -> None:
        self._broker = broker
        self._stats = broker.stats.requests
        self._decoder = FrameDecoder(max_request_size)
        self._frames: deque = deque()
        self._busy = False  # a response is being streamed
        self._paused = False  # reading stopped because requests arrived while busy
        self._closing = False
        self._buffer_sizes = (send_buffer_bytes, receive_buffer_bytes)

    def connectionMade(self) -> None:
        if self.factory is not None:
            self.factory.connections.add(self)
        self._stats.connections += 1
        self._stats.connections_total += 1
        handle = getattr(self.transport, "getHandle", None)
        sock = handle() if handle is not None else None
        if isinstance(sock, socket.socket):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            send, receive = self._buffer_sizes
            if send:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send)
            if receive:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive)

    def connectionLost(self, reason=None) -> None:
        if self.factory is not None:
            self.factory.connections.discard(self)
        self._stats.connections -= 1
        self._closing = True
        self._frames.clear()

    def dataReceived(self, data: bytes) -> None:
        if self._closing:
            return
        self._stats.bytes_read.add(len(data))
        if self._busy and not self._paused:
            # A pipelining client: read nothing more until this response is out, so it cannot
            # make us buffer without bound. (Not done per response: 2 epoll calls each.)
            self._paused = True
            self.transport.pauseProducing()
        try:
            self._frames.extend(self._decoder.feed(data))
        except FrameTooLarge as exc:
            # 0.7 reads one request at a time: the requests before the bad size are served
            # first, whether or not they arrived in the same read; then the connection closes.
            self._frames.extend(exc.frames)
            self._frames.append(exc)
        self._serve()

    def _serve(self) -> None:
        """Handle queued frames in order until one needs streaming or the queue is empty."""
        while self._frames and not self._busy and not self._closing:
            frame = self._frames.popleft()
            if isinstance(frame, FrameTooLarge):
                self._refuse(str(frame))
                return
            started = time.perf_counter()
            try:
                request = decode_request(frame)
                pieces = self._broker.handle(request)
            except (Truncated, TrailingBytes, UnknownRequestType, UnicodeDecodeError) as exc:
                self._refuse(f"malformed request: {exc}")
                return
            except CloseConnection as exc:
                self._refuse(str(exc))
                return
            request_type = self._broker.request_type(request)
            if not any(isinstance(piece, FileRegion) for piece in pieces):
                self._write_bytes(pieces)
                self._stats.record(request_type, time.perf_counter() - started)
                continue
            self._busy = True
            self._stream(deque(pieces), request_type, started)

    def _write_bytes(self, pieces: list[Piece]) -> None:
        if pieces:
            data = b"".join(pieces)
            self._stats.bytes_written.add(len(data))
            self.transport.write(data)

    def _stream(self, pieces: deque, request_type: int, started: float) -> None:
        """Write pieces in order; stream each region, then continue with what follows it."""
        while pieces:
            piece = pieces.popleft()
            if not isinstance(piece, FileRegion):
                self._write_bytes([piece])
                continue
            self._stats.bytes_written.add(piece.length)
            done = stream_region(piece, self.transport)
            if not done.called:
                done.addCallbacks(lambda _: self._stream(pieces, request_type, started),
                                  lambda failure: self._stream_failed(pieces, failure))
                return
            failures: list = []
            done.addErrback(failures.append)  # it finished at once: take its outcome here
            if failures:
                self._stream_failed(pieces, failures[0])
                return
        self._stats.record(request_type, time.perf_counter() - started)
        self._busy = False
        if not self._closing:
            if self._paused:
                self._paused = False
                self.transport.resumeProducing()
            self._serve()

    def _stream_failed(self, pieces: deque, failure) -> None:
        for piece in pieces:
            if isinstance(piece, FileRegion):
                piece.close()
        pieces.clear()
        self._busy = False
        if not self._closing:
            # A consumer hanging up mid-response is routine; anything else is worth a warning.
            quiet = failure.check(BrokenPipeError, ConnectionResetError, ConnectionError)
            (log.debug if quiet else log.warning)(
                "closing connection from %s: streaming a fetch response failed: %s",
                self._peer(), failure.getErrorMessage())
            self._closing = True
            self.transport.loseConnection()

    def _refuse(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self._peer(), reason)
        self._closing = True
        self._frames.clear()
        self.transport.loseConnection()

    def _peer(self) -> str:
        peer = self.transport.getPeer()
        return f"{getattr(peer, 'host', peer)}:{getattr(peer, 'port', '')}"


class KafkaServerFactory(Factory):
    def __init__(self, broker: Broker, **protocol_options) -> None:
        self._broker, self._options = broker, protocol_options
        self.connections: set[KafkaServerProtocol] = set()

    def disconnect_all(self) -> None:
        """Drop every connection now (broker shutdown: no request may reach a closing log)."""
        for protocol in list(self.connections):
            protocol.transport.abortConnection()

    noisy = False  # one log line per connection would drown the broker log

    def buildProtocol(self, addr) -> KafkaServerProtocol:
        protocol = KafkaServerProtocol(self._broker, **self._options)
        protocol.factory = self
        return protocol
