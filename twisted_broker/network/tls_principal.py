"""The principal of a connection whose peer showed a TLS client certificate (docs/security.md).

Mixed into both protocols' connections (kafka07.py, kafka.py): Twisted's TLS transport calls
``handshakeCompleted`` on a protocol that provides IHandshakeListener once the handshake is
done, before any request is read; over plain TCP it is never called and the principal stays
``User:ANONYMOUS``. A listener that does not ask for certificates gets none.
"""

from __future__ import annotations

from twisted.internet.interfaces import IHandshakeListener
from zope.interface import implementer

from twisted_broker.security.principal import certificate_principal


@implementer(IHandshakeListener)
class CertificatePrincipal:
    """Sets ``self.principal`` from the peer's certificate subject, when it sent one."""

    principal: str

    def handshakeCompleted(self) -> None:
        certificate = self.transport.getPeerCertificate()
        if certificate is not None:
            self.principal = certificate_principal(certificate.to_cryptography())
