"""TwistedProducer and TwistedSimpleConsumer against a real broker, under pytest-twisted."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.error import ConnectError
from twisted.internet.task import deferLater

from twisted_broker.client.simple_consumer import EARLIEST_TIME, LATEST_TIME
from twisted_broker.client.twisted_client import TwistedProducer, TwistedSimpleConsumer
from twisted_broker.errors import WrongPartition
from twisted_broker.codec.kafka07.compression import GZIP, SNAPPY
from twisted_broker.codec.kafka07.message_set import encode_compressed_message_set, encode_message_set
from twisted_broker.codec.kafka07.requests import FetchRequest


@inlineCallbacks
def wait_for_end(consumer: TwistedSimpleConsumer, topic: str, end: int, timeout_s: float = 10.0):
    for _ in range(int(timeout_s / 0.02)):
        offsets = yield consumer.get_offsets_before(topic, 0, LATEST_TIME, 1)
        if offsets == [end]:
            return
        yield deferLater(reactor, 0.02, lambda: None)
    raise AssertionError(f"{topic} never reached offset {end}")


@pytest_twisted.inlineCallbacks
def test_produce_then_fetch_multifetch_and_offsets(broker):
    producer = yield TwistedProducer.connect(reactor, "127.0.0.1", broker.port)
    consumer = yield TwistedSimpleConsumer.connect(reactor, "127.0.0.1", broker.port, socket_timeout_ms=10000)
    try:
        # Sends are not awaited one by one: 0.7 produce has no response, the broker serves in order.
        sends = [producer.send("tw", 0, [b"a", b"b"]),
                 producer.send("tw", 0, [b"c"], codec=GZIP),
                 producer.send("tw", 0, [b"d"], codec=SNAPPY),
                 producer.multi_send([("tw-2", 0, encode_message_set([b"z"]))])]
        for d in sends:
            yield d
        end = (len(encode_message_set([b"a", b"b"])) + len(encode_compressed_message_set([b"c"], GZIP))
               + len(encode_compressed_message_set([b"d"], SNAPPY)))
        yield wait_for_end(consumer, "tw", end)
        yield wait_for_end(consumer, "tw-2", 11)

        fetched = yield consumer.fetch(FetchRequest("tw", 0, 0, 1 << 20))
        assert [bytes(m.payload) for _o, _n, m in fetched] == [b"a", b"b", b"c", b"d"]
        assert fetched.next_offset == end

        parts = yield consumer.multifetch([FetchRequest("tw-2", 0, 0, 4096), FetchRequest("tw", 9, 0, 4096)])
        assert [bytes(m.payload) for _o, _n, m in parts[0]] == [b"z"]
        with pytest.raises(WrongPartition):
            parts[1].check()

        earliest = yield consumer.get_offsets_before("tw", 0, EARLIEST_TIME, 5)
        assert earliest == [0]
    finally:
        yield producer.close()
        yield consumer.close()


@pytest_twisted.inlineCallbacks
def test_requests_issued_together_are_answered_in_order(broker):
    producer = yield TwistedProducer.connect(reactor, "127.0.0.1", broker.port)
    consumer = yield TwistedSimpleConsumer.connect(reactor, "127.0.0.1", broker.port)
    try:
        yield producer.send("order-a", 0, [b"A"])
        yield producer.send("order-b", 0, [b"B1", b"B2"])
        yield wait_for_end(consumer, "order-b", 24)
        yield wait_for_end(consumer, "order-a", 11)
        a, offsets, b = (consumer.fetch(FetchRequest("order-a", 0, 0, 4096)),
                         consumer.get_offsets_before("order-b", 0, LATEST_TIME, 1),
                         consumer.fetch(FetchRequest("order-b", 0, 0, 4096)))
        assert [bytes(m.payload) for _o, _n, m in (yield a)] == [b"A"]
        assert (yield offsets) == [24]
        assert [bytes(m.payload) for _o, _n, m in (yield b)] == [b"B1", b"B2"]
    finally:
        yield producer.close()
        yield consumer.close()


@pytest_twisted.inlineCallbacks
def test_connecting_to_a_closed_port_fails(broker):
    port = broker.port
    broker.kill()
    with pytest.raises(ConnectError):
        yield TwistedSimpleConsumer.connect(reactor, "127.0.0.1", port, socket_timeout_ms=2000)
