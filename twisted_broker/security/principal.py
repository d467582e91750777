"""The principal of a TLS client certificate, as Kafka's DefaultKafkaPrincipalBuilder names it:
``User:`` + the subject's distinguished name in RFC 2253 form (Java's
``X500Principal.getName()``): the RDNs most specific first (``CN=alice,OU=eng,O=corp``), the
keywords of RFC 2253, others as dotted OIDs with a hex value.

Pure: takes a ``cryptography`` certificate; no sockets.
"""

from __future__ import annotations

from cryptography import x509

def certificate_principal(certificate: x509.Certificate) -> str:
    """``User:<subject DN, RFC 2253>`` of a client certificate."""
    return "User:" + certificate.subject.rfc4514_string()
