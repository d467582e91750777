"""Request handling of the modern listener: frames in, response pieces out.

A request frame is ``api_key int16, api_version int16, correlation_id int32, client_id
nullable string`` (header v1) and then the body of that (key, version), decoded by the
schema tables of ``twisted_broker.codec.kafka``. A response is ``correlation_id int32`` and
the response body, sent as pieces (bytes and file regions, as the 0.7 broker's, so fetched
batches stream from their segments) behind the frame's size.

Handlers live in the neighbouring ``modern_*`` modules, one table entry per api key. A
handler takes the ``Request`` and returns the response body (a dict for the schema
walker), a ``WithRecords`` (a body with file regions in its record sets) or ``None`` (a produce
with acks=0: no answer), or a Deferred of one of those (long-polls, acks=all, ZooKeeper).

What is refused, and how (docs/kafka-protocol.md §7): an ApiVersions request of a version
this broker does not serve is answered with error 35 in the v0 layout, listing the versions
it does serve, so the client can retry with one (KIP-511); any other unknown key or version,
and any body that does not decode to its end, closes the connection (``RefusedFrame``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from twisted.internet.defer import Deferred

from twisted_broker.codec.kafka import errors as kafka_errors
from twisted_broker.codec.kafka.api_keys import API_NAMES, API_VERSIONS, SUPPORTED
from twisted_broker.codec.kafka.primitives import Gap, Malformed
from twisted_broker.codec.kafka.protocol import (
    REQUESTS, Request, UnsupportedVersion, decode_request, encode_response, encode_response_chunks,
)
from twisted_broker.server.stats import BrokerStats
from twisted_broker.codec.kafka07.requests import UnknownRequestType



class RefusedFrame(UnknownRequestType):
    """A frame this listener does not serve: the protocol closes the connection with one
    WARNING, as for 0.7's unknown request types (its subclass, so the same loop refuses it)."""

    def __init__(self, api_key: int, reason: str) -> None:
        ValueError.__init__(self, reason)
        self.request_type = api_key


@dataclass(frozen=True, slots=True)
class WithRecords:
    """A response body whose record sets are Gaps, each ``fill`` a list of pieces (bytes and
    file regions) of exactly ``gap.size`` bytes: sent around them, the regions streamed."""

    body: dict


class _Decoder:
    """One row of ``ModernBroker.request_classes``: what the 0.7 port's ``decode_request``
    calls for a frame whose first int16 is this api key (so ``pos`` is 2)."""

    __slots__ = ("api_key",)

    def __init__(self, api_key: int) -> None:
        self.api_key = api_key

    def decode(self, frame, pos: int) -> tuple[Request, int]:
        try:
            return decode_request(frame), len(frame)
        except UnsupportedVersion as exc:
            if exc.api_key == API_VERSIONS:  # answered with the supported list, whatever its body
                return Request(exc.api_key, exc.api_version, exc.correlation_id, None, None), len(frame)
            raise RefusedFrame(self.api_key, f"{exc} (v{SUPPORTED[exc.api_key][0]}-v{SUPPORTED[exc.api_key][1]} are)")
        except Malformed as exc:
            raise RefusedFrame(self.api_key, f"malformed {API_NAMES[self.api_key]}: {exc}") from None


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
        self.request_classes = {key: _Decoder(key) for key in self._handlers}
        # What ApiVersions lists: the keys this broker has handlers and schemas for.
        self.api_versions = [{"api_key": key, "min_version": low, "max_version": high}
                             for key, (low, high) in sorted(SUPPORTED.items())
                             if key in self._handlers and (key, high) in REQUESTS]

    def request_name(self, request: Request) -> str:
        return API_NAMES[request.api_key]

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

