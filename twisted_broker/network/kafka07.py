"""The Kafka 0.7 wire protocol on a connection: frames decoded by codec/kafka07, handed to the
0.7 handler table.

Kafka 0.7 has no correlation ids: a client matches responses to requests by order, which the
protocol-blind ``FramedConnection`` (connection.py) keeps, with its bounds on what a peer can make
the broker hold. Bad framing, an unknown request type or a malformed body close the
connection (0.7 answers nothing), with one WARNING naming the peer; so does a request the
table refuses the 0.7 way (``CloseConnection``).

A run of Produce requests to one partition, pipelined by a producer that sends as it goes, is
appended as one message set (``absorb``): the log gets the same bytes, with one write.

With ``fetch_wait_max_ms`` above 0 (and a clock), a fetch whose every partition is caught up
is held until a flush publishes data in one of them or the wait ends (the table's
``hold_fetch``; handlers/held_fetch.py says why).
"""

from __future__ import annotations

from twisted_broker.codec.kafka07.produce_run import produce_run
from twisted_broker.codec.kafka07.replication import ALL_REQUEST_NAMES, REPLICATION_REQUEST_TYPES
from twisted_broker.codec.kafka07.requests import (
    PRODUCE_TYPE, REQUEST_NAMES, REQUEST_TYPES, TrailingBytes, UnknownRequestType, decode_request,
)
from twisted_broker.errors import CloseConnection, Truncated
from twisted_broker.network.connection import FramedConnection, RefusedRequest
from twisted_broker.network.connection_factory import ConnectionFactory
from twisted_broker.network.tls_principal import CertificatePrincipal

__all__ = ["KafkaServerFactory", "KafkaServerProtocol"]

_REQUEST_TYPES = {**REQUEST_TYPES, **REPLICATION_REQUEST_TYPES}
_DESCRIPTIONS = {cls: (request_type, ALL_REQUEST_NAMES[request_type]) for cls, request_type in _REQUEST_TYPES.items()}
_PRODUCE_RUN = (PRODUCE_TYPE, REQUEST_NAMES[PRODUCE_TYPE])


class KafkaServerProtocol(CertificatePrincipal, FramedConnection):
    """One connection of the 0.7 port. ``table`` serves its requests (handlers/kafka07's
    Broker): ``request_classes`` (what is decoded), ``handle``, ``hold_fetch`` and
    ``stats.requests``, the port's request figures."""

    cancel_answers_on_loss = True  # handlers/kafka07/replication_requests.py's waits drop on cancel

    def __init__(self, table, *, fetch_wait_max_ms: int = 0, clock=None, **options) -> None:
        super().__init__(table.stats.requests, clock=clock, **options)
        self._table = table
        # fetch.wait.max.ms; needs the clock.
        self._fetch_wait_s = fetch_wait_max_ms / 1000 if clock is not None else 0.0
        self.may_hold = bool(self._fetch_wait_s)
        self._host = None  # the peer's address, read once (for the ACLs)

    def decode(self, frame):
        try:
            return decode_request(frame, self._table.request_classes)
        except (Truncated, TrailingBytes, UnknownRequestType, UnicodeDecodeError) as exc:
            raise RefusedRequest(f"malformed request: {exc}") from None

    def handle(self, request):
        if self._host is None:
            self._host = getattr(self.transport.getPeer(), "host", "")
        try:
            return self._table.handle(request, self.principal, self._host)
        except CloseConnection as exc:
            raise RefusedRequest(str(exc)) from exc

    def absorb(self, frames, limit: int) -> tuple[int, int, str] | None:
        """Append the Produce requests at the front of ``frames`` as one message set when they
        name one partition and pass whole (codec/kafka07/produce_run.py, the table's
        ``append_run``); None: they go one at a time. Not under ACLs, which check each."""
        if self._table.authorization is not None:
            return None
        run = produce_run(frames, limit, self._table.max_message_size, self._table.run_target)
        if run is None:
            return None
        appended = self._table.append_run(*run)
        return (appended, *_PRODUCE_RUN) if appended else None

    def describe(self, request) -> tuple[int, str]:
        return _DESCRIPTIONS[type(request)]

    def hold(self, request, resume):
        if not self._fetch_wait_s:
            return None
        return self._table.hold_fetch(request, resume, wait_s=self._fetch_wait_s, clock=self._clock)


class KafkaServerFactory(ConnectionFactory):
    """Builds the connections of the 0.7 port; they share one RequestBudget."""

    protocol = KafkaServerProtocol
