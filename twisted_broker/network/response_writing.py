"""How a connection's responses leave: small ones written at once, file regions streamed.

The writing half of connection.py's ``FramedConnection`` (a mixin: it uses the connection's
``transport``, ``_stats``, ``_connection``, ``_busy``, ``_closing``, ``_unconfirmed_bytes``,
``_resume`` and ``_peer``). A response is a list of pieces, ``bytes`` and file regions:
the bytes before a region go out with it, and each region streams from its file
(file_streaming.py: sendfile) as fast as the socket takes it, so a consumer that reads slowly
makes the broker hold nothing but the region's place.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from twisted_broker.network.file_streaming import close_regions, is_region, stream_region, wait_for_drain, write_at_once

log = logging.getLogger(__name__)


class ResponseWriting:
    """Writes and streams a connection's responses (see the module's docstring)."""

    def _write_bytes(self, pieces: list) -> None:
        if pieces:
            data = b"".join(pieces)
            self._count_sent(len(data))
            self._unconfirmed_bytes += len(data)
            write_at_once(self.transport, data)

    def _count_sent(self, length: int) -> None:
        self._stats.bytes_written.add(length)
        self._connection.bytes_sent += length
        self._connection.last_activity_s = self._stats.now()

    def _wait_for_drain(self) -> None:
        """Serve nothing more until the transport has sent the small responses written so far.

        Without this a peer that pipelines offsets requests (up to 8 bytes per segment
        returned for a 31-byte request) and never reads would grow the transport's buffer
        without bound.
        """
        self._busy = True
        wait_for_drain(self.transport).addCallbacks(
            lambda _: self._resume(True), lambda failure: self._stream_failed(deque(), failure))

    def _stream(self, pieces: deque, request_type: int, started: float) -> None:
        """Write pieces in order; stream each region, then continue with what follows it."""
        while pieces:
            header: list = []
            while pieces and not is_region(pieces[0]):
                header.append(pieces.popleft())
            if not pieces:
                self._write_bytes(header)
                break
            piece = pieces.popleft()
            prefix = b"".join(header)
            self._count_sent(len(prefix) + piece.length)
            # The bytes before a region go with it: on an idle socket both leave at once.
            done = stream_region(piece, self.transport, prefix)
            if not done.called:
                done.addCallbacks(lambda _: self._stream(pieces, request_type, started),
                                  lambda failure: self._stream_failed(pieces, failure))
                return
            failures: list = []
            done.addErrback(failures.append)  # it finished at once: take its outcome here
            if failures:
                self._stream_failed(pieces, failures[0])
                return
        self._stats.record(request_type, time.perf_counter() - started)
        # A streamed region ends once the transport took its last bytes: what was written
        # before it has been sent, as after a drain.
        self._resume(True)

    def _stream_failed(self, pieces: deque, failure) -> None:
        close_regions(pieces)
        pieces.clear()
        self._busy = False
        if not self._closing:
            # A consumer hanging up mid-response is routine; anything else is worth a warning.
            quiet = failure.check(BrokenPipeError, ConnectionResetError, ConnectionError)
            (log.debug if quiet else log.warning)(
                "closing connection from %s: streaming a fetch response failed: %s",
                self._peer(), failure.getErrorMessage())
            self._closing = True
            self.transport.loseConnection()
