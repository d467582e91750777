"""The outgoing Kafka 0.7 connection: requests out, responses matched by order.

KafkaClientProtocol is one connection to one broker. 0.7 has no correlation ids: the broker
answers requests one at a time, in order, and never answers a produce. So the protocol keeps a
queue of the Deferreds waiting for a response; each complete frame (cut by
network.framing.FrameDecoder) fires the oldest one. Requests may be issued back to back
without waiting: the broker serves them in order. A response that fits no request
(UnexpectedResponse) puts the stream out of step: every waiting call fails and the connection
is aborted.

Two kinds of callers stand on it: followers fetching from their leaders
(replication/fetcher.py) and the Twisted-native clients (client/twisted_client.py). It lives in
the network layer so that replication need not borrow a connection from client/.
"""

from __future__ import annotations

from collections import deque

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol, wrapClientTLS
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from twisted_broker.network.framing import FrameDecoder, FrameTooLarge
from twisted_broker.codec.kafka07.responses import decode_error_and_body
from twisted_broker.errors import UnexpectedResponse

DEFAULT_MAX_RESPONSE_BYTES = 512 * 1024 * 1024  # a response size above this is garbage, not data


@implementer(IPushProducer)
class KafkaClientProtocol(Protocol):
    """One connection to a broker: requests out, responses matched by order."""

    def __init__(self, max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        self._decoder = FrameDecoder(max_response_bytes, min_size=2)  # a response has an error code
        self._waiting: deque[Deferred[tuple[int, memoryview]]] = deque()
        self._writable: list[Deferred[None]] = []  # sends waiting for the transport to drain
        self._paused = False
        self._lost: Failure | None = None
        self.disconnected: Deferred[None] = Deferred()

    # -- the transport calls these ------------------------------------------------------------

    def connectionMade(self) -> None:
        self.transport.registerProducer(self, True)

    def dataReceived(self, data: bytes) -> None:
        if self._lost is not None:
            return  # aborted: the connection is closing and nothing can be matched any more
        try:
            frames = self._decoder.feed(data)
        except FrameTooLarge as exc:
            self._deliver(exc.frames)
            self._abort(UnexpectedResponse(f"response size {exc.size} is outside [2, {exc.max_size}]"))
            return
        self._deliver(frames)

    def connectionLost(self, reason: Failure) -> None:
        self._lost = reason
        waiting, self._waiting = self._waiting, deque()
        writable, self._writable = self._writable, []
        for d in [*waiting, *writable]:
            d.errback(reason)
        self.disconnected.callback(None)

    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused = False
        writable, self._writable = self._writable, []
        for d in writable:
            d.callback(None)

    def stopProducing(self) -> None:
        pass  # connectionLost follows and fails what is waiting

    # -- requests --------------------------------------------------------------------------

    def send(self, request: bytes) -> Deferred[None]:
        """Write a request that has no response; fires when the transport can take more."""
        if self._lost is not None:
            return fail(self._lost)
        self.transport.write(request)
        if not self._paused:
            return succeed(None)
        d: Deferred[None] = Deferred()
        self._writable.append(d)
        return d

    def request(self, request: bytes) -> Deferred[tuple[int, memoryview]]:
        """Write a request; fires with ``(error code, body after the code)`` of its response."""
        if self._lost is not None:
            return fail(self._lost)
        d: Deferred[tuple[int, memoryview]] = Deferred()
        self._waiting.append(d)
        self.transport.write(request)
        return d

    def close(self) -> Deferred[None]:
        """Close the connection; fires once it is closed. Waiting calls fail."""
        if self._lost is None and not self.disconnected.called:
            # Unregistered first: a paused streaming producer would hold the close back.
            self.transport.unregisterProducer()
            self.transport.loseConnection()
        return self.disconnected if not self.disconnected.called else succeed(None)

    def _deliver(self, frames: list) -> None:
        for frame in frames:
            if not self._waiting:
                self._abort(UnexpectedResponse("the broker sent a response to no request"))
                return
            self._waiting.popleft().callback(decode_error_and_body(frame))

    def _abort(self, error: Exception) -> None:
        # Out of step with the broker: nothing later can be matched, so fail it all now.
        self._lost = Failure(error)
        waiting, self._waiting = self._waiting, deque()
        for d in waiting:
            d.errback(error)
        self.transport.abortConnection()


def connect_client(reactor, host: str, port: int, *, timeout_s: float = 30.0,
                   max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES, tls=None) -> Deferred[KafkaClientProtocol]:
    """Connect a KafkaClientProtocol to ``host:port`` (a name or an IPv4/IPv6 address), over
    TLS if ``tls`` (a client connection creator) is given; fails with a ConnectError after
    ``timeout_s``."""
    endpoint = HostnameEndpoint(reactor, host, port, timeout=timeout_s)
    if tls is not None:
        endpoint = wrapClientTLS(tls, endpoint)
    return connectProtocol(endpoint, KafkaClientProtocol(max_response_bytes))
