"""Twisted-native clients: TwistedProducer and TwistedSimpleConsumer, every call a Deferred.

Both stand on KafkaClientProtocol, one connection to one broker. 0.7 has no correlation ids:
the broker answers requests one at a time, in order, and never answers a produce. So the
protocol keeps a queue of the Deferreds waiting for a response; each complete frame (cut by
wire.framing.FrameDecoder) fires the oldest one. Requests may be issued back to back without
waiting: the broker serves them in order.

A produce has no response in 0.7, so ``TwistedProducer.send`` fires once its request is in
the transport's buffer and the transport is not asking us to pause (IPushProducer): that gives
flow control, not delivery. A broker that refuses a produce closes the connection; every call
made after that fails with the connection-lost reason, and so do the Deferreds still waiting.

A response timeout (``timeout_s``) cancels the caller's Deferred only: its slot in the queue
stays, and the late response is matched to it and dropped, so later requests still get their
own responses.

TLS (not in 0.7; for a broker listening on an ``ssl:`` endpoint): pass ``tls``, a client
connection creator such as ``twisted.internet.ssl.optionsForClientTLS(hostname, trustRoot)``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol, wrapClientTLS
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from zope.interface import implementer

from twisted_broker.client.errors import UnexpectedResponse, error_for_code
from twisted_broker.client.fetched_message_set import FetchedMessageSet, decode_multifetch_response
from twisted_broker.codec.kafka07.compression import NO_COMPRESSION
from twisted_broker.codec.kafka07.framing import FrameDecoder, FrameTooLarge
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, scan
from twisted_broker.codec.kafka07.primitives import Buffer
from twisted_broker.codec.kafka07.requests import (
    FetchRequest, MultiFetchRequest, MultiProduceRequest, OffsetRequest, ProduceRequest, encode_request,
)
from twisted_broker.codec.kafka07.responses import NO_ERROR, decode_error_and_body, decode_offsets

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


class TwistedProducer:
    """Produce requests over one KafkaClientProtocol (``connect`` makes one)."""

    def __init__(self, protocol: KafkaClientProtocol, *, max_message_size: int = 1000000) -> None:
        self.protocol = protocol
        self.max_message_size = max_message_size

    @classmethod
    def connect(cls, reactor, host: str, port: int, *, connect_timeout_ms: int = 5000,
                max_message_size: int = 1000000, tls=None) -> Deferred["TwistedProducer"]:
        d = connect_client(reactor, host, port, timeout_s=connect_timeout_ms / 1000, tls=tls)
        return d.addCallback(cls, max_message_size=max_message_size)

    def send(self, topic: str, partition: int, payloads: Iterable[Buffer],
             codec: int = NO_COMPRESSION) -> Deferred[None]:
        """Send ``payloads`` as one Produce request (one wrapper message when ``codec`` is set).

        Fires when written (see the module docstring); fails with MessageSizeTooLarge (nothing
        sent) or the connection-lost reason.
        """
        return self.multi_send([(topic, partition, encode_compressed_message_set(payloads, codec))])

    def multi_send(self, produces: Iterable[tuple[str, int, Buffer]]) -> Deferred[None]:
        """Send ``(topic, partition, message set)`` triples: one Produce request for one triple,
        one MultiProduce for several (as 0.7's sync producer)."""
        requests = [ProduceRequest(topic, partition, message_set) for topic, partition, message_set in produces]
        try:
            for request in requests:
                scan(request.messages, check_crc=False, max_payload_bytes=self.max_message_size)
            if len(requests) == 1:
                data = encode_request(requests[0])
            else:
                data = encode_request(MultiProduceRequest(tuple(requests)))
        except Exception:
            return fail()
        return self.protocol.send(data)

    def close(self) -> Deferred[None]:
        return self.protocol.close()


class TwistedSimpleConsumer:
    """Fetch, MultiFetch and Offsets requests over one KafkaClientProtocol, as SimpleConsumer.

    ``socket_timeout_ms`` bounds each response (0: no bound); a late one fails with
    twisted.internet.defer.TimeoutError.
    """

    def __init__(self, protocol: KafkaClientProtocol, reactor, *, socket_timeout_ms: int = 30000) -> None:
        self.protocol = protocol
        self._reactor = reactor
        self._timeout_s = socket_timeout_ms / 1000 if socket_timeout_ms > 0 else None

    @classmethod
    def connect(cls, reactor, host: str, port: int, *, socket_timeout_ms: int = 30000,
                tls=None) -> Deferred["TwistedSimpleConsumer"]:
        d = connect_client(reactor, host, port, timeout_s=max(socket_timeout_ms, 1) / 1000, tls=tls)
        return d.addCallback(cls, reactor, socket_timeout_ms=socket_timeout_ms)

    def fetch(self, request: FetchRequest) -> Deferred[FetchedMessageSet]:
        """Fires with the FetchedMessageSet (the broker's error code inside, see check())."""
        d = self._request(encode_request(request))
        return d.addCallback(lambda response: FetchedMessageSet(request, *response))

    def multifetch(self, requests: Sequence[FetchRequest]) -> Deferred[list[FetchedMessageSet]]:
        """Fires with one FetchedMessageSet per request, in order."""
        requests = tuple(requests)
        d = self._request(encode_request(MultiFetchRequest(requests)))
        return d.addCallback(lambda response: decode_multifetch_response(requests, *response))

    def get_offsets_before(self, topic: str, partition: int, time: int, max_offsets: int) -> Deferred[list[int]]:
        """Fires with the offsets, newest first (SimpleConsumer.get_offsets_before)."""
        d = self._request(encode_request(OffsetRequest(topic, partition, time, max_offsets)))

        def offsets(response: tuple[int, memoryview]) -> list[int]:
            error, body = response
            if error != NO_ERROR:
                raise error_for_code(error, f"offsets of {topic}-{partition}")
            try:
                return decode_offsets(body)
            except ValueError as exc:
                raise UnexpectedResponse(f"malformed offsets response: {exc}") from None

        return d.addCallback(offsets)

    def close(self) -> Deferred[None]:
        return self.protocol.close()

    def _request(self, data: bytes) -> Deferred[tuple[int, memoryview]]:
        d = self.protocol.request(data)
        if self._timeout_s is not None:
            d.addTimeout(self._timeout_s, self._reactor)
        return d
