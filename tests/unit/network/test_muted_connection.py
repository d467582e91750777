"""network/muted_connection.py: a throttled answer leaves at once, then the connection reads
nothing and serves nothing until the throttle time is up (KIP-219), on a StringTransport."""

from __future__ import annotations

from types import SimpleNamespace

from twisted.internet.task import Clock

from tests.support.string_peer import Peer
from tests.unit.network.test_kafka import API_VERSIONS_V0
from twisted_broker.codec.kafka.api_keys import API_VERSIONS
from twisted_broker.network.kafka import KafkaModernFactory
from twisted_broker.server.stats import RequestStats


def throttled_peer(throttle_ms: int) -> tuple[Peer, Clock]:
    clock = Clock()

    def api_versions(request):
        request.throttle(throttle_ms)
        return {"error_code": 0, "api_keys": []}

    table = SimpleNamespace(handlers={API_VERSIONS: api_versions}, stats=SimpleNamespace(
        requests=RequestStats(60, clock.seconds)))
    return Peer(KafkaModernFactory(table, clock=clock)), clock


def test_the_answer_leaves_at_once_and_reading_stops_for_the_throttle_time():
    peer, clock = throttled_peer(500)
    peer.send(API_VERSIONS_V0)
    assert len(peer.responses()) == 1
    assert peer.transport.producerState == "paused"
    clock.advance(0.499)
    assert peer.transport.producerState == "paused"
    clock.advance(0.002)
    assert peer.transport.producerState == "producing"


def test_a_request_read_with_the_throttled_one_waits_until_the_time_is_up():
    peer, clock = throttled_peer(300)
    peer.send(API_VERSIONS_V0 * 2)
    assert len(peer.responses()) == 1
    clock.advance(0.299)
    assert peer.responses() == []
    clock.advance(0.002)
    assert len(peer.responses()) == 1  # then throttled again: muted for another 300 ms
    assert peer.transport.producerState == "paused"
    clock.advance(0.301)
    assert peer.transport.producerState == "producing"


def test_no_throttle_changes_nothing():
    peer, clock = throttled_peer(0)
    peer.send(API_VERSIONS_V0 * 3)
    assert len(peer.responses()) == 3
    assert peer.transport.producerState == "producing"
    assert not clock.getDelayedCalls()


def test_a_connection_lost_while_muted_leaves_no_timer():
    peer, clock = throttled_peer(1000)
    peer.send(API_VERSIONS_V0 * 2)
    peer.protocol.connectionLost(None)
    assert not [call for call in clock.getDelayedCalls() if call.active()]
