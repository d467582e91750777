"""KafkaClientProtocol over a StringTransport: responses matched to requests by order, fed whole
and byte by byte; produce flow control; lost connections; responses that fit no request."""

import struct

import pytest
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure

from tests.support.client_connection import connected, results
from twisted_broker.codec.kafka07.message_set import encode_message_set
from twisted_broker.errors import UnexpectedResponse

MESSAGES = encode_message_set([b"hello"])
FETCH_RESPONSE = struct.pack(">ih", 2 + len(MESSAGES), 0) + MESSAGES


@pytest.mark.parametrize("byte_by_byte", [False, True])
def test_responses_fire_the_requests_in_order(byte_by_byte):
    protocol, transport = connected()
    first, second = results(protocol.request(b"req1")), results(protocol.request(b"req2"))
    assert transport.value() == b"req1req2"  # written back to back, without waiting
    data = FETCH_RESPONSE + b"\x00\x00\x00\x02\x00\x01"
    chunks = [data[i:i + 1] for i in range(len(data))] if byte_by_byte else [data]
    for chunk in chunks:
        protocol.dataReceived(chunk)
    assert [(e, bytes(b)) for e, b in first] == [(0, MESSAGES)]
    assert [(e, bytes(b)) for e, b in second] == [(1, b"")]


def test_a_lost_connection_fails_what_waits_and_what_comes_after():
    protocol, _transport = connected()
    waiting = results(protocol.request(b"req"))
    protocol.connectionLost(Failure(ConnectionDone()))
    assert waiting[0].check(ConnectionDone)
    assert results(protocol.request(b"later"))[0].check(ConnectionDone)
    assert results(protocol.send(b"produce"))[0].check(ConnectionDone)


def test_a_response_to_no_request_aborts_the_connection():
    protocol, transport = connected()
    protocol.dataReceived(b"\x00\x00\x00\x02\x00\x00")
    assert transport.disconnecting or transport.disconnected
    assert results(protocol.request(b"req"))[0].check(UnexpectedResponse)


def test_an_oversize_response_fails_the_waiting_request_after_serving_the_ones_before():
    protocol, _transport = connected(max_response_bytes=100)
    first, second = results(protocol.request(b"a")), results(protocol.request(b"b"))
    protocol.dataReceived(b"\x00\x00\x00\x02\x00\x00" + struct.pack(">i", 1000))
    assert first[0][0] == 0
    assert second[0].check(UnexpectedResponse)


def test_send_fires_at_once_unless_the_transport_asked_to_pause():
    protocol, transport = connected()
    assert results(protocol.send(b"p1")) == [None]
    protocol.pauseProducing()
    later = results(protocol.send(b"p2"))
    assert later == [] and transport.value() == b"p1p2"  # written, waiting for the buffer to drain
    protocol.resumeProducing()
    assert later == [None]


def test_close_fires_when_the_connection_is_closed():
    protocol, transport = connected()
    closed = results(protocol.close())
    assert transport.disconnecting and closed == []
    protocol.connectionLost(Failure(ConnectionDone()))
    assert closed == [None]
