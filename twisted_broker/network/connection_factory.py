"""The factory of a Kafka listener's connections: one ``RequestBudget`` for them all, and the
list of open connections that a stopping broker drops."""

from __future__ import annotations

from twisted.internet.protocol import Factory

from twisted_broker.network.connection import DEFAULT_MAX_REQUEST_BYTES, FramedConnection
from twisted_broker.network.request_budget import RequestBudget


class ConnectionFactory(Factory):
    """Builds the connections of one listening port (``protocol``, given ``table``, the
    handler table); they share one RequestBudget.

    ``max_buffered_request_bytes`` (default: twice the largest request) bounds what partly
    received big requests may hold in all; ``clock`` (the reactor) enables the
    stalled-request timeout and the turns between connections.
    """

    protocol: type[FramedConnection]
    noisy = False  # one log line per connection would drown the broker log

    def __init__(self, table, *, max_buffered_request_bytes: int | None = None, clock=None,
                 **protocol_options) -> None:
        self._table, self._options = table, protocol_options
        self.connections: set[FramedConnection] = set()
        if max_buffered_request_bytes is None:
            max_buffered_request_bytes = 2 * protocol_options.get("max_request_size", DEFAULT_MAX_REQUEST_BYTES)
        self.budget = RequestBudget(max_buffered_request_bytes)
        self._clock = clock

    def disconnect_all(self) -> None:
        """Drop every connection now (broker shutdown: no request may reach a closing log)."""
        for protocol in list(self.connections):
            protocol.transport.abortConnection()

    def buildProtocol(self, addr) -> FramedConnection:
        protocol = self.protocol(self._table, budget=self.budget, clock=self._clock, **self._options)
        protocol.factory = self
        return protocol
