"""Schemas of the SASL APIs: SaslHandshake (17) and SaslAuthenticate (36), v0-v1 (Kafka 2.1
layouts, non-flexible encodings). Field names are Kafka's message specs' in snake case.

SaslHandshake v1 (KIP-152) means the tokens follow in SaslAuthenticate requests; v0 meant raw
tokens with no Kafka header, which this broker does not serve (docs/security.md).
"""

from __future__ import annotations

from twisted_broker.codec.kafka.api_keys import SASL_AUTHENTICATE, SASL_HANDSHAKE
from twisted_broker.codec.kafka.primitives import BYTES, INT16_T, INT64_T, NULLABLE_STRING, STRING, Array
from twisted_broker.codec.kafka.schema import Schema

REQUESTS: dict[tuple[int, int], Schema] = {}
RESPONSES: dict[tuple[int, int], Schema] = {}

# -- SaslHandshake (17) -----------------------------------------------------------------------
_HANDSHAKE_REQUEST = Schema(("mechanism", STRING))
_HANDSHAKE = Schema(("error_code", INT16_T), ("mechanisms", Array(STRING)))
for _v in range(2):
    REQUESTS[SASL_HANDSHAKE, _v], RESPONSES[SASL_HANDSHAKE, _v] = _HANDSHAKE_REQUEST, _HANDSHAKE

# -- SaslAuthenticate (36) --------------------------------------------------------------------
_AUTHENTICATE_REQUEST = Schema(("auth_bytes", BYTES))
_AUTHENTICATE_V0 = Schema(("error_code", INT16_T), ("error_message", NULLABLE_STRING), ("auth_bytes", BYTES))
# v1 (KIP-368): how long the session lasts before the client must authenticate again; 0: for ever.
_AUTHENTICATE_V1 = _AUTHENTICATE_V0.evolve(add=[("session_lifetime_ms", INT64_T, 0)])
REQUESTS[SASL_AUTHENTICATE, 0], RESPONSES[SASL_AUTHENTICATE, 0] = _AUTHENTICATE_REQUEST, _AUTHENTICATE_V0
REQUESTS[SASL_AUTHENTICATE, 1], RESPONSES[SASL_AUTHENTICATE, 1] = _AUTHENTICATE_REQUEST, _AUTHENTICATE_V1
