"""An in-memory network for the followers' connections (fetcher.Fetchers' ``connect``).

A ``SimConnection`` carries the real encoded request bytes to the leader broker's real 0.7
handler (handlers/kafka07/broker.Broker with replication's ReplicationRequests) and the real
answer bytes back: file regions are read into bytes as sendfile would send them. As on TCP,
each direction of one connection keeps its order (and the server answers one request at a
time, in order), while different connections are delayed independently, so messages are
reordered across connections.

Faults: a seeded fraction of messages resets the connection (both sides see it closed); a
partition between two brokers holds their messages until it heals, or resets the connection
if it lasts longer than ``TCP_TIMEOUT_S`` (TCP's retransmissions giving up); connecting
across a partition fails after the connect timeout; a crashed broker's connections reset.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectError, ConnectionLost, ConnectionRefusedError

from twisted_broker.codec.kafka07.replication import ALL_REQUEST_CLASSES
from twisted_broker.codec.kafka07.requests import decode_request
from twisted_broker.codec.kafka07.responses import decode_error_and_body

__all__ = ["SimNetwork", "SimConnection", "TCP_TIMEOUT_S"]

TCP_TIMEOUT_S = 20.0


class SimNetwork:
    def __init__(self, clock, rng, trace, *, max_delay_s: float = 0.005, reset_rate: float = 0.0) -> None:
        self.clock, self.rng, self.trace = clock, rng, trace
        self.max_delay_s = max_delay_s
        self.reset_rate = reset_rate
        self.brokers: dict[tuple[str, int], object] = {}  # address -> sim_broker.SimBroker (alive)
        self.cuts: set[frozenset] = set()  # pairs of broker ids that cannot talk
        self.connections: list[SimConnection] = []
        self.messages = 0

    def address(self, broker_id: int) -> tuple[str, int]:
        return f"broker{broker_id}", 9092

    def connector(self, client):
        """The ``connect`` a broker's Fetchers use: ``client`` is that SimBroker."""
        def connect(reactor, host: str, port: int, *, timeout_s: float = 30.0) -> Deferred:
            server = self.brokers.get((host, port))
            d: Deferred = Deferred()
            if server is None or not server.alive:
                client.clock.callLater(self.delay(), d.errback, ConnectionRefusedError(host))
            elif self.is_cut(client.broker_id, server.broker_id):
                client.clock.callLater(timeout_s, d.errback, ConnectError(string=f"timeout to {host}"))
            else:
                connection = SimConnection(self, client, server)
                self.connections.append(connection)
                client.clock.callLater(self.delay(), d.callback, connection)
            return d
        return connect

    def delay(self) -> float:
        return self.rng.uniform(0, self.max_delay_s)

    def is_cut(self, a: int, b: int) -> bool:
        return frozenset((a, b)) in self.cuts

    def cut(self, a: int, b: int) -> None:
        self.cuts.add(frozenset((a, b)))

    def heal(self, a: int, b: int) -> None:
        self.cuts.discard(frozenset((a, b)))
        for connection in list(self.connections):
            connection.release()

    def crashed(self, broker_id: int) -> None:
        for connection in list(self.connections):
            if broker_id in (connection.client.broker_id, connection.server.broker_id):
                connection.reset(f"broker {broker_id} crashed")


class SimConnection:
    def __init__(self, network: SimNetwork, client, server) -> None:
        self.network, self.client, self.server = network, client, server
        self.disconnected: Deferred = Deferred()
        self.closed = False
        self._waiting: list[Deferred] = []  # the client's requests, oldest first
        self._queue: list[bytes] = []  # requests arrived at the server, not yet answered
        self._busy = False
        self._last = {"up": 0.0, "down": 0.0}
        self._held: list = []  # (direction, call) held by a partition

    # -- the client's side: network/kafka07_client.KafkaClientProtocol's interface ----------

    def request(self, data: bytes) -> Deferred:
        if self.closed:
            return fail(ConnectionLost("closed"))
        d: Deferred = Deferred()
        self._waiting.append(d)
        self._send("up", lambda: self._arrive(bytes(data)))
        return d

    def close(self) -> Deferred:
        self.reset("closed by the client")
        return self.disconnected

    # -- transport -----------------------------------------------------------------------

    def _send(self, direction: str, call) -> None:
        network = self.network
        network.messages += 1
        if network.reset_rate and network.rng.random() < network.reset_rate:
            self.reset("reset (simulated drop)")
            return
        if network.is_cut(self.client.broker_id, self.server.broker_id):
            self._held.append((direction, call))
            network.clock.callLater(TCP_TIMEOUT_S, self._give_up, len(self._held))
            return
        now = network.clock.seconds()
        at = max(self._last[direction], now + network.delay())
        self._last[direction] = at
        side = self.server if direction == "up" else self.client
        side.clock.callLater(at - now, lambda: None if self.closed else call())

    def release(self) -> None:
        """The partition healed: what TCP was retransmitting arrives now."""
        if self.closed or self.network.is_cut(self.client.broker_id, self.server.broker_id):
            return
        held, self._held = self._held, []
        for direction, call in held:
            self._send(direction, call)

    def _give_up(self, count: int) -> None:
        if self._held and not self.closed:
            self.reset(f"no answer for {TCP_TIMEOUT_S:.0f} s across a partition")

    def reset(self, why: str) -> None:
        if self.closed:
            return
        self.closed = True
        self._held = []
        if self in self.network.connections:
            self.network.connections.remove(self)
        waiting, self._waiting = self._waiting, []
        delay = self.network.delay()

        def tell_client() -> None:
            for d in waiting:
                d.errback(ConnectionLost(why))
            self.disconnected.callback(None)
        self.client.clock.callLater(delay, tell_client)

    # -- the server's side: one request at a time, in order, as network/kafka07.py serves --

    def _arrive(self, data: bytes) -> None:
        self._queue.append(data)
        if not self._busy:
            self._serve_next()

    def _serve_next(self) -> None:
        if not self._queue or self.closed or not self.server.alive:
            return
        self._busy = True
        data = self._queue.pop(0)
        try:
            request = decode_request(memoryview(data)[4:], ALL_REQUEST_CLASSES)
            answer = self.server.handler.handle(request)
        except Exception as exc:  # CloseConnection or a bad frame: the broker closes the socket
            self.reset(f"the server closed the connection: {exc!r}")
            return
        if isinstance(answer, Deferred):
            answer.addCallbacks(self._answer, lambda failure: self.reset(f"handler failed: {failure.value!r}"))
        else:
            self._answer(answer)

    def _answer(self, pieces) -> None:
        frame = b"".join(self._piece_bytes(piece) for piece in pieces)
        self._busy = False
        if not self.closed:
            self._send("down", lambda: self._deliver(frame))
            self._serve_next()

    @staticmethod
    def _piece_bytes(piece) -> bytes:
        if isinstance(piece, (bytes, bytearray, memoryview)):
            return bytes(piece)
        try:
            return piece.read()  # a FileRegion: what sendfile would have sent
        finally:
            piece.close()

    def _deliver(self, frame: bytes) -> None:
        if self._waiting:
            self._waiting.pop(0).callback(decode_error_and_body(memoryview(frame)[4:]))
