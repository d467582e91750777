"""Encrypted transport: the broker on Twisted's ``ssl:`` endpoint, both clients over TLS.

The certificate is self-signed, made here with ``cryptography`` (which Twisted's TLS extra
brings). Under TLS the zero-copy path cannot be used (the bytes need encrypting): fetches take
the chunked producer, which must deliver the same bytes, in order, and keep a consumer that
does not read from making the broker buffer without bound.
"""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import time

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.ssl import Certificate, optionsForClientTLS
from twisted.internet.task import deferLater

from tests.support.faults.oracle import walk
from tests.support.reliability import record, rss_mib
from tests.support.spec_encoding import fetch, message_set_of, offsets, produce
from twisted_broker.client.connection import BrokerConnection
from twisted_broker.client.twisted_client import TwistedProducer, TwistedSimpleConsumer
from twisted_broker.codec.kafka07.requests import FetchRequest


@pytest.fixture
def tls_broker(brokers, certificate):
    key, cert = certificate
    listen = f"ssl:0:privateKey={key}:certKey={cert}:interface=127.0.0.1"
    return brokers(extra_args=["--listen", listen], properties={"log.file.size": str(64 << 20)}).start()


def client_context(cert) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


def test_blocking_client_over_tls_produces_and_fetches_through_the_chunked_path(tls_broker, certificate,
                                                                                 request, caplog):
    _key, cert = certificate
    batches = [message_set_of(*(bytes([i % 251]) * 1000 + b"%d" % j for j in range(1000))) for i in range(20)]
    log = b"".join(batches)  # 20 MB: many 1 MiB chunks per fetch
    connection = BrokerConnection("localhost", tls_broker.port, ssl_context=client_context(cert))
    with caplog.at_level(logging.INFO, logger="twisted_broker.client.connection"), connection:
        for batch in batches:
            connection.send(produce("tls", 0, batch))
        deadline = time.monotonic() + 20
        while True:
            error, body = connection.request(offsets("tls", 0, -1, 1))
            if struct.unpack_from(">q", body, 4)[0] >= len(log) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert struct.unpack_from(">q", body, 4)[0] == len(log)
        fetched = bytearray()
        while len(fetched) < len(log):
            error, body = connection.request(fetch("tls", 0, len(fetched), 8 << 20))
            assert error == 0
            valid = walk(bytes(body))[1]
            assert valid
            fetched += body[:valid]
        assert bytes(fetched) == log
    # One connection throughout: no spurious "broker closed the connection" on TLS housekeeping.
    assert not [r for r in caplog.records if "closed the connection" in r.getMessage()]
    record(request, cases_tried=len(batches) + 3, messages_checked=len(walk(log)[0]))


def test_plain_tcp_to_the_tls_port_gets_no_kafka_answer(tls_broker):
    with socket.create_connection(("127.0.0.1", tls_broker.port), timeout=5) as sock:
        sock.sendall(fetch("tls", 0, 0, 1024))
        answer = b""
        try:
            while chunk := sock.recv(4096):
                answer += chunk
        except (ConnectionError, socket.timeout):
            pass
    assert not answer.startswith(struct.pack(">ih", 2, 0))
    assert tls_broker.process.poll() is None


def test_tls_consumers_that_do_not_read_hold_bounded_memory(tls_broker, certificate, request):
    _key, cert = certificate
    with BrokerConnection("localhost", tls_broker.port, ssl_context=client_context(cert)) as connection:
        for i in range(8):
            connection.send(produce("slow", 0, message_set_of(*[bytes([i]) * 4000] * 1000)))
        while struct.unpack_from(">q", connection.request(offsets("slow", 0, -1, 1))[1], 4)[0] < 8 * 4010 * 1000:
            time.sleep(0.02)
    pid = tls_broker.process.pid
    before = rss_mib(pid)
    context = client_context(cert)
    slow = []
    for _ in range(20):
        sock = context.wrap_socket(socket.create_connection(("127.0.0.1", tls_broker.port)),
                                   server_hostname="localhost")
        sock.sendall(fetch("slow", 0, 0, 32 << 20) * 4)  # 128 MB of responses, never read
        slow.append(sock)
    time.sleep(2)
    peak = rss_mib(pid)
    for sock in slow:
        sock.close()
    assert tls_broker.process.poll() is None
    assert peak - before < 150, (before, peak)  # about two 1 MiB chunks per connection
    record(request, connections_held=len(slow))


@pytest_twisted.inlineCallbacks
def test_twisted_clients_over_tls(tls_broker, certificate, request):
    _key, cert = certificate
    tls = optionsForClientTLS("localhost", trustRoot=Certificate.loadPEM(cert.read_bytes()))
    producer = yield TwistedProducer.connect(reactor, "127.0.0.1", tls_broker.port, tls=tls)
    consumer = yield TwistedSimpleConsumer.connect(reactor, "127.0.0.1", tls_broker.port,
                                                   socket_timeout_ms=10000, tls=tls)
    try:
        payloads = [b"over tls %d" % i * 100 for i in range(500)]
        yield producer.send("tw-tls", 0, payloads)
        end = len(message_set_of(*payloads))
        for _ in range(500):
            latest = yield consumer.get_offsets_before("tw-tls", 0, -1, 1)
            if latest == [end]:
                break
            yield deferLater(reactor, 0.02, lambda: None)
        fetched = yield consumer.fetch(FetchRequest("tw-tls", 0, 0, 1 << 20))
        assert [bytes(m.payload) for _o, _n, m in fetched] == payloads
    finally:
        yield producer.close()
        yield consumer.close()
    record(request, cases_tried=2, messages_checked=len(payloads))
