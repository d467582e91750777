"""The console's sessions: a signed cookie (itsdangerous), logouts remembered until expiry.

The cookie holds ``{"u": user, "s": session id, "t": credential tag}``, signed with a key
derived from the console's secret, with the time it was made (docs/security.md, "The
console"). It is refused when its signature does not verify (tampered, or made by another
secret), when it is older than ``max_age_s``, or when its id was logged out. The credential
tag is a digest of the user's stored SCRAM credentials: a new password (or a deleted user)
makes every older session's tag stale, which the login gate checks on each request.

No I/O; time comes from ``clock.seconds()`` (the reactor, or a task.Clock in tests).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, TimestampSigner, URLSafeTimedSerializer

from twisted_broker.security.scram import SCRAM_HASHES

SESSION_COOKIE = b"tb_console_session"
DEFAULT_SESSION_HOURS = 8.0


@dataclass(frozen=True)
class Session:
    user: str
    session_id: str
    credential_tag: str
    issued_s: int


def credential_tag(lookup, user: str) -> str | None:
    """A digest of ``user``'s stored credentials (``lookup(mechanism, user)``), or None for a
    user without any."""
    texts = [credential.to_text() if (credential := lookup(mechanism, user)) is not None else ""
             for mechanism in SCRAM_HASHES]
    if not any(texts):
        return None
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()[:32]


class _ClockedSigner(TimestampSigner):
    """itsdangerous' timestamp signer on the console's clock, not the wall's."""

    def __init__(self, *args, clock, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._clock = clock

    def get_timestamp(self) -> int:
        return int(self._clock.seconds())


class SessionSigner:
    """Makes and reads session cookies. ``secret``: random per process unless given (a
    ``--session-secret-file``, so that sessions outlive a restart)."""

    def __init__(self, *, clock, max_age_s: float = DEFAULT_SESSION_HOURS * 3600, secret: bytes | None = None) -> None:
        self.max_age_s = max_age_s
        self._clock = clock
        self._serializer = URLSafeTimedSerializer(secret or secrets.token_bytes(32), salt="tb-console-session",
                                                  signer=_ClockedSigner, signer_kwargs={"clock": clock})
        self._revoked: dict[str, float] = {}  # session id -> when it would expire anyway

    def issue(self, user: str, tag: str) -> tuple[str, Session]:
        """A new session's cookie value and the session."""
        session_id = secrets.token_urlsafe(16)
        value = self._serializer.dumps({"u": user, "s": session_id, "t": tag})
        return value, Session(user, session_id, tag, int(self._clock.seconds()))

    def read(self, value: bytes | str | None) -> Session | None:
        """The session a cookie value carries; None if absent, tampered, expired or logged out."""
        if not value:
            return None
        try:
            data, issued = self._serializer.loads(value, max_age=int(self.max_age_s), return_timestamp=True)
        except BadSignature:  # SignatureExpired is one too
            return None
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in "ust"):
            return None
        if data["s"] in self._revoked:
            return None
        return Session(data["u"], data["s"], data["t"], int(issued.timestamp()))

    def revoke(self, session: Session) -> None:
        """Log ``session`` out: refused from now until it would have expired anyway."""
        now = self._clock.seconds()
        self._revoked = {sid: until for sid, until in self._revoked.items() if until > now}
        self._revoked[session.session_id] = session.issued_s + self.max_age_s + 1
