"""Answers that replication makes wait (a Deferred of response pieces): written in request
order, and, when ready at once, without recursing once per pipelined request."""

from __future__ import annotations

from twisted.internet.defer import Deferred, succeed
from twisted.internet.testing import StringTransport

from twisted_broker.network.kafka07 import KafkaServerProtocol
from twisted_broker.handlers.kafka07.broker import Broker
from twisted_broker.server.stats import BrokerStats, RequestStats
from twisted_broker.codec.kafka07.replication import MetadataRequest, encode_replication_request


class Replication:
    """Only what Broker wires for the metadata request; each answer is ``next_answer(topic)``."""

    cluster = None

    def __init__(self, next_answer) -> None:
        self.next_answer = next_answer

    def metadata(self, request: MetadataRequest):
        return self.next_answer(request.topics[0])

    replica_fetch = epoch_end_offset = produce_ack = metadata


def connect(next_answer, logs=None) -> tuple[StringTransport, KafkaServerProtocol]:
    broker = Broker(logs, BrokerStats(RequestStats(600, lambda: 0.0)), replication=Replication(next_answer))
    transport = StringTransport()
    protocol = KafkaServerProtocol(broker, max_request_size=1 << 20)
    protocol.makeConnection(transport)
    return transport, protocol


def answer(topic: str) -> bytes:
    return b"\x00\x00\x00\x03" b"\x00\x00" + topic.encode()[:1]


def test_thousands_of_pipelined_requests_answered_at_once_do_not_recurse():
    transport, protocol = connect(lambda topic: succeed([answer(topic)]))
    requests = b"".join(encode_replication_request(MetadataRequest((f"{i % 10}",))) for i in range(5000))
    protocol.dataReceived(requests)
    assert transport.value() == b"".join(answer(f"{i % 10}") for i in range(5000))


def test_a_waiting_answer_holds_the_next_one_back_until_it_is_written():
    waiting: dict[str, Deferred] = {}
    transport, protocol = connect(lambda topic: waiting.setdefault(topic, Deferred()))
    protocol.dataReceived(encode_replication_request(MetadataRequest(("a",)))
                          + encode_replication_request(MetadataRequest(("b",))))
    assert transport.value() == b"" and list(waiting) == ["a"]
    waiting["a"].callback([answer("a")])
    assert transport.value() == answer("a") and list(waiting) == ["a", "b"]
    waiting["b"].callback([answer("b")])
    assert transport.value() == answer("a") + answer("b")


def test_a_waiting_answer_is_cancelled_when_its_connection_goes(caplog):
    # issue 22, defect 7: a follower's held fetch must not wake for a connection that is gone
    cancelled = []
    waiting: dict[str, Deferred] = {}
    transport, protocol = connect(lambda topic: waiting.setdefault(topic, Deferred(cancelled.append)))
    protocol.dataReceived(encode_replication_request(MetadataRequest(("a",))))
    protocol.connectionLost(None)
    assert cancelled == [waiting["a"]] and transport.value() == b""
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
