"""network/file_streaming.py ``write_at_once``: a small answer goes to the socket at once when
nothing waits before it in Twisted's buffer, and the usual way otherwise, in order.

A real connected socket pair under a ``tcp.Connection``; the reactor it is given only records
what the connection registers for (that registration, and the reactor turn it costs, is what
the function saves), so the test can tell which way the bytes went.
"""

from __future__ import annotations

import socket

import pytest
from twisted.internet import tcp
from twisted.internet.protocol import Protocol

from twisted_broker.network.file_streaming import write_at_once


class RecordingReactor:
    def __init__(self) -> None:
        self.writers: set = set()
        self.readers: set = set()

    def addWriter(self, selectable) -> None:
        self.writers.add(selectable)

    def removeWriter(self, selectable) -> None:
        self.writers.discard(selectable)

    def addReader(self, selectable) -> None:
        self.readers.add(selectable)

    def removeReader(self, selectable) -> None:
        self.readers.discard(selectable)

    def callLater(self, *args, **kwargs):
        raise AssertionError("nothing here should wait for the reactor")


@pytest.fixture
def connection():
    ours, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    peer.settimeout(0.5)
    reactor = RecordingReactor()
    transport = tcp.Connection(ours, Protocol(), reactor)
    transport.connected = True
    yield transport, peer, reactor
    ours.close()
    peer.close()


def test_with_an_empty_buffer_the_bytes_are_on_the_socket_before_any_reactor_turn(connection):
    transport, peer, reactor = connection
    write_at_once(transport, b"answer-1")
    assert peer.recv(100) == b"answer-1"
    assert not reactor.writers  # never registered for writability


def test_behind_buffered_bytes_they_wait_their_turn_and_leave_in_order(connection):
    transport, peer, reactor = connection
    transport.write(b"first;")  # Twisted's own write: buffered until the reactor says writable
    write_at_once(transport, b"second")
    peer.setblocking(False)
    with pytest.raises(BlockingIOError):
        peer.recv(100)  # nothing overtook the buffered bytes
    assert reactor.writers == {transport}
    transport.doWrite()
    peer.setblocking(True)
    assert peer.recv(100) == b"first;second"


def test_what_the_socket_does_not_take_goes_the_usual_way(connection):
    transport, peer, reactor = connection
    data = bytes(range(256)) * 40_000  # 10 MB: more than a socket buffer takes at once
    write_at_once(transport, data)
    assert reactor.writers == {transport}  # the rest is buffered, registered for writability
    received = bytearray()
    while len(received) < len(data):
        transport.doWrite()
        received += peer.recv(1 << 20)
    assert bytes(received) == data


def test_a_connection_being_closed_takes_the_usual_way(connection):
    transport, peer, reactor = connection
    transport.disconnecting = True
    write_at_once(transport, b"late")
    peer.setblocking(False)
    with pytest.raises(BlockingIOError):
        peer.recv(100)
