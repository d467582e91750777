"""The connection of a SASL listener (SASL_PLAINTEXT, SASL_SSL): nothing is served before the
peer has authenticated (docs/security.md, "The SASL exchange").

Until its session (handlers/kafka/sasl.py's SaslSession, made per connection by the
``sasl_sessions`` callable tap.py gives the factory) says it is authenticated, the connection
answers ApiVersions through the table, hands SaslHandshake and SaslAuthenticate to the
session, and closes on anything else with one WARNING naming the peer, as Kafka does. Once
authenticated, its principal is the session's and every request goes to the table.

A failed login: the answer (SASL_AUTHENTICATION_FAILED) is written, the connection is muted
(what arrives after it is dropped unanswered), counted in the listeners' figures
(``failed_authentications``) and logged once, naming the peer; it closes after
``failed_authentication_delay_ms``. The delay is a timer, not a wait: other connections are
served meanwhile, however many logins fail.
"""

from __future__ import annotations

import logging

from twisted_broker.codec.kafka.api_keys import API_NAMES, API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from twisted_broker.codec.kafka.protocol import Request, encode_response_pieces
from twisted_broker.network.connection import RefusedRequest
from twisted_broker.network.connection_factory import ConnectionFactory
from twisted_broker.network.kafka import KafkaModernProtocol

log = logging.getLogger(__name__)


class SaslKafkaProtocol(KafkaModernProtocol):
    """A modern connection that must authenticate over SASL first."""

    def __init__(self, table, *, sasl_sessions, failed_authentication_delay_ms: int = 100, clock=None,
                 **options) -> None:
        super().__init__(table, clock=clock, **options)
        self._session = sasl_sessions()
        self._delay_s = failed_authentication_delay_ms / 1000
        self._reactor = clock
        self._muted = False
        self._close_timer = None

    def handle(self, request: Request):
        if self._muted:
            return []  # after a failed exchange: nothing more is answered
        if self._session.authenticated or request.api_key == API_VERSIONS:
            return super().handle(request)
        if request.api_key not in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            raise RefusedRequest(f"{API_NAMES.get(request.api_key, request.api_key)} before SASL authentication")
        answer = self._session.answer(request)
        if answer.principal is not None:
            self.principal = answer.principal
        if answer.close:
            self._close_after(answer)
        return encode_response_pieces(request, answer.body)

    def _close_after(self, answer) -> None:
        self._muted = True
        if answer.failed_login:
            self._stats.failed_authentications += 1
            log.warning("authentication failed from %s (SASL mechanism %s); closing in %d ms", self._peer(),
                        self._session.mechanism, round(self._delay_s * 1000))
        else:
            log.warning("closing connection from %s: %s", self._peer(), answer.reason)
        delay_s = self._delay_s if answer.failed_login else 0.0
        if self._reactor is None:  # no clock (unit tests on a StringTransport): close once written
            self.transport.loseConnection()
        else:
            self._close_timer = self._reactor.callLater(delay_s, self.transport.loseConnection)

    def connectionLost(self, reason=None) -> None:
        if self._close_timer is not None and self._close_timer.active():
            self._close_timer.cancel()
        super().connectionLost(reason)


class SaslKafkaFactory(ConnectionFactory):
    """Builds the connections of a SASL listener; they share one RequestBudget."""

    protocol = SaslKafkaProtocol
