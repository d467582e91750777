"""The endpoints of the listeners of today's clients and of the 0.7 port: TCP or TLS (from
Kafka's PEM settings, docs/security.md, "Configuration keys"); ``BoundEndpoint``, which
remembers the port bound; and the TLS a follower connects to its leader's 0.7 port with
(``security.inter.broker.protocol=SSL``, docs/security.md, "Brokers' own identity").

Each PEM setting is inline PEM or a file's path. Inline PEM in a .properties file is usually
written with ``\\`` line continuations, which join its lines (Kafka's PEM reader allows that
too): the blocks are found by their BEGIN/END lines and their base64 rewrapped.
"""

from __future__ import annotations

import re
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from OpenSSL import crypto
from twisted.internet.endpoints import SSL4ServerEndpoint, TCP4ServerEndpoint, serverFromString
from twisted.internet.interfaces import IStreamServerEndpoint
from twisted.internet.ssl import (
    Certificate, CertificateOptions, PrivateCertificate, optionsForClientTLS, trustRootFromCertificates,
)
from zope.interface import implementer

from twisted_broker.security.endpoint_exposure import parse_endpoint, requires_client_certificates
from twisted_broker.security.listeners import SSL, ListenerSpec

_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)


def pem_blocks(setting: str) -> list[bytes]:
    """The PEM blocks of a setting (inline, or the file it names), each rewrapped. Raises
    ValueError when there is none, OSError for a file that cannot be read."""
    text = setting if "-----BEGIN" in setting else Path(setting).read_text()
    blocks = []
    for kind, body in _BLOCK.findall(text):
        data = re.sub(r"\s+", "", body)
        lines = [data[i:i + 64] for i in range(0, len(data), 64)]
        blocks.append("\n".join([f"-----BEGIN {kind}-----", *lines, f"-----END {kind}-----", ""]).encode())
    if not blocks:
        raise ValueError("no PEM block in it")
    return blocks


def server_tls_options(spec: ListenerSpec, *, certificate_chain: str, key: str, truststore: str | None,
                       client_auth: str) -> CertificateOptions:
    """TLS options of a listener: the broker's certificate (then its chain) and key; with
    ``client_auth`` requested or required, client certificates checked against the truststore.
    As Kafka, ssl.client.auth applies to SSL listeners only (SASL_SSL asks no certificate)."""
    client_auth = client_auth if spec.security_protocol == SSL else "none"
    chain = [x509.load_pem_x509_certificate(block) for block in pem_blocks(certificate_chain)]
    private_key = load_pem_private_key(b"".join(pem_blocks(key)), password=None)
    verify = client_auth in ("requested", "required")
    ca_certs = [crypto.X509.from_cryptography(x509.load_pem_x509_certificate(block))
                for block in pem_blocks(truststore)] if verify else None
    return CertificateOptions(
        privateKey=crypto.PKey.from_cryptography_key(private_key),
        certificate=crypto.X509.from_cryptography(chain[0]),
        extraCertChain=[crypto.X509.from_cryptography(c) for c in chain[1:]],
        verify=verify, caCerts=ca_certs, requireCertificate=client_auth == "required")


def client_tls_for(*, certificate_chain: str, key: str, truststore: str):
    """``host -> client TLS options``: the leader's certificate must be signed by a CA of the
    truststore and name ``host`` (the address it registered, Kafka's
    ``ssl.endpoint.identification.algorithm=https``); the broker shows its own certificate
    (``ssl.keystore.*``) as the client's. Raises ValueError/OSError for unreadable PEM."""
    chain = pem_blocks(certificate_chain)
    client = PrivateCertificate.loadPEM(chain[0] + b"".join(pem_blocks(key)))
    trust = trustRootFromCertificates([Certificate.loadPEM(block) for block in pem_blocks(truststore)])
    extra = {"extraCertChain": [crypto.X509.from_cryptography(x509.load_pem_x509_certificate(block))
                                for block in chain[1:]]}
    return lambda host: optionsForClientTLS(host, trustRoot=trust, clientCertificate=client,
                                            extraCertificateOptions=extra)


def listener_endpoint(reactor, spec: ListenerSpec, *, backlog: int, tls: CertificateOptions | None):
    """The server endpoint of one listener: TCP, or TLS with ``tls``; an empty host binds
    every interface (Twisted's TCP ports take an IPv6 interface too)."""
    if tls is not None:
        return SSL4ServerEndpoint(reactor, spec.port, tls, backlog=backlog, interface=spec.host)
    return TCP4ServerEndpoint(reactor, spec.port, backlog=backlog, interface=spec.host)


def server_endpoint(reactor, description: str):
    """``serverFromString``, except that an ``ssl:`` endpoint with ``caCertsDir=`` requires
    client certificates signed by the CA certificates (``*.pem``, ``*.crt``) in that
    directory: Twisted's own ssl server parser knows no ``caCertsDir`` (only its clients do).
    The other keys are Twisted's: ``privateKey``, ``certKey`` (default: privateKey),
    ``interface``, ``backlog``. Raises ValueError or OSError for bad key material."""
    if not requires_client_certificates(description):
        return serverFromString(reactor, description)
    endpoint = parse_endpoint(description)
    options = endpoint.options
    if not endpoint.args or "privateKey" not in options:
        raise ValueError("an ssl: endpoint needs a port and privateKey=")
    key_blocks = [b for b in pem_blocks(options["privateKey"]) if not b.startswith(b"-----BEGIN CERTIFICATE")]
    certificates = [b for b in pem_blocks(options.get("certKey", options["privateKey"]))
                    if b.startswith(b"-----BEGIN CERTIFICATE")]
    if not key_blocks or not certificates:
        raise ValueError("privateKey= (and certKey=, if apart) must hold the key and the certificate")
    key = load_pem_private_key(key_blocks[0], password=None)
    certificate = x509.load_pem_x509_certificate(certificates[0])
    ca_dir = Path(options["caCertsDir"])
    ca_certs = [crypto.X509.from_cryptography(x509.load_pem_x509_certificate(block))
                for path in sorted(ca_dir.iterdir()) if path.suffix in (".pem", ".crt")
                for block in pem_blocks(str(path)) if b"CERTIFICATE" in block.split(b"\n", 1)[0]]
    if not ca_certs:
        raise ValueError(f"caCertsDir={ca_dir}: no CA certificate (*.pem, *.crt) in it")
    tls = CertificateOptions(privateKey=crypto.PKey.from_cryptography_key(key),
                             certificate=crypto.X509.from_cryptography(certificate),
                             verify=True, caCerts=ca_certs, requireCertificate=True)
    return SSL4ServerEndpoint(reactor, int(endpoint.args[0]), tls, backlog=int(options.get("backlog", 50)),
                              interface=options.get("interface", ""))


@implementer(IStreamServerEndpoint)
class BoundEndpoint:
    """An endpoint that remembers the port it listened on: ``port()`` is what a modern
    listener advertises (the one bound, also when the endpoint asked for port 0)."""

    def __init__(self, endpoint) -> None:
        self._endpoint = endpoint
        self._port = None

    def listen(self, factory):
        def bound(port):
            self._port = port
            return port
        return self._endpoint.listen(factory).addCallback(bound)

    def port(self) -> int:
        return self._port.getHost().port
