"""Asking brokers over the 0.7 wire protocol: one connection per broker, offsets kept briefly.

``BrokerClients`` keeps one TwistedSimpleConsumer per broker, connected on first use and
replaced when it is lost or when the broker registers another address. 0.7 serves one
request at a time per connection, in order, so requests from concurrent page views queue on
it (the client pipelines them). A broker that refused a connection is not asked again for
``retry_after_s``, so a page listing a dead broker's partitions does not wait for each.

``OffsetBook`` answers a partition's earliest and latest offsets (Offsets requests with time
-2 and -1, spec 4.4), keeps each answer ``ttl_s`` and shares one request among callers asking
at once. It also remembers recent latest offsets to give a byte rate: offsets are byte
positions, so (latest now - latest then) / elapsed is the rate at which the partition grows
(the message rate in bytes; a message count is not in the wire protocol).

What fails (a broker down, a timeout) reads as None: the pages show it as unknown, with the
last error of that broker.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from twisted.internet.defer import Deferred, FirstError, ensureDeferred, gatherResults

from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.client.twisted_client import TwistedSimpleConsumer
from twisted_broker.codec.kafka07.requests import EARLIEST_TIME, LATEST_TIME, FetchRequest

log = logging.getLogger(__name__)

T = TypeVar("T")


async def gather(awaitables: Iterable[Awaitable[T]]) -> list[T]:
    """Run coroutines (or Deferreds) concurrently; their results in order. Raises the first
    exception any of them raised (not Twisted's FirstError wrapper)."""
    try:
        return await gatherResults([ensureDeferred(a) for a in awaitables], consumeErrors=True)
    except FirstError as exc:
        raise exc.subFailure.value from None


class BrokerUnavailable(ConnectionError):
    """The broker is not registered, refused the connection, or did not answer in time."""


class BrokerClients:
    """One TwistedSimpleConsumer per broker id; ``address_of(id)`` gives ``(host, port)``."""

    def __init__(self, reactor, address_of: Callable[[int], tuple[str, int] | None], *,
                 socket_timeout_ms: int = 5000, retry_after_s: float = 2.0) -> None:
        self._reactor = reactor
        self._address_of = address_of
        self._socket_timeout_ms = socket_timeout_ms
        self._retry_after_s = retry_after_s
        self._clients: dict[int, tuple[tuple[str, int], TwistedSimpleConsumer]] = {}
        self._connecting: dict[int, tuple[tuple[str, int], list[Deferred]]] = {}
        self._refused: dict[int, tuple[float, str]] = {}  # broker -> (until, reason)
        self.errors: dict[int, str] = {}  # broker -> last error, for the pages
        self.requests = 0

    async def consumer(self, broker_id: int) -> TwistedSimpleConsumer:
        """The connected consumer of ``broker_id``. Raises BrokerUnavailable."""
        address = self._address_of(broker_id)
        if address is None:
            raise BrokerUnavailable(f"broker {broker_id} is not registered")
        current = self._clients.get(broker_id)
        if current is not None:
            if current[0] == address and not current[1].protocol.disconnected.called:
                return current[1]
            self._drop(broker_id)
        refused = self._refused.get(broker_id)
        if refused is not None and refused[0] > self._reactor.seconds():
            raise BrokerUnavailable(refused[1])
        connecting = self._connecting.get(broker_id)
        if connecting is not None and connecting[0] == address:
            waiter: Deferred[TwistedSimpleConsumer] = Deferred()
            connecting[1].append(waiter)
            return await waiter
        waiters: list[Deferred] = []
        self._connecting[broker_id] = (address, waiters)
        try:
            consumer = await TwistedSimpleConsumer.connect(self._reactor, *address,
                                                           socket_timeout_ms=self._socket_timeout_ms)
        except Exception as exc:
            reason = f"broker {broker_id} at {address[0]}:{address[1]}: {exc.__class__.__name__} {exc}".strip()
            self._refused[broker_id] = (self._reactor.seconds() + self._retry_after_s, reason)
            self.errors[broker_id] = reason
            self._done_connecting(broker_id, waiters)
            for waiter in waiters:
                waiter.errback(BrokerUnavailable(reason))
            raise BrokerUnavailable(reason) from None
        self._done_connecting(broker_id, waiters)
        self._refused.pop(broker_id, None)
        self._clients[broker_id] = (address, consumer)
        consumer.protocol.disconnected.addCallback(lambda _: self._forget(broker_id, consumer))
        for waiter in waiters:
            waiter.callback(consumer)
        return consumer

    async def offsets(self, broker_id: int, topic: str, partition: int, time: int, max_offsets: int) -> list[int]:
        """An Offsets request's answer, newest first. Raises BrokerUnavailable."""
        return await self._call(broker_id, lambda c: c.get_offsets_before(topic, partition, time, max_offsets))

    async def fetch(self, broker_id: int, topic: str, partition: int, offset: int, max_size: int) -> FetchedMessageSet:
        """A Fetch request's message set (its error code inside). Raises BrokerUnavailable."""
        return await self._call(broker_id, lambda c: c.fetch(FetchRequest(topic, partition, offset, max_size)))

    async def _call(self, broker_id: int, request: Callable[[TwistedSimpleConsumer], Deferred]) -> Any:
        consumer = await self.consumer(broker_id)
        self.requests += 1
        try:
            result = await request(consumer)
        except Exception as exc:
            reason = f"broker {broker_id}: {exc.__class__.__name__} {exc}".strip()
            self.errors[broker_id] = reason
            raise BrokerUnavailable(reason) from None
        self.errors.pop(broker_id, None)
        return result

    def _done_connecting(self, broker_id: int, waiters: list[Deferred]) -> None:
        # Only our own entry: a connection to a newer address may have replaced it meanwhile.
        if self._connecting.get(broker_id, (None, None))[1] is waiters:
            del self._connecting[broker_id]

    def _forget(self, broker_id: int, consumer: TwistedSimpleConsumer) -> None:
        current = self._clients.get(broker_id)
        if current is not None and current[1] is consumer:
            del self._clients[broker_id]

    def _drop(self, broker_id: int) -> None:
        _address, consumer = self._clients.pop(broker_id)
        consumer.close()

    def close(self) -> None:
        """Close every connection (requests under way fail)."""
        for broker_id in list(self._clients):
            self._drop(broker_id)


class RateTracker:
    """Rates of counters that only grow, from observations within the last ``window_s``."""

    def __init__(self, window_s: float = 60.0, min_span_s: float = 1.0) -> None:
        self._window_s, self._min_span_s = window_s, min_span_s
        self._seen: dict[object, deque[tuple[float, int]]] = {}

    def observe(self, key: object, now: float, value: int) -> None:
        seen = self._seen.setdefault(key, deque())
        if seen and value < seen[-1][1]:
            seen.clear()  # the counter went back (the log was recreated): start over
        seen.append((now, value))
        while len(seen) > 2 and now - seen[1][0] > self._window_s:
            seen.popleft()

    def rate(self, key: object, now: float) -> float | None:
        """Growth per second over the window; None until two observations are far enough apart."""
        seen = self._seen.get(key)
        if not seen or len(seen) < 2:
            return None
        (t0, v0), (t1, v1) = seen[0], seen[-1]
        if t1 - t0 < self._min_span_s or now - t1 > self._window_s:
            return None
        return (v1 - v0) / (t1 - t0)


class OffsetBook:
    """Earliest and latest offsets of partitions, asked of their brokers, kept ``ttl_s``."""

    def __init__(self, clients: BrokerClients, clock, *, ttl_s: float = 1.0, rate_window_s: float = 60.0) -> None:
        self.clients = clients
        self._clock = clock
        self._ttl_s = ttl_s
        self._answers: dict[tuple, tuple[float, int | None]] = {}
        self._waiting: dict[tuple, list[Deferred]] = {}
        self.rates = RateTracker(rate_window_s)

    async def latest(self, topic: str, broker_id: int, partition: int) -> int | None:
        """The partition's flushed end (Offsets(-1)); None if its broker did not answer."""
        return await self._offset(topic, broker_id, partition, LATEST_TIME)

    async def earliest(self, topic: str, broker_id: int, partition: int) -> int | None:
        """The start of the partition's oldest segment (Offsets(-2)); None if unknown."""
        return await self._offset(topic, broker_id, partition, EARLIEST_TIME)

    def byte_rate(self, topic: str, broker_id: int, partition: int) -> float | None:
        """Bytes per second the partition grew by, from the latest offsets seen lately."""
        return self.rates.rate((topic, broker_id, partition), self._clock.seconds())

    def forget_before(self, cutoff: float) -> None:
        """Drop answers older than ``cutoff`` (memory stays bounded by what is viewed)."""
        for key in [key for key, (when, _) in self._answers.items() if when < cutoff]:
            del self._answers[key]

    async def _offset(self, topic: str, broker_id: int, partition: int, time: int) -> int | None:
        key = (topic, broker_id, partition, time)
        now = self._clock.seconds()
        answer = self._answers.get(key)
        if answer is not None and now - answer[0] < self._ttl_s:
            return answer[1]
        waiting = self._waiting.get(key)
        if waiting is not None:
            d: Deferred[int | None] = Deferred()
            waiting.append(d)
            return await d
        self._waiting[key] = waiters = []
        try:
            offsets = await self.clients.offsets(broker_id, topic, partition, time, 1)
            value = offsets[0] if offsets else None
        except BrokerUnavailable:
            value = None
        except Exception:
            log.exception("offsets of %s %d-%d", topic, broker_id, partition)
            value = None
        finally:
            del self._waiting[key]
        now = self._clock.seconds()
        self._answers[key] = (now, value)
        if value is not None and time == LATEST_TIME:
            self.rates.observe((topic, broker_id, partition), now, value)
        for waiter in waiters:
            waiter.callback(value)
        return value
