"""The Kafka protocol of today's clients (0.10 to 2.1) on a Twisted connection.

Its connections behave as the 0.7 port's (protocols/kafka.py), whose machinery they reuse
by subclassing: a frame is ``int32 size`` then the request, requests are answered one at a
time in arrival order (Kafka's own brokers do the same: a client matches answers by
correlation id but expects them in order), a pipelining peer stops being read while an
answer streams, big partly received frames reserve from the listener's ``RequestBudget``,
and fetched file regions go out with sendfile. What differs is the request, decoded by
``ModernBroker.request_classes`` (api key -> decoder, the same table shape as 0.7's
request types), and the answers, which carry the request's correlation id.

Bad frames (garbage, truncated, sizes above ``max.socket.request.bytes``, an unknown api
key or version) close the connection with one WARNING naming the peer, as on the 0.7 port;
the one exception is an ApiVersions request of a version above 2, which gets error 35 and
the supported list (server/modern_broker.py), so clients fall back.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace

from twisted_broker.network.kafka07 import PACE_BYTES, KafkaServerFactory, KafkaServerProtocol
from twisted_broker.handlers.kafka.dispatch import ModernBroker
from twisted_broker.storage.segment import FileRegion

__all__ = ["KafkaModernFactory", "KafkaModernProtocol"]


class KafkaModernProtocol(KafkaServerProtocol):
    """One connection of the modern listener; ``broker`` is a ModernBroker."""

    def __init__(self, broker: ModernBroker, **options) -> None:
        # Long-polls are the handlers' Deferreds (server/modern_fetch.py), not 0.7's held fetches.
        options["fetch_wait_max_ms"] = 0
        super().__init__(broker, **options)

    _client_host = ""

    def _answer(self, request, started: float) -> None:
        # The peer's address goes with the request, for JoinGroup's member host.
        if not self._client_host:
            peer = self.transport.getPeer()
            self._client_host = f"/{getattr(peer, 'host', peer)}"
        super()._answer(replace(request, client_host=self._client_host), started)

    def _respond(self, request, started: float, pieces) -> None:
        # As the 0.7 port's, with this protocol's request names in the connection figures.
        self._connection.requests += 1
        self._connection.responses += bool(pieces)
        self._connection.last_request = self._broker.request_name(request)
        if not any(isinstance(piece, FileRegion) for piece in pieces):
            self._write_bytes(pieces)
            self._stats.record(request.api_key, time.perf_counter() - started)
            if self._unconfirmed_bytes >= PACE_BYTES:
                self._wait_for_drain()
            return
        self._busy = True
        self._stream(deque(pieces), request.api_key, started)


class KafkaModernFactory(KafkaServerFactory):
    """Builds the connections of the modern listener; they share one RequestBudget."""

    def buildProtocol(self, addr) -> KafkaModernProtocol:
        protocol = KafkaModernProtocol(self._broker, budget=self.budget, clock=self._clock, **self._options)
        protocol.factory = self
        return protocol
