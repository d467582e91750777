"""The factory of a Kafka listener's connections: one ``RequestBudget`` for them all, the
list of open connections that a stopping broker drops, and the connections-per-address limit
(connection_limits.py) shared by every Kafka listener."""

from __future__ import annotations

import logging
import time

from twisted.internet.protocol import Factory, Protocol

from twisted_broker.network.connection import DEFAULT_MAX_REQUEST_BYTES, FramedConnection
from twisted_broker.network.connection_limits import ConnectionLimits
from twisted_broker.network.request_budget import RequestBudget

log = logging.getLogger(__name__)


class OpenConnections(set):
    """The open connections (FramedConnection adds and discards itself), each also counted
    against its address's limit."""

    def __init__(self, limits: ConnectionLimits | None) -> None:
        super().__init__()
        self._limits = limits

    def add(self, protocol) -> None:
        if self._limits is not None and protocol not in self:
            self._limits.opened(_host(protocol.transport.getPeer()))
        super().add(protocol)

    def discard(self, protocol) -> None:
        if self._limits is not None and protocol in self:
            self._limits.closed(_host(protocol.transport.getPeer()))
        super().discard(protocol)


class ConnectionFactory(Factory):
    """Builds the connections of one listening port (``protocol``, given ``table``, the
    handler table); they share one RequestBudget.

    ``max_buffered_request_bytes`` (default: twice the largest request) bounds what partly
    received big requests may hold in all; ``clock`` (the reactor) enables the
    stalled-request timeout and the turns between connections; ``limits`` (None: unlimited)
    refuses connections from an address over ``max.connections.per.ip``.
    """

    protocol: type[FramedConnection]
    noisy = False  # one log line per connection would drown the broker log

    def __init__(self, table, *, max_buffered_request_bytes: int | None = None, clock=None,
                 limits: ConnectionLimits | None = None, **protocol_options) -> None:
        self._table, self._options = table, protocol_options
        self._limits = limits
        self.connections: set[FramedConnection] = OpenConnections(limits)
        if max_buffered_request_bytes is None:
            max_buffered_request_bytes = 2 * protocol_options.get("max_request_size", DEFAULT_MAX_REQUEST_BYTES)
        self.budget = RequestBudget(max_buffered_request_bytes)
        self._clock = clock

    def disconnect_all(self) -> None:
        """Drop every connection now (broker shutdown: no request may reach a closing log)."""
        for protocol in list(self.connections):
            protocol.transport.abortConnection()

    def buildProtocol(self, addr) -> FramedConnection | Protocol:
        if self._limits is not None and not self._limits.admit(_host(addr)):
            self._refused(_host(addr))
            return RefusedConnection()
        protocol = self.protocol(self._table, budget=self.budget, clock=self._clock, **self._options)
        protocol.factory = self
        return protocol

    def _refused(self, host: str) -> None:
        unlogged = self._limits.warning_due(host, self._clock.seconds() if self._clock else time.monotonic())
        if unlogged is not None:
            more = f" ({unlogged} more refused since the last warning)" if unlogged else ""
            log.warning("closing connection from %s: over max.connections.per.ip (%d)%s", host,
                        self._limits.limit(host), more)


class RefusedConnection(Protocol):
    """A connection over its address's limit: closed as soon as it is made, nothing read.
    (Not None from buildProtocol: TLS's wrapping factory would wrap the None.)"""

    def connectionMade(self) -> None:
        self.transport.abortConnection()


def _host(address) -> str:
    return getattr(address, "host", str(address))
