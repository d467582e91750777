"""Stream a file region to a transport without loading it into memory.

``SendfileProducer`` moves the bytes with ``os.sendfile`` from the segment's descriptor to the
socket, inside the kernel. It is a pull producer: Twisted calls ``resumeProducing`` when its
own write buffer is empty and the socket is writable; we send until the socket would block and
re-arm writing. The first call comes from ``registerProducer`` itself, while bytes written just
before (the response header) may still sit in Twisted's buffer; sending file bytes then would
overtake them, so that call only re-arms writing. When Twisted's buffer is already empty (a
consumer that waits for each answer), ``stream_region`` skips that turn: the header goes out
on the socket with MSG_MORE and the first sendfile follows at once, so header and messages
leave as one segment with no epoll round trip (on loopback this cut a small fetch's answer
by about a reactor turn).

``ChunkedFileProducer`` is the fallback where the transport has no socket to sendfile to (TLS,
in-memory test transports): it writes one bounded chunk per call, so a slow reader never makes
the broker hold more than one chunk for it.

Both read through the region's own descriptor with ``pread`` / an explicit offset, so retention
unlinking the segment mid-stream does not cut the response short.
"""

from __future__ import annotations

import errno
import os
import socket
from typing import Protocol

from twisted.internet import tcp
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPullProducer
from zope.interface import implementer

CHUNK_BYTES = 1 << 20
# sendfile in steps of this size, so one fetch cannot hold the reactor for a whole 100 MB region.
SENDFILE_STEP_BYTES = 4 << 20


class StreamedRegion(Protocol):
    """What is streamed of a file region (storage/segment.py's FileRegion, which the handlers
    put among a response's pieces): ``length`` bytes at ``position`` of the descriptor ``fd``,
    open until ``close()``."""

    fd: int
    position: int
    length: int

    def close(self) -> None: ...


PLAIN_PIECES = (bytes, bytearray, memoryview)  # a response's pieces: these, and FileRegions


def is_region(piece: object) -> bool:
    """Whether a response piece is a file region to stream (not bytes to write)."""
    return not isinstance(piece, PLAIN_PIECES)


def all_plain(pieces) -> bool:
    """Whether ``pieces`` hold no file region (a loop, not ``any`` over a generator: per request)."""
    for piece in pieces:
        if not isinstance(piece, PLAIN_PIECES):
            return False
    return True


def close_regions(pieces) -> None:
    """Close the file regions among ``pieces`` (an answer that will never be sent)."""
    for piece in pieces:
        if is_region(piece):
            piece.close()


def can_sendfile(transport: object) -> bool:
    """True if ``transport`` is a plain TCP connection whose socket sendfile can write to.

    Under TLS the protocol's transport is the TLS layer, not a ``tcp.Connection``, so TLS
    connections take the chunked path, as they must: the bytes need encrypting.
    """
    return hasattr(os, "sendfile") and isinstance(transport, tcp.Connection)


@implementer(IPullProducer)
class _RegionProducer:
    def __init__(self, region: StreamedRegion, consumer) -> None:
        self._region = region
        self._consumer = consumer
        self._position = region.position
        self._remaining = region.length
        self.done: Deferred[int] = Deferred()

    def start(self) -> Deferred[int]:
        """Register with the consumer and stream; ``done`` fires with the bytes sent."""
        if not self._remaining:
            self._finish()
        else:
            self._consumer.registerProducer(self, False)
        return self.done

    def stopProducing(self) -> None:
        # The connection went away: release the descriptor; nobody waits for the rest.
        self._region.close()
        if not self.done.called:
            self.done.errback(ConnectionError("connection lost while streaming a file region"))

    def _finish(self) -> None:
        sent = self._region.length
        self._region.close()
        if self._remaining == 0 and self._region.length:
            self._consumer.unregisterProducer()
        self.done.callback(sent)


class ChunkedFileProducer(_RegionProducer):
    def resumeProducing(self) -> None:
        if self.done.called:
            return
        chunk = os.pread(self._region.fd, min(CHUNK_BYTES, self._remaining), self._position)
        if not chunk:  # the file shrank under us: cannot happen to flushed data; fail loudly
            self._region.close()
            self._consumer.unregisterProducer()
            self.done.errback(OSError(errno.EIO, "segment ended before the region did"))
            return
        self._position += len(chunk)
        self._remaining -= len(chunk)
        self._consumer.write(chunk)
        if not self._remaining:
            self._finish()


