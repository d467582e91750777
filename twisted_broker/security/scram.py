"""SCRAM credentials (RFC 5802/7677) as Kafka stores them, and the checks a login needs.

A credential is what the server keeps instead of the password: ``salt``, ``iterations``,
``stored_key = H(HMAC(SaltedPassword, "Client Key"))`` and ``server_key = HMAC(SaltedPassword,
"Server Key")`` with ``SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)``. Its text
form is Kafka's ``ScramCredentialUtils.credentialToString``:
``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``. As Kafka's ScramFormatter, the
password is its UTF-8 bytes (no SASLprep).

Pure: hashlib and hmac only; raises ValueError for text that is not a credential.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass

SCRAM_SHA_256, SCRAM_SHA_512 = "SCRAM-SHA-256", "SCRAM-SHA-512"
SCRAM_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
DEFAULT_ITERATIONS = 4096  # Kafka's kafka-configs default, and RFC 7677's minimum
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations (scramp refuses fewer too)
MAX_ITERATIONS = 16384  # Kafka's maxIterations: a bound on the work one login costs the broker
SALT_BYTES = 32


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's text form of the credential."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> "ScramCredential":
        """Parse Kafka's text form. Raises ValueError naming what is missing or wrong."""
        fields = {}
        for item in text.split(","):
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"SCRAM credential item {item!r} is not key=value")
            fields[key.strip()] = value.strip()
        try:
            iterations = int(fields["iterations"])
            return cls(_unb64(fields["salt"]), _unb64(fields["stored_key"]), _unb64(fields["server_key"]),
                       iterations)
        except KeyError as exc:
            raise ValueError(f"SCRAM credential lacks {exc.args[0]}") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"not base64: {exc}") from None


def _keys(mechanism: str, password: bytes, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """``(stored_key, server_key)`` of a password."""
    name = SCRAM_HASHES[mechanism]
    salted = hashlib.pbkdf2_hmac(name, password, salt, iterations)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return hashlib.new(name, client_key).digest(), hmac.new(salted, b"Server Key", name).digest()


def make_credential(mechanism: str, password: str, *, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """A new credential for ``password`` (a fresh random salt unless one is given). Raises
    ValueError for an unknown mechanism or iterations outside Kafka's bounds."""
    if mechanism not in SCRAM_HASHES:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (know {', '.join(SCRAM_HASHES)})")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations={iterations}: must be {MIN_ITERATIONS} to {MAX_ITERATIONS}")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    stored_key, server_key = _keys(mechanism, password.encode("utf-8"), salt, iterations)
    return ScramCredential(salt, stored_key, server_key, iterations)


def password_matches(mechanism: str, credential: ScramCredential, password: bytes) -> bool:
    """Whether ``password`` derives ``credential``'s stored key (PLAIN logins), in constant
    time. A credential whose iterations are outside Kafka's bounds never matches: a value
    written by hand must not make a login cost the broker unbounded work."""
    if not MIN_ITERATIONS <= credential.iterations <= MAX_ITERATIONS:
        return False
    stored_key, _server_key = _keys(mechanism, password, credential.salt, credential.iterations)
    return hmac.compare_digest(stored_key, credential.stored_key)


def verify_password(lookup, user: str, password: bytes, decoy_secret: bytes) -> bool:
    """Whether ``password`` is ``user``'s, as a PLAIN login checks it: against the user's
    SCRAM-SHA-256 credential, else its SCRAM-SHA-512 one (``lookup(mechanism, user)`` gives
    a credential or None); a user without either is checked against a decoy, so an unknown
    user costs the same derivation as a known one and the answer tells them apart by nothing."""
    for mechanism in (SCRAM_SHA_256, SCRAM_SHA_512):
        credential = lookup(mechanism, user)
        if credential is not None:
            break
    else:
        mechanism = SCRAM_SHA_256
        credential = decoy_credential(mechanism, user, decoy_secret)
    return password_matches(mechanism, credential, password)


def decoy_credential(mechanism: str, user: str, secret: bytes) -> ScramCredential:
    """A credential for a user who does not exist, the same on every attempt (so a repeated
    salt tells nothing) and matching no password anyone knows: derived from ``user`` and a
    secret the process made at start. RFC 5802 §9 asks a server not to reveal which users
    exist; with it an unknown user's exchange fails exactly where a wrong password's does."""
    name = SCRAM_HASHES[mechanism]
    def part(label: bytes) -> bytes:
        return hmac.new(secret, label + b"\0" + mechanism.encode() + b"\0" + user.encode("utf-8", "replace"),
                        name).digest()
    return ScramCredential(part(b"salt")[:SALT_BYTES], part(b"stored"), part(b"server"), DEFAULT_ITERATIONS)
