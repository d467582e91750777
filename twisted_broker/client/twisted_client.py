"""Twisted-native clients: TwistedProducer and TwistedSimpleConsumer, every call a Deferred.

Both stand on KafkaClientProtocol (network/kafka07_client.py), one connection to one broker
whose responses are matched to requests by order: requests may be issued back to back
without waiting, the broker serves them in order.

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

from collections.abc import Iterable, Sequence

from twisted.internet.defer import Deferred, fail

from twisted_broker.client.errors import error_for_code
from twisted_broker.client.fetched_message_set import FetchedMessageSet, decode_multifetch_response
from twisted_broker.codec.kafka07.compression import NO_COMPRESSION
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, scan
from twisted_broker.codec.kafka07.primitives import Buffer
from twisted_broker.codec.kafka07.requests import (
    FetchRequest, MultiFetchRequest, MultiProduceRequest, OffsetRequest, ProduceRequest, encode_request,
)
from twisted_broker.codec.kafka07.responses import NO_ERROR, decode_offsets
from twisted_broker.errors import UnexpectedResponse
from twisted_broker.network.kafka07_client import KafkaClientProtocol, connect_client


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
