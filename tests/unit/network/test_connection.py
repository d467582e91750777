"""The protocol-blind FramedConnection on a StringTransport, with a toy protocol of its own: a frame
is one ASCII word, answered with its upper case; it knows nothing of Kafka's handlers."""

from __future__ import annotations

import logging
import struct

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from twisted_broker.network.connection import FramedConnection, RefusedRequest
from twisted_broker.network.connection_factory import ConnectionFactory
from twisted_broker.server.stats import RequestStats


class Held:
    def __init__(self, resume) -> None:
        self.resume, self.cancelled = resume, False

    def cancel(self) -> None:
        self.cancelled = True


class Words(FramedConnection):
    """``bad`` is refused, ``later`` answered by a Deferred, ``wait`` held until resumed,
    ``ack<n>`` answered by a Deferred that overtakes (as an appended acks=all Produce)."""

    def __init__(self, table, **options) -> None:
        super().__init__(table["requests"], **options)
        self.table = table

    def decode(self, frame) -> str:
        word = bytes(frame).decode("ascii")
        if word == "bad":
            raise RefusedRequest("malformed request: bad")
        return word

    def handle(self, request: str):
        self.table.setdefault("handled", []).append(request)
        if request.startswith("ack"):
            self.table[request] = Deferred()
            return self.table[request]
        if request == "later":
            self.table["later"] = Deferred()
            return self.table["later"]
        return [request.upper().encode()]

    def describe(self, request: str) -> tuple[int, str]:
        return 0, request

    def overtakes(self, request: str, answer) -> bool:
        return request.startswith("ack")

    def hold(self, request: str, resume):
        if request != "wait":
            return None
        self.table["held"] = Held(resume)
        return self.table["held"]


class WordsFactory(ConnectionFactory):
    protocol = Words


def frame(word: str) -> bytes:
    return struct.pack(">i", len(word)) + word.encode()


def connect(clock=None):
    table = {"requests": RequestStats(60, lambda: 0.0)}
    protocol = WordsFactory(table, clock=clock).buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    return table, protocol, transport


def test_frames_are_decoded_handled_and_answered_in_order_with_the_figures_counted():
    table, protocol, transport = connect()
    protocol.dataReceived(frame("one") + frame("two")[:3])
    protocol.dataReceived(frame("two")[3:])
    assert transport.value() == b"ONETWO"
    (connection,) = table["requests"].open_connections
    assert (connection.requests, connection.responses, connection.last_request) == (2, 2, "two")


def test_a_refused_request_closes_the_connection_with_one_warning_after_the_ones_before_it(caplog):
    _, protocol, transport = connect()
    with caplog.at_level(logging.WARNING):
        protocol.dataReceived(frame("one") + frame("bad") + frame("two"))
    assert transport.value() == b"ONE" and transport.disconnecting
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        "closing connection from 192.168.1.1:54321: malformed request: bad"]


def test_a_deferred_answer_and_a_held_request_keep_the_ones_behind_them_waiting():
    table, protocol, transport = connect(Clock())
    protocol.dataReceived(frame("later") + frame("wait") + frame("last"))
    assert transport.value() == b""
    table["later"].callback([b"LATER"])
    assert transport.value() == b"LATER" and "held" in table
    table["held"].resume()
    assert transport.value() == b"LATERWAITLAST"


def test_a_held_request_is_cancelled_when_the_connection_goes():
    table, protocol, transport = connect(Clock())
    protocol.dataReceived(frame("wait"))
    protocol.connectionLost(None)
    assert table["held"].cancelled and transport.value() == b""


def test_requests_behind_an_overtaking_answer_are_handled_at_once_and_answered_in_order():
    # Issue 23: librdkafka's one acks=all Produce per partition, pipelined.
    table, protocol, transport = connect(Clock())
    protocol.dataReceived(frame("ack1") + frame("two") + frame("ack2") + frame("three"))
    assert table["handled"] == ["ack1", "two", "ack2", "three"] and transport.value() == b""
    table["ack2"].callback([b"A2"])
    assert transport.value() == b""  # behind ack1
    table["ack1"].callback([b"A1"])
    assert transport.value() == b"A1TWOA2THREE"
    protocol.dataReceived(frame("four"))
    assert transport.value() == b"A1TWOA2THREEFOUR"


def test_an_answer_that_does_not_overtake_still_stops_the_requests_behind_it():
    table, protocol, transport = connect(Clock())
    protocol.dataReceived(frame("ack1") + frame("later") + frame("last"))
    assert table["handled"] == ["ack1", "later"]
    table["ack1"].callback([b"A1"])
    assert transport.value() == b"A1" and table["handled"] == ["ack1", "later"]
    table["later"].callback([b"LATER"])
    assert transport.value() == b"A1LATERLAST"


def test_at_most_max_in_flight_answers_wait_and_reading_stops_meanwhile():
    from twisted_broker.network.connection import MAX_IN_FLIGHT
    table, protocol, transport = connect(Clock())
    protocol.dataReceived(b"".join(frame(f"ack{i}") for i in range(MAX_IN_FLIGHT + 1)))
    assert len(table["handled"]) == MAX_IN_FLIGHT
    protocol.dataReceived(frame("more"))  # (as for a streaming answer: paused when more comes)
    assert transport.producerState == "paused" and len(table["handled"]) == MAX_IN_FLIGHT
    table["ack0"].callback([b"."])
    assert table["handled"][MAX_IN_FLIGHT] == f"ack{MAX_IN_FLIGHT}" and transport.value() == b"."
    assert "more" not in table["handled"]  # again full: ack1 and the others still wait


def test_answers_in_flight_are_dropped_when_the_connection_goes():
    table, protocol, transport = connect(Clock())
    protocol.dataReceived(frame("ack1") + frame("two"))
    protocol.connectionLost(None)
    table["ack1"].callback([b"A1"])
    assert transport.value() == b""
