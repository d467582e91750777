"""The modern listener's handler table: decoded requests in, response pieces out.

The listener (network/kafka.py) decodes each frame with ``twisted_broker.codec.kafka`` and
hands the ``Request`` here. A response is ``correlation_id int32`` and the response body,
sent as pieces (bytes and file regions, as the 0.7 broker's, so fetched batches stream from
their segments) behind the frame's size.

Handlers live in the neighbouring modules (fetch, produce, metadata, groups), one table
entry per api key (table.py). A handler takes the ``Request`` and returns the response body
(a dict for the schema walker), a ``WithRecords`` (a body with file regions in its record
sets) or ``None`` (a produce with acks=0: no answer), or a Deferred of one of those
(long-polls, acks=all, ZooKeeper).

What is refused, and how (docs/kafka-protocol.md §7): an ApiVersions request of a version
this broker does not serve (handed on with ``body`` None) is answered with error 35 in the
v0 layout, listing the versions it does serve, so the client can retry with one (KIP-511);
the listener closes the connection for any other unknown key or version, and any body that
does not decode to its end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from twisted.internet.defer import Deferred

from twisted_broker.codec.kafka import errors as kafka_errors
from twisted_broker.codec.kafka.api_keys import API_VERSIONS, SUPPORTED
from twisted_broker.codec.kafka.primitives import Gap
from twisted_broker.codec.kafka.protocol import REQUESTS, Request, encode_response, encode_response_chunks
from twisted_broker.server.stats import BrokerStats


@dataclass(frozen=True, slots=True)
class WithRecords:
    """A response body whose record sets are Gaps, each ``fill`` a list of pieces (bytes and
    file regions) of exactly ``gap.size`` bytes: sent around them, the regions streamed."""

    body: dict


Handler = Callable[[Request], object]


class ModernBroker:
    """Serves the modern protocol's requests; ``handlers`` maps api key -> handler.

    ``stats`` is a BrokerStats sharing the topics' figures with the 0.7 broker but with
    request figures of its own (request types of the two protocols share numbers)."""

    def __init__(self, stats: BrokerStats, handlers: dict[int, Handler]) -> None:
        self.stats = stats
        self._handlers = {API_VERSIONS: self._api_versions, **handlers}
        unknown = set(self._handlers) - set(SUPPORTED)
        if unknown:
            raise ValueError(f"handlers for api keys not in the supported table: {sorted(unknown)}")
        self.api_keys = frozenset(self._handlers)  # what the listener decodes (network/kafka.py)
        # What ApiVersions lists: the keys this broker has handlers and schemas for.
        self.api_versions = [{"api_key": key, "min_version": low, "max_version": high}
                             for key, (low, high) in sorted(SUPPORTED.items())
                             if key in self._handlers and (key, high) in REQUESTS]

    def handle(self, request: Request) -> list | Deferred:
        """The response pieces (empty: no response), or a Deferred of them."""
        result = self._handlers[request.api_key](request)
        if isinstance(result, Deferred):
            return result.addCallback(lambda body: self._frame(request, body))
        return self._frame(request, result)

    def _frame(self, request: Request, body) -> list:
        if body is None:
            return []
        if isinstance(body, WithRecords):
            pieces = []
            for chunk in encode_response_chunks(request.api_key, request.api_version, request.correlation_id,
                                                body.body):
                pieces.extend(chunk.fill if type(chunk) is Gap else (chunk,))
            return pieces
        version = request.api_version if request.body is not None else 0  # v0: unsupported ApiVersions
        return [encode_response(request.api_key, version, request.correlation_id, body)]

    def _api_versions(self, request: Request) -> dict:
        error = kafka_errors.NONE if request.body is not None else kafka_errors.UNSUPPORTED_VERSION
        return {"error_code": error, "api_keys": self.api_versions, "throttle_time_ms": 0}

