"""network/connection_limits.py and the factory's use of it: max.connections.per.ip."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from twisted_broker.network.connection_factory import RefusedConnection
from twisted_broker.network.connection_limits import ConnectionLimits
from twisted_broker.network.kafka import KafkaModernFactory, KafkaModernProtocol
from twisted_broker.server.stats import RequestStats


def test_an_address_may_open_up_to_its_limit_and_again_once_one_closes():
    limits = ConnectionLimits(2, {"10.0.0.9": 0})
    for _ in range(2):
        assert limits.admit("10.0.0.1")
        limits.opened("10.0.0.1")
    assert not limits.admit("10.0.0.1")
    assert limits.admit("10.0.0.2")  # another address: its own count
    assert not limits.admit("10.0.0.9")  # an override
    limits.closed("10.0.0.1")
    assert limits.admit("10.0.0.1")
    assert limits.refused == 2


def test_refusals_are_logged_once_a_minute_per_address_with_the_count_unlogged():
    limits = ConnectionLimits(1, {})
    assert limits.warning_due("a", 0.0) == 0
    assert [limits.warning_due("a", t) for t in (1.0, 2.0, 30.0)] == [None, None, None]
    assert limits.warning_due("b", 2.0) == 0
    assert limits.warning_due("a", 61.0) == 3


def connect(factory, host: str, port: int):
    transport = StringTransport(peerAddress=IPv4Address("TCP", host, port))
    protocol = factory.buildProtocol(IPv4Address("TCP", host, port))
    protocol.makeConnection(transport)
    return protocol, transport


def test_the_connection_over_the_limit_is_closed_at_once_with_one_warning(caplog):
    clock = Clock()
    table = SimpleNamespace(handlers={}, stats=SimpleNamespace(requests=RequestStats(60, clock.seconds)))
    factory = KafkaModernFactory(table, clock=clock, limits=ConnectionLimits(2, {}))
    served = [connect(factory, "127.0.0.1", port) for port in (1, 2)]
    with caplog.at_level(logging.WARNING):
        refused = [connect(factory, "127.0.0.1", port) for port in (3, 4, 5)]
    assert all(isinstance(p, KafkaModernProtocol) and not t.disconnecting for p, t in served)
    assert all(isinstance(p, RefusedConnection) and t.disconnecting for p, t in refused)
    assert [r.getMessage() for r in caplog.records] == [
        "closing connection from 127.0.0.1: over max.connections.per.ip (2)"]
    served[0][0].connectionLost(None)
    again, transport = connect(factory, "127.0.0.1", 6)
    assert isinstance(again, KafkaModernProtocol) and not transport.disconnecting
