"""SaslHandshake (17) and SaslAuthenticate (36): the answers of a SASL listener's connections
before they are authenticated, and the table's answers once they are (docs/security.md).

``SaslSession`` is one connection's exchange: the network's SASL connection (network/sasl_gate.py)
hands it each SASL request until the session says it is authenticated, and acts on its
``SaslAnswer`` (write the body; set the principal; close, after the failed-login delay when
``failed_login``). The rules are security/sasl.py's state machine; this module turns its
verdicts into Kafka's response bodies and error codes.

``SaslRequests`` is the table's pair of handlers for the same APIs, reached on a listener
without SASL or after authentication: ILLEGAL_SASL_STATE, as Kafka's KafkaApis answers
(re-authentication, KIP-368, is not served).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from twisted_broker.codec.kafka import errors as kafka_errors
from twisted_broker.codec.kafka.api_keys import SASL_HANDSHAKE
from twisted_broker.codec.kafka.protocol import Request
from twisted_broker.security.sasl import Credentials, SaslServer, SaslState, SaslVerdict

_AUTHENTICATE_ERRORS = {SaslVerdict.REFUSED: kafka_errors.SASL_AUTHENTICATION_FAILED,
                        SaslVerdict.ILLEGAL: kafka_errors.ILLEGAL_SASL_STATE}
_HANDSHAKE_ERRORS = {SaslVerdict.OK: kafka_errors.NONE, SaslVerdict.UNSUPPORTED: kafka_errors.UNSUPPORTED_SASL_MECHANISM,
                     SaslVerdict.ILLEGAL: kafka_errors.ILLEGAL_SASL_STATE}


@dataclass(frozen=True, slots=True)
class SaslAnswer:
    body: dict
    principal: str | None = None  # set: authenticated as this principal
    close: bool = False  # close the connection once the body is written
    failed_login: bool = False  # a failed authentication: count it, delay the close
    reason: str = ""  # for the log line


class SaslSession:
    """One connection's SASL exchange over Kafka requests."""

    def __init__(self, server: SaslServer) -> None:
        self._server = server

    @property
    def authenticated(self) -> bool:
        return self._server.state is SaslState.AUTHENTICATED

    @property
    def mechanism(self) -> str | None:
        return self._server.mechanism

    def answer(self, request: Request) -> SaslAnswer:
        """The answer to a SaslHandshake or SaslAuthenticate request of this connection."""
        if request.api_key == SASL_HANDSHAKE:
            step = self._server.handshake(request.api_version, request.body["mechanism"])
            return SaslAnswer({"error_code": _HANDSHAKE_ERRORS[step.verdict], "mechanisms": list(self._server.enabled)},
                              close=step.verdict is SaslVerdict.ILLEGAL, reason=step.reason)
        step = self._server.authenticate(bytes(request.body["auth_bytes"]))
        error = _AUTHENTICATE_ERRORS.get(step.verdict, kafka_errors.NONE)
        body = {"error_code": error, "error_message": step.reason or None, "auth_bytes": step.token,
                "session_lifetime_ms": 0}
        return SaslAnswer(body, principal=step.principal, close=error != kafka_errors.NONE,
                          failed_login=step.verdict is SaslVerdict.REFUSED, reason=step.reason)


def sasl_sessions(*, enabled: tuple[str, ...], credentials: Credentials,
                  decoy_secret: bytes) -> Callable[[], SaslSession]:
    """What a SASL listener's connections call to start their exchange."""
    return lambda: SaslSession(SaslServer(enabled=enabled, credentials=credentials, decoy_secret=decoy_secret))


class SaslRequests:
    """The table's SASL handlers: an exchange here is out of place (ILLEGAL_SASL_STATE)."""

    def __init__(self, enabled: tuple[str, ...]) -> None:
        self._enabled = list(enabled)

    def handshake(self, request: Request) -> dict:
        return {"error_code": kafka_errors.ILLEGAL_SASL_STATE, "mechanisms": self._enabled}

    def authenticate(self, request: Request) -> dict:
        return {"error_code": kafka_errors.ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime_ms": 0,
                "error_message": "SaslAuthenticate is out of place: not a SASL listener, or already authenticated"}
