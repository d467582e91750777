"""The Kafka protocol of today's clients (0.10 to 2.1) on a connection: frames decoded by
codec/kafka, handed to the modern handler table.

Its connections behave as the 0.7 port's: the protocol-blind ``FramedConnection`` (connection.py)
reads ``int32 size`` frames, answers one request at a time in arrival order (Kafka's own
brokers do the same: a client matches answers by correlation id but expects them in order),
stops reading a pipelining peer while an answer streams, has big partly received frames
reserve from the listener's ``RequestBudget``, and streams fetched file regions with sendfile.
What differs is the request, ``api_key int16, api_version int16, correlation_id int32,
client_id nullable string`` then the body of that (key, version), and the answers, which the
table frames with the request's correlation id.

Bad frames (garbage, truncated, sizes above ``max.socket.request.bytes``, an api key the table
has no handler for, a version it does not serve, a body that does not decode to its end)
close the connection with one WARNING naming the peer, as on the 0.7 port; the one exception
is an ApiVersions request of a version above the served ones, which is handed on with no body
(``body`` None) so that the table answers error 35 and the supported list and the client
falls back (KIP-511; docs/kafka-protocol.md §7).
"""

from __future__ import annotations

from dataclasses import replace

from twisted.internet.defer import Deferred

from twisted_broker.codec.kafka.api_keys import API_NAMES, API_VERSIONS, PRODUCE, SUPPORTED
from twisted_broker.codec.kafka.primitives import INT16, Malformed
from twisted_broker.codec.kafka.protocol import Request, UnsupportedVersion, decode_request, encode_response_pieces
from twisted_broker.errors import CloseConnection, Truncated
from twisted_broker.network.connection import FramedConnection, RefusedRequest
from twisted_broker.network.connection_factory import ConnectionFactory
from twisted_broker.network.muted_connection import MutedConnection
from twisted_broker.network.tls_principal import CertificatePrincipal

__all__ = ["KafkaModernFactory", "KafkaModernProtocol", "decode_frame"]


def decode_frame(frame, api_keys, **context) -> Request:
    """The request in ``frame`` (the bytes after its size), of one of ``api_keys`` (those the
    table has handlers for), with the fields of ``context`` (codec/kafka's ``decode_request``).
    Raises RefusedRequest, naming what is wrong."""
    try:
        if len(frame) < INT16.size:
            raise Truncated(0, INT16.size, len(frame))
        (api_key,) = INT16.unpack_from(frame, 0)
        if api_key not in api_keys:
            raise RefusedRequest(f"malformed request: unknown request type {api_key}")
        try:
            return decode_request(frame, **context)
        except UnsupportedVersion as exc:
            if api_key == API_VERSIONS:  # answered with the supported list, whatever its body
                return Request(exc.api_key, exc.api_version, exc.correlation_id, None, None)
            low, high = SUPPORTED[api_key]
            raise RefusedRequest(f"malformed request: {exc} (v{low}-v{high} are)") from None
        except Malformed as exc:
            raise RefusedRequest(f"malformed request: malformed {API_NAMES[api_key]}: {exc}") from None
    except (Truncated, UnicodeDecodeError) as exc:
        raise RefusedRequest(f"malformed request: {exc}") from None


class KafkaModernProtocol(MutedConnection, CertificatePrincipal, FramedConnection):
    """One connection of a modern listener. ``table`` serves its requests (handlers/kafka's
    ModernBroker): ``handlers`` (api key -> handler; what is decoded) and ``stats.requests``,
    the listeners' request figures. The handlers return response bodies; this connection
    frames them (codec/kafka's encode_response_pieces). ``listener_name`` goes with each
    request (Kafka's listener name: Metadata answers with that listener's endpoints), and
    ``throttle``, which mutes this connection for a quota's throttle time (muted_connection.py)."""

    def __init__(self, table, *, listener_name: str = "", **options) -> None:
        super().__init__(table.stats.requests, **options)
        self._handlers = table.handlers
        self._client_host = ""
        self.listener_name = listener_name
        self._throttle = self.throttle  # one bound method, not one per request

    def decode(self, frame) -> Request:
        # What the connection knows goes with the request when it is made (not by a copy per
        # request in ``handle``): nothing between this and ``handle`` changes it.
        return decode_frame(frame, self._handlers, client_host=self._peer_host(), principal=self.principal,
                            listener=self.listener_name, throttle=self._throttle)

    def _peer_host(self) -> str:
        # The peer's address goes with the request, for JoinGroup's member host.
        if not self._client_host:
            peer = self.transport.getPeer()
            self._client_host = f"/{getattr(peer, 'host', peer)}"
        return self._client_host

    def handle(self, request: Request):
        if (request.client_host != self._peer_host() or request.principal != self.principal
                or request.listener != self.listener_name or request.throttle != self._throttle):
            request = replace(request, client_host=self._client_host, principal=self.principal,
                              listener=self.listener_name, throttle=self._throttle)
        try:
            body = self._handlers[request.api_key](request)
        except CloseConnection as exc:  # a refusal with no answer to carry it (acks=0)
            raise RefusedRequest(str(exc)) from exc
        if isinstance(body, Deferred):
            return body.addCallback(lambda answer: encode_response_pieces(request, answer))
        return encode_response_pieces(request, body)

    def overtakes(self, request: Request, answer: Deferred) -> bool:
        # A Produce whose appends are done and whose acks=all answer waits for its commit, not
        # an idempotent producer's (handlers/kafka/produce.py): the requests behind it are
        # handled meanwhile, their answers kept in order. Kafka's brokers serve one at a time,
        # but librdkafka's one Produce per partition then commits one partition per round trip.
        return request.api_key == PRODUCE and getattr(answer, "writes_done", lambda: False)()

    def describe(self, request: Request) -> tuple[int, str]:
        return request.api_key, API_NAMES[request.api_key]


class KafkaModernFactory(ConnectionFactory):
    """Builds the connections of the modern listener; they share one RequestBudget."""

    protocol = KafkaModernProtocol
