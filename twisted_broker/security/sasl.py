"""One connection's SASL exchange as a state machine (docs/security.md, "The SASL exchange").

How this works: the connection feeds it two kinds of event, a SaslHandshake (its version and
mechanism) and a SaslAuthenticate (its token), and it answers with a ``SaslStep``: a verdict
and the token to send back. It holds no socket and no clock; the caller turns the verdict into
Kafka's error codes, the close and its delay.

```
START --handshake v1, enabled mechanism--> HANDSHAKEN --PLAIN token ok--> AUTHENTICATED
  |  (unknown mechanism: UNSUPPORTED,              |--SCRAM client-first--> SCRAM_FIRST
  |   stays START; the client may ask again)       |                          |
  |                                                 |        client-final ok--+--> AUTHENTICATED
  +--anything out of order: ILLEGAL ---------------> FAILED <--bad token or credentials: REFUSED
```

REFUSED is the one verdict of a failed login (wrong password, unknown user, wrong nonce or
proof, a token that does not parse): the same reason text whatever the cause, so an answer
never tells a user name that exists from one that does not, nor which part was wrong. ILLEGAL
is an exchange out of order (Kafka's ILLEGAL_SASL_STATE). Either ends in FAILED, where every
event is ILLEGAL. Pure and synchronous: the credentials are looked up in a cache the caller
keeps (``credentials(mechanism, user)``), never in ZooKeeper while a login waits.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from scramp import ScramException, ScramMechanism

from twisted_broker.security.scram import (
    MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential, decoy_credential,
    verify_password,
)

SASL_PLAIN = "PLAIN"
MECHANISMS = (SASL_PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
# scramp's message checks refuse absurd input anyway; this bounds what a token may cost us
# (a UTF-8 decode, a split) before they run.
MAX_TOKEN_BYTES = 16384


class SaslState(enum.Enum):
    START = "start"
    HANDSHAKEN = "handshaken"
    SCRAM_FIRST = "scram-first"  # server-first sent, client-final awaited
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class SaslVerdict(enum.Enum):
    OK = "ok"  # the handshake is accepted, or a round goes on (``token`` is the server's)
    AUTHENTICATED = "authenticated"  # ``principal`` is who logged in; ``token`` the last one
    UNSUPPORTED = "unsupported"  # a mechanism not enabled: answer with the list, state unchanged
    REFUSED = "refused"  # a failed login: answer, count it, delay, close
    ILLEGAL = "illegal"  # out of order: answer, close


@dataclass(frozen=True, slots=True)
class SaslStep:
    verdict: SaslVerdict
    token: bytes = b""
    reason: str = ""  # for the client (REFUSED: never says which part was wrong) and the log
    principal: str | None = None


Credentials = Callable[[str, str], "ScramCredential | None"]  # (mechanism, user) -> credential


class SaslServer:
    """The server side of one connection's SASL exchange. ``enabled``: the mechanisms
    offered; ``credentials(mechanism, user)``: the stored credential or None; ``decoy_secret``:
    the process's secret for unknown users' decoy credentials (security/scram.py)."""

    def __init__(self, *, enabled: tuple[str, ...], credentials: Credentials, decoy_secret: bytes) -> None:
        self.enabled = tuple(m for m in enabled if m in MECHANISMS)
        self.state = SaslState.START
        self.mechanism: str | None = None
        self.principal: str | None = None
        self._credentials = credentials
        self._decoy_secret = decoy_secret
        self._scram = None  # scramp's ScramServer during a SCRAM exchange
        self._scram_user: str | None = None

    # -- events -------------------------------------------------------------------------------

    def handshake(self, version: int, mechanism: str) -> SaslStep:
        """A SaslHandshake of ``version`` asking for ``mechanism``."""
        if self.state is not SaslState.START:
            return self._illegal(f"SaslHandshake in state {self.state.value}")
        if version < 1:
            return self._illegal("SaslHandshake v0 (raw SASL tokens after it) is not served: use v1")
        if mechanism not in self.enabled:
            return SaslStep(SaslVerdict.UNSUPPORTED, reason=f"SASL mechanism {mechanism!r} is not enabled")
        self.state, self.mechanism = SaslState.HANDSHAKEN, mechanism
        return SaslStep(SaslVerdict.OK)

    def authenticate(self, token: bytes) -> SaslStep:
        """A SaslAuthenticate carrying ``token``."""
        if self.state is SaslState.HANDSHAKEN and self.mechanism == SASL_PLAIN:
            return self._plain(token)
        if self.state is SaslState.HANDSHAKEN:
            return self._scram_first(token)
        if self.state is SaslState.SCRAM_FIRST:
            return self._scram_final(token)
        return self._illegal(f"SaslAuthenticate in state {self.state.value}")

    # -- PLAIN (RFC 4616) ----------------------------------------------------------------------------

    def _plain(self, token: bytes) -> SaslStep:
        parts = token.split(b"\0") if len(token) <= MAX_TOKEN_BYTES else []
        if len(parts) != 3:
            return self._refused()
        authzid, authcid, password = parts
        try:
            user = authcid.decode("utf-8")
        except UnicodeDecodeError:
            return self._refused()
        if not user or (authzid and authzid != authcid):
            return self._refused()
        if not verify_password(self._credentials, user, password, self._decoy_secret):
            return self._refused()
        return self._authenticated(user, b"")

    # -- SCRAM (RFC 5802) ---------------------------------------------------------------------

    def _scram_first(self, token: bytes) -> SaslStep:
        text = _text(token)
        if text is None:
            return self._refused()
        self._scram = ScramMechanism(self.mechanism).make_server(self._lookup)
        try:
            self._scram.set_client_first(text)
            server_first = self._scram.get_server_first()
        except ScramException:
            return self._refused()
        self.state = SaslState.SCRAM_FIRST
        return SaslStep(SaslVerdict.OK, server_first.encode("utf-8"))

    def _scram_final(self, token: bytes) -> SaslStep:
        text = _text(token)
        if text is None:
            return self._refused()
        try:
            self._scram.set_client_final(text)  # checks the nonce and the proof
            server_final = self._scram.get_server_final()
        except ScramException:
            return self._refused()
        return self._authenticated(self._scram_user, server_final.encode("utf-8"))

    def _lookup(self, sasl_name: str) -> tuple[bytes, bytes, bytes, int]:
        """scramp's auth_fn: the credential of the user in client-first (a decoy if none)."""
        # saslname escapes (RFC 5802 §5.1), as Kafka's ScramFormatter.username undoes them.
        user = sasl_name.replace("=2C", ",").replace("=3D", "=")
        self._scram_user = user
        credential = self._credentials(self.mechanism, user)
        # A credential outside Kafka's iteration bounds (written by hand) logs nobody in: it
        # would make scramp raise, or one login cost unbounded work.
        if credential is None or not MIN_ITERATIONS <= credential.iterations <= MAX_ITERATIONS:
            credential = decoy_credential(self.mechanism, user, self._decoy_secret)
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    # -- outcomes -------------------------------------------------------------------------------

    def _authenticated(self, user: str, token: bytes) -> SaslStep:
        self.state, self.principal, self._scram = SaslState.AUTHENTICATED, f"User:{user}", None
        return SaslStep(SaslVerdict.AUTHENTICATED, token, principal=self.principal)

    def _refused(self) -> SaslStep:
        self.state, self._scram = SaslState.FAILED, None
        return SaslStep(SaslVerdict.REFUSED,
                        reason=f"Authentication failed: invalid credentials with SASL mechanism {self.mechanism}")

    def _illegal(self, reason: str) -> SaslStep:
        self.state, self._scram = SaslState.FAILED, None
        return SaslStep(SaslVerdict.ILLEGAL, reason=reason)


def _text(token: bytes) -> str | None:
    if len(token) > MAX_TOKEN_BYTES:
        return None
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        return None
