"""The Twisted clients over a StringTransport: produce, fetch and offsets, error codes, timeouts
(the connection under them: tests/unit/network/test_kafka07_client.py)."""

import struct

import pytest
from twisted.internet import task
from twisted.internet.defer import TimeoutError as DeferredTimeoutError

from tests.support.client_connection import connected, results
from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.client.twisted_client import TwistedProducer, TwistedSimpleConsumer
from twisted_broker.errors import MessageSizeTooLarge, OffsetOutOfRange
from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.codec.kafka07.requests import FetchRequest, OffsetRequest, ProduceRequest, encode_request

MESSAGES = encode_message_set([b"hello"])
FETCH_RESPONSE = struct.pack(">ih", 2 + len(MESSAGES), 0) + MESSAGES
OFFSETS_RESPONSE = (b"\x00\x00\x00\x16" b"\x00\x00"           # size 22, no error
                    b"\x00\x00\x00\x02"                        # two offsets
                    b"\x00\x00\x00\x00\x00\x00\x00\x10" b"\x00\x00\x00\x00\x00\x00\x00\x00")


def test_twisted_producer_writes_a_produce_request():
    protocol, transport = connected()
    done = results(TwistedProducer(protocol).send("test", 0, [b"hello"]))
    assert done == [None]
    assert transport.value() == encode_request(ProduceRequest("test", 0, MESSAGES))


def test_twisted_producer_refuses_an_oversize_payload_without_writing():
    protocol, transport = connected()
    failed = results(TwistedProducer(protocol, max_message_size=4).send("test", 0, [b"hello"]))
    assert failed[0].check(MessageSizeTooLarge)
    assert transport.value() == b""


def test_twisted_consumer_fetch_and_offsets():
    protocol, transport = connected()
    consumer = TwistedSimpleConsumer(protocol, task.Clock())
    request = FetchRequest("test", 0, 0, 1 << 20)
    fetched = results(consumer.fetch(request))
    offsets = results(consumer.get_offsets_before("test", 0, -1, 2))
    assert transport.value() == encode_request(request) + encode_request(OffsetRequest("test", 0, -1, 2))
    protocol.dataReceived(FETCH_RESPONSE + OFFSETS_RESPONSE)
    [fetched_set] = fetched
    assert isinstance(fetched_set, FetchedMessageSet)
    assert [(o, n, bytes(m.payload)) for o, n, m in fetched_set] == [(0, 15, b"hello")]
    assert offsets == [[16, 0]]


def test_twisted_consumer_error_codes_travel_in_the_fetched_set():
    protocol, _transport = connected()
    fetched = results(TwistedSimpleConsumer(protocol, task.Clock()).fetch(FetchRequest("t", 0, 99, 10)))
    protocol.dataReceived(b"\x00\x00\x00\x02\x00\x01")
    with pytest.raises(OffsetOutOfRange):
        fetched[0].check()


def test_a_timed_out_response_is_dropped_when_it_comes_and_the_next_one_is_still_matched():
    clock = task.Clock()
    protocol, _transport = connected()
    consumer = TwistedSimpleConsumer(protocol, clock, socket_timeout_ms=1000)
    slow = results(consumer.fetch(FetchRequest("t", 0, 0, 100)))
    clock.advance(1.5)
    assert slow[0].check(DeferredTimeoutError)
    following = results(consumer.get_offsets_before("t", 0, -1, 2))
    protocol.dataReceived(FETCH_RESPONSE + OFFSETS_RESPONSE)  # the late fetch response, then ours
    assert following == [[16, 0]]
