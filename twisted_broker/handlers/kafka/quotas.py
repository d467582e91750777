"""Client quotas on Produce and Fetch of the modern listener (docs/security.md, "Quotas").

``QuotaChecks.wrap`` wraps the two handlers. With no quota of a type set anywhere, its
handler is called as it is (one test of an empty table). Otherwise, as Kafka's KafkaApis:

- Produce: once the answer is ready, the request's size is recorded against the rate that
  holds the principal's user and the client id; a throttle time goes into the answer's
  ``throttle_time_ms`` and to ``request.throttle``, which mutes the connection
  (network/muted_connection.py). acks=0 has no answer, and is muted all the same.
- Fetch (consumers', not followers'): ``max_bytes`` is cut to what the quota allows in its
  window (else one big answer would throttle every fetch); once the answer is ready its
  record bytes are recorded. If that throttles, they are taken back out of the rate, the
  records are not sent (their file regions closed) and the answer is Kafka's throttled
  one: no partitions, the throttle time.

Each throttle is counted in the listener's figures (server/stats.py ``RequestStats.throttled``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from twisted.internet.defer import Deferred

from twisted_broker.codec.kafka import api_keys
from twisted_broker.codec.kafka import errors as kafka_errors
from twisted_broker.codec.kafka.primitives import Gap
from twisted_broker.codec.kafka.protocol import Request, WithRecords
from twisted_broker.security.quota import ClientQuotas, user_of
from twisted_broker.server.stats import RequestStats

_Handler = Callable[[Request], object]  # handlers/kafka/table.py's Handler


class QuotaChecks:
    """``produce`` and ``fetch``: the ClientQuotas of each type (kept by registry/quota_watch.py);
    ``clock`` gives the time; ``stats`` the modern listeners' request figures."""

    def __init__(self, produce: ClientQuotas, fetch: ClientQuotas, *, clock, stats: RequestStats) -> None:
        self.produce, self.fetch, self.clock, self.stats = produce, fetch, clock, stats

    def wrap(self, handlers: dict[int, _Handler]) -> dict[int, _Handler]:
        wrapped = dict(handlers)
        if api_keys.PRODUCE in handlers:
            wrapped[api_keys.PRODUCE] = self._checked_produce(handlers[api_keys.PRODUCE])
        if api_keys.FETCH in handlers:
            wrapped[api_keys.FETCH] = self._checked_fetch(handlers[api_keys.FETCH])
        return wrapped

    def _checked_produce(self, handler: _Handler) -> _Handler:
        def produce(request: Request):
            if not self.produce.enabled:
                return handler(request)
            return _then(handler(request), lambda body: self._produced(request, body))
        return produce

    def _produced(self, request: Request, body):
        throttle_ms = self._record(self.produce, "produce", request, request.size)
        if throttle_ms and body is not None:
            body["throttle_time_ms"] = throttle_ms
        return body

    def _checked_fetch(self, handler: _Handler) -> _Handler:
        def fetch(request: Request):
            if not self.fetch.enabled or request.body["replica_id"] >= 0:
                return handler(request)
            most = self.fetch.max_value_in_window(user_of(request.principal), request.client_id or "")
            if most is not None and request.body["max_bytes"] > most:
                request = replace(request, body={**request.body, "max_bytes": max(1, int(most))})
            return _then(handler(request), lambda answer: self._fetched(request, answer))
        return fetch

    def _fetched(self, request: Request, answer):
        body = answer.body if isinstance(answer, WithRecords) else answer
        size = sum(_records_size(part["records"]) for topic in body["responses"] for part in topic["partitions"])
        throttle_ms = self._record(self.fetch, "fetch", request, size)
        if not throttle_ms:
            return answer
        self.fetch.unrecord(user_of(request.principal), request.client_id or "", size, self.clock.seconds())
        for topic in body["responses"]:
            for part in topic["partitions"]:
                _close(part["records"])
        return {"throttle_time_ms": throttle_ms, "error_code": kafka_errors.NONE, "session_id": 0, "responses": []}

    def _record(self, quotas: ClientQuotas, quota_type: str, request: Request, size: int) -> int:
        user, client_id = user_of(request.principal), request.client_id or ""
        throttle_ms = quotas.record(user, client_id, size, self.clock.seconds())
        if throttle_ms:
            found = quotas.quota_for(user, client_id)
            if found is not None:
                self.stats.throttled(quota_type, *found[0], throttle_ms)
            if request.throttle is not None:
                request.throttle(throttle_ms)
        return throttle_ms


def _then(answer, callback):
    if isinstance(answer, Deferred):
        return answer.addCallback(callback)  # the same Deferred: its writes_done stays
    return callback(answer)


def _records_size(records) -> int:
    return records.size if type(records) is Gap else len(records or b"")


def _close(records) -> None:
    if type(records) is Gap:
        for piece in records.fill:
            if hasattr(piece, "close"):
                piece.close()