class SendfileProducer(_RegionProducer):
    def __init__(self, region: StreamedRegion, consumer) -> None:
        super().__init__(region, consumer)
        self._armed = False

    def start_at_once(self, prefix: bytes) -> Deferred[int]:
        """Send ``prefix`` (the response header) and the region now, on the socket itself.

        Only for a transport whose write buffer is empty (nothing to overtake): the usual way
        waits a reactor turn for the buffer to drain before the first sendfile, and sends the
        header and the messages as two segments. What the socket does not take at once
        continues the usual way.
        """
        transport = self._consumer
        sock = transport.getHandle()
        try:
            sent = sock.send(prefix, socket.MSG_MORE) if prefix else 0
        except OSError:  # would block, or a lost connection, which the transport reports itself
            sent = 0
        if sent < len(prefix):
            transport.write(prefix[sent:])
            return self.start()
        if self._remaining and not self._send():
            return self.done
        if self._remaining:
            self._armed = True
            transport.registerProducer(self, False)  # calls resumeProducing: sends on, or waits
        else:
            self._region.close()
            self.done.callback(self._region.length)
        return self.done

    def resumeProducing(self) -> None:
        if self.done.called:
            return
        transport = self._consumer
        if not self._armed:
            # The call from registerProducer: Twisted may still hold the header. Let doWrite
            # drain it; it calls us again when its buffer is empty.
            self._armed = True
            transport.startWriting()
            return
        if self._send():
            if self._remaining:
                transport.startWriting()  # doWrite calls us back when the socket is writable
            else:
                self._finish()

    def _send(self) -> bool:
        """sendfile until the region is sent, the socket would block or the step is used up;
        False (and the connection closing) if it failed."""
        transport = self._consumer
        socket_fd = transport.getHandle().fileno()
        budget = SENDFILE_STEP_BYTES
        try:
            while self._remaining and budget > 0:
                sent = os.sendfile(socket_fd, self._region.fd, self._position, min(self._remaining, budget))
                if sent == 0:
                    raise OSError(errno.EIO, "segment ended before the region did")
                self._position += sent
                self._remaining -= sent
                budget -= sent
        except BlockingIOError:
            pass
        except OSError as exc:
            self._region.close()
            if transport.producer is self:
                transport.unregisterProducer()
            self.done.errback(exc)
            transport.loseConnection()
            return False
        return True


@implementer(IPullProducer)
class DrainWaiter:
    """Fires ``done`` once the transport has sent what was written before it (a pull producer:
    Twisted calls it when its write buffer is empty). The first call, from registerProducer,
    comes while bytes may still be buffered, so it only re-arms writing, as SendfileProducer."""

    def __init__(self, consumer) -> None:
        self._consumer = consumer
        self._armed = False
        self.done: Deferred[None] = Deferred()

    def start(self) -> Deferred[None]:
        self._consumer.registerProducer(self, False)
        return self.done

    def resumeProducing(self) -> None:
        if self.done.called:
            return
        if not self._armed:
            # On TCP, doWrite calls us again once its buffer is empty; under TLS the
            # pull-to-push adapter calls us again while its transport is not paused.
            self._armed = True
            start_writing = getattr(self._consumer, "startWriting", None)
            if start_writing is not None:
                start_writing()
            return
        self._consumer.unregisterProducer()
        self.done.callback(None)

    def stopProducing(self) -> None:
        if not self.done.called:
            self.done.errback(ConnectionError("connection lost while waiting for the peer to read"))


def wait_for_drain(transport) -> Deferred[None]:
    """A Deferred that fires when ``transport`` has sent everything written to it so far."""
    return DrainWaiter(transport).start()


def stream_region(region: StreamedRegion, transport, prefix: bytes = b"") -> Deferred[int]:
    """Send ``prefix``, then ``region``, on ``transport``, by sendfile where possible; fires
    with the region's byte count."""
    if can_sendfile(transport):
        producer = SendfileProducer(region, transport)
        if transport.producer is None and _write_buffer_empty(transport):
            return producer.start_at_once(prefix)
    else:
        producer = ChunkedFileProducer(region, transport)
    if prefix:
        transport.write(prefix)
    return producer.start()


def write_at_once(transport, data: bytes) -> None:
    """``transport.write(data)``, except that on a plain TCP connection with nothing waiting in
    Twisted's buffer and no producer the bytes go to the socket now.

    ``transport.write`` only buffers and registers for writability: the answer leaves on the
    reactor's next turn, an ``epoll_ctl`` to register, a poll, and another ``epoll_ctl`` to
    unregister later (issue 24's profile of a modern Produce answered one at a time: 10% of the
    broker's CPU in ``stopWriting`` alone). Nothing is overtaken: the buffer is empty. What the
    socket does not take, and any error (a lost connection the transport reports itself), goes
    the usual way.
    """
    if (isinstance(transport, tcp.Connection) and transport.connected and not transport.disconnecting
            and not transport._writeDisconnecting and transport.producer is None and _write_buffer_empty(transport)):
        try:
            sent = transport.getHandle().send(data)
        except OSError:  # would block, or lost: Twisted's write path handles both
            sent = 0
        if sent == len(data):
            return
        data = data[sent:]
    transport.write(data)


def _write_buffer_empty(transport: tcp.Connection) -> bool:
    # Twisted's FileDescriptor keeps unsent bytes in these attributes; it has no public test.
    return not transport._tempDataLen and len(transport.dataBuffer) <= transport.offset
