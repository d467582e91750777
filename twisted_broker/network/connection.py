"""The connection of the Kafka listeners, blind to which protocol it carries.

A frame is ``int32 size`` then the request. Each protocol's connection (kafka07.py, kafka.py)
subclasses ``FramedConnection`` with four methods: ``decode`` a frame into a request, ``handle`` it
(the handler table it was given answers with response pieces: ``bytes`` and file regions, or a
Deferred of them), ``describe`` it for the figures, and, optionally, ``hold`` it. This module
holds what they share and nothing of either protocol.

Requests are answered one at a time, in arrival order: Kafka 0.7 has no correlation ids, and
today's clients, which have them, still expect their answers in order (as Kafka's brokers
do). So frames that arrive while a response is streaming wait in a queue, and the connection
stops reading from its socket until the queue is empty again: a client that pipelines
requests without reading responses cannot make the broker buffer without bound. Bad framing
or a refused request (``RefusedRequest``) closes the connection with one WARNING naming the peer.

What a hostile or stuck peer can make the broker hold, and the bound on it:

- responses it does not read: fetched regions stream only as fast as the socket takes them;
  small responses (offsets, empty fetches) are written at once, so after every
  ``PACE_BYTES`` of them the connection waits until the transport has sent them (the peer
  read them) before it serves the next request;
- requests it floods: at most ``REQUESTS_PER_TURN`` are served before the other connections
  get their turn (the reactor reads 64 KiB at a time: 2,400 empty fetches);
- requests it sends only in part: a frame over ``SMALL_REQUEST_BYTES`` must first reserve its
  size from the ``RequestBudget`` all connections share (request_budget.py says why).

Requests whose answer waits: ``handle`` may return a Deferred (a long-poll, acks=all), and
``hold`` may hold a request before it is handled (0.7's caught-up fetches): either way the
requests behind it wait, in order, and a held request is cancelled when the connection goes.
Except behind a request whose effects are done and only its answer waits (``overtakes``: an
appended acks=all Produce, not an idempotent producer's): up to ``MAX_IN_FLIGHT`` answers then
wait at once, and leave in order (librdkafka pipelines one Produce per partition).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.protocol import Protocol

from twisted_broker.network.framing import FrameDecoder, FrameTooLarge
from twisted_broker.network.file_streaming import all_plain, close_regions
from twisted_broker.network.request_budget import BudgetedFrames, RequestBudget
from twisted_broker.network.response_writing import ResponseWriting
from twisted_broker.network.socket_options import set_socket_options
log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 104_857_600
# Bytes of small responses written without knowing that the peer reads them.
PACE_BYTES = 256 * 1024
# Requests served from one connection before the reactor turns to the others: one read can
# bring 2,400 empty fetches, 25 ms of work that every other connection would wait behind.
REQUESTS_PER_TURN = 100
MAX_IN_FLIGHT = 100  # answers waiting behind (and including) one that ``overtakes``
_PENDING = object()  # an answer in flight not ready yet


class RefusedRequest(Exception):
    """A request the connection answers by closing, with one WARNING naming the peer and this
    reason: a frame that does not decode, or a request the handler table refuses."""


class FramedConnection(BudgetedFrames, ResponseWriting, Protocol):
    """One connection of a Kafka listener. ``requests`` are the listener's request figures
    (server/stats.py's RequestStats: connection_opened, record, bytes_read, ...)."""

    cancel_answers_on_loss = False  # the connection going cancels a Deferred answer (waits that drop cleanly)
    may_hold = True  # False: ``hold`` is not asked (no closure made per request)
    principal = "User:ANONYMOUS"  # the peer, as Kafka's authorizer names it, until an authentication names another

    def __init__(self, requests, *, max_request_size: int = DEFAULT_MAX_REQUEST_BYTES,
                 send_buffer_bytes: int | None = None, receive_buffer_bytes: int | None = None,
                 budget: RequestBudget | None = None, clock=None) -> None:
        self._stats = requests
        self._decoder = FrameDecoder(max_request_size)
        self._frames: deque = deque()
        self._busy = False  # a response is being streamed, or small ones are being drained
        self._paused = False  # reading stopped because requests arrived while busy
        self._closing = False
        self._buffer_sizes = (send_buffer_bytes, receive_buffer_bytes)
        self._unconfirmed_bytes = 0  # small responses written since the transport last drained
        # Shared by the factory's connections; a connection made alone gets one of its own.
        self._budget = budget or RequestBudget(2 * max_request_size)
        # For the stalled-request timeout and the turns given to other connections; None
        # (tests on a StringTransport): neither.
        self._clock = clock
        self._reserved_bytes = 0  # reserved for the frame being received
        self._awaiting_budget = False
        self._stall_timer = None
        self._held = None  # what ``hold`` returned for the request being held
        self._answering = False  # inside _answer: a Deferred answer that fires now must not resume
        self._waiting: Deferred | None = None  # the Deferred answer awaited (cancelled if the peer goes)
        # Answers leaving in order behind one that overtakes ([request, started, pieces or
        # _PENDING, its Deferred]); nothing more is served while ``_blocked_by`` (one that does not) waits.
        self._in_flight: deque = deque()
        self._blocked_by = None

    # -- what each protocol's connection defines --------------------------------------------

    def decode(self, frame: memoryview):
        """The request in ``frame`` (the bytes after its size). Raises RefusedRequest."""
        raise NotImplementedError

    def handle(self, request) -> list | Deferred:
        """The response pieces (empty: no response), or a Deferred of them. Raises RefusedRequest."""
        raise NotImplementedError

    def describe(self, request) -> tuple[int, str]:
        """``(request type, name)``: the type the figures count it under, the name ``cons`` shows."""
        raise NotImplementedError

    def hold(self, request, resume: Callable[[], object]):
        """Hold ``request`` before handling it: return something with ``cancel()``, and call
        ``resume()`` once when it is to be handled; or None to handle it now."""
        return None

    def overtakes(self, request, answer: Deferred) -> bool:
        """Whether the requests behind ``request`` may be handled while its ``answer`` waits."""
        return False

    # -- the connection ---------------------------------------------------------------------

    def connectionMade(self) -> None:
        if self.factory is not None:
            self.factory.connections.add(self)
        peer = self.transport.getPeer()
        self._connection = self._stats.connection_opened(getattr(peer, "host", str(peer)), getattr(peer, "port", 0))
        self._connection.queued = self._frames.__len__
        self._connection.reading = lambda: not (self._paused or self._awaiting_budget)
        set_socket_options(self.transport, *self._buffer_sizes)

    def connectionLost(self, reason=None) -> None:
        if self.factory is not None:
            self.factory.connections.discard(self)
        self._stats.connection_closed(self._connection)
        self._closing = True
        self._frames.clear()
        if self._held is not None:
            self._held.cancel()
            self._held = None
        if self._waiting is not None and self.cancel_answers_on_loss:
            self._waiting.cancel()
        for _request, _started, pieces, waiting in self._in_flight:
            if pieces is not _PENDING:
                close_regions(pieces)
            elif self.cancel_answers_on_loss:
                waiting.cancel()
        self._in_flight.clear()
        self._blocked_by = None
        if self._awaiting_budget:
            self._awaiting_budget = False
            self._budget.cancel(self)
        self._release_reservation()

    def dataReceived(self, data: bytes) -> None:
        if self._closing:
            return
        self._stats.bytes_read.add(len(data))
        self._connection.bytes_received += len(data)
        self._connection.last_activity_s = self._stats.now()
        if self._stopped_serving() and not self._paused:
            # A pipelining client: read nothing more until this response is out, so it cannot
            # make us buffer without bound. (Not done per response: 2 epoll calls each.)
            self._paused = True
            self.transport.pauseProducing()
        try:
            frames = self._decoder.feed(data)
        except FrameTooLarge as exc:
            # 0.7 reads one request at a time: the requests before the bad size are served
            # first, whether or not they arrived in the same read; then the connection closes.
            self._frames.extend(exc.frames)
            self._frames.append(exc)
            self._release_reservation()
        else:
            self._frames.extend(frames)
            self._budget_partial_frame(bool(frames))
        self._serve()

    # -- one request at a time --------------------------------------------------------------

    def _stopped_serving(self) -> bool:
        return self._busy or self._blocked_by is not None or len(self._in_flight) >= MAX_IN_FLIGHT

    def _serve(self) -> None:
        """Handle queued frames in order until one needs streaming or the queue is empty."""
        served = 0
        while self._frames and not self._stopped_serving() and not self._closing:
            if served == REQUESTS_PER_TURN and self._clock is not None:
                self._next_turn()
                return
            started = time.perf_counter()
            run = self.absorb(self._frames, REQUESTS_PER_TURN - served % REQUESTS_PER_TURN)
            if run is not None:
                served += self._absorbed(*run, started)
                continue
            served += 1
            frame = self._frames.popleft()
            if isinstance(frame, FrameTooLarge):
                self._refuse(str(frame))
                return
            try:
                request = self.decode(frame)
            except RefusedRequest as exc:
                self._refuse(str(exc))
                return
            held = self.hold(request, lambda request=request: self._answer_held(request)) if self.may_hold else None
            if held is not None:
                self._busy = True
                self._held = held
                return
            self._answer(request, started)

    def absorb(self, frames: deque, limit: int) -> tuple[int, int, str] | None:
        """Serve up to ``limit`` requests at the front of ``frames`` at once, when they need
        no answer and the protocol can do them together: (how many, their type and name for
        the figures); None (the default) when they go one at a time."""
        return None

    def _absorbed(self, count: int, request_type: int, name: str, started: float) -> int:
        for _ in range(count):
            self._frames.popleft()
        self._connection.requests += count
        self._connection.last_request = name
        self._stats.record(request_type, time.perf_counter() - started, count)
        return count

    def _answer(self, request, started: float) -> None:
        """Handle one request and write or start streaming its response."""
        try:
            pieces = self.handle(request)
        except RefusedRequest as exc:
            self._refuse(str(exc))
            return
        if self._in_flight or (isinstance(pieces, Deferred) and not pieces.called
                               and self.overtakes(request, pieces)):
            self._answer_in_order(request, started, pieces)
            return
        if isinstance(pieces, Deferred):  # answers that wait: in order, like a held request
            self._busy = True
            # An answer ready at once is written here, and _serve's loop goes on: resuming from
            # inside it would recurse once per pipelined request.
            self._answering, self._waiting = True, pieces
            pieces.addCallbacks(lambda ready: self._answer_later(request, started, ready), self._answer_failed)
            self._answering = False
            return
        self._respond(request, started, pieces)

    def _answer_in_order(self, request, started: float, pieces) -> None:
        """Queue an answer behind those in flight (or as the first of them)."""
        if not isinstance(pieces, Deferred):
            self._in_flight.append([request, started, pieces, None])
            return
        entry = [request, started, _PENDING, pieces]
        self._in_flight.append(entry)
        if not self.overtakes(request, pieces):
            self._blocked_by = entry  # a long-poll, say: what is behind it waits, as always
        self._answering = True
        pieces.addCallbacks(lambda ready: self._landed(entry, ready), self._answer_failed)
        self._answering = False

    def _landed(self, entry: list, pieces) -> None:
        """An answer in flight is ready: send those now first in line."""
        entry[2], entry[3] = pieces, None
        self._blocked_by = None if self._blocked_by is entry else self._blocked_by
        if self._closing:
            close_regions(pieces)
        elif not self._busy and not self._answering:
            self._resume(False)

    def _send_in_flight(self) -> None:
        """Send the ready answers first in line, in order (until one streams)."""
        while self._in_flight and self._in_flight[0][2] is not _PENDING and not self._busy and not self._closing:
            request, started, pieces, _ = self._in_flight.popleft()
            self._respond(request, started, pieces)

    def _answer_held(self, request) -> None:
        self._held = None  # timed from now: the statistics' time is the work of answering
        self._answer_later(request, time.perf_counter())

    def _answer_later(self, request, started: float, pieces: list | None = None) -> None:
        """Answer a request that waited: a held one (``pieces`` None: handled now) or one
        whose answer was a Deferred (``pieces`` ready)."""
        self._busy, self._waiting = False, None
        if self._closing:
            close_regions(pieces or ())
            return
        if pieces is None:
            self._answer(request, started)
        else:
            self._respond(request, started, pieces)
        if not self._busy and not self._answering:
            self._resume(False)

    def _answer_failed(self, failure) -> None:
        self._waiting = None
        if self._closing and failure.check(CancelledError):
            return  # cancelled by connectionLost: nobody to answer
        log.error("answering a request from %s failed", self._peer(), exc_info=(
            failure.type, failure.value, failure.getTracebackObject()))
        self._busy = False
        self._refuse("internal error")

    def _respond(self, request, started: float, pieces) -> None:
        request_type, name = self.describe(request)
        self._connection.requests += 1
        self._connection.responses += bool(pieces)
        self._connection.last_request = name
        if all_plain(pieces):
            self._write_bytes(pieces)
            self._stats.record(request_type, time.perf_counter() - started)
            if self._unconfirmed_bytes >= PACE_BYTES:
                self._wait_for_drain()
            return
        self._busy = True
        self._stream(deque(pieces), request_type, started)

    def _next_turn(self) -> None:
        """Let the reactor serve other connections before this one's next requests."""
        self._busy = True
        if not self._paused:
            self._paused = True
            self.transport.pauseProducing()
        self._clock.callLater(0, self._resume, False)

    # -- serving on, and closing (writing and streaming: response_writing.py) ------------------

    def _resume(self, drained: bool) -> None:
        """Serve on after a drain wait (``drained``) or a turn given to other connections."""
        if drained:
            self._unconfirmed_bytes = 0
        self._busy = False
        if not self._closing:
            self._send_in_flight()
            if self._stopped_serving():
                return
            if self._paused:
                self._paused = False
                if not self._awaiting_budget:
                    self.transport.resumeProducing()
            self._serve()

    def _refuse(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self._peer(), reason)
        self._closing = True
        self._frames.clear()
        self.transport.loseConnection()

    def _peer(self) -> str:
        peer = self.transport.getPeer()
        return f"{getattr(peer, 'host', peer)}:{getattr(peer, 'port', '')}"
