"""The fetcher threads of a group member: 0.7's Fetcher and its FetcherRunnables.

After each rebalance the connector (client/zookeeper_consumer.py) starts one FetcherRunnable
per broker holding partitions it owns; each sends MultiFetch rounds for them and puts every
non-empty message set into the queue of the stream that owns the partition
(client/consumer_stream.py). Before the next rebalance, and at shutdown, they are stopped.

The partitions of replicated topics (named by number, broker LEADERS) share one more thread,
which fetches each from its current leader through a ReplicatedConsumer: a leader change is
followed there (a failed round refreshes the metadata, waits fetcher.backoff.ms and asks the
new leader from the same offset), with no rebalance.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping

from twisted_broker.client.consumer_stream import FetchedDataChunk, PartitionTopicInfo
from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.client.replicated_consumer import ReplicatedConsumer
from twisted_broker.client.replicated_topics import LEADERS, Candidates
from twisted_broker.client.simple_consumer import SimpleConsumer
from twisted_broker.errors import InvalidMessage, KafkaError, OffsetOutOfRange
from twisted_broker.codec.kafka07.requests import FetchRequest
from twisted_broker.codec.kafka07.responses import NO_ERROR

log = logging.getLogger(__name__)

_FETCHER_JOIN_S = 2.0  # a fetcher stuck connecting is left to finish alone (its data is dropped)

LookupAddress = Callable[[int], tuple[str, int] | None]
OnReset = Callable[[PartitionTopicInfo, int], None]


class Fetcher:
    """0.7's Fetcher: the FetcherRunnables of one connector, one per broker.

    ``lookup_address`` finds a broker's address again after a connection fails;
    ``on_reset`` records an offset moved by autooffset.reset after OffsetOutOfRange. Both are
    called on the fetcher threads. start() and stop() are called by one thread at a time
    (the rebalance thread, or shutdown holding the rebalance lock).
    """

    def __init__(self, *, fetch_size: int, backoff_ms: int, socket_timeout_ms: int, buffer_size: int,
                 reset_time: int, lookup_address: LookupAddress, on_reset: OnReset,
                 leader_candidates: Candidates = lambda: ()) -> None:
        """``leader_candidates()`` lists the brokers to ask where replicated partitions lead."""
        self._leader_candidates = leader_candidates
        self._fetch_size, self._backoff_ms = fetch_size, backoff_ms
        self._socket_timeout_ms, self._buffer_size = socket_timeout_ms, buffer_size
        self._reset_time, self._lookup_address, self._on_reset = reset_time, lookup_address, on_reset
        self._runnables: list[FetcherRunnable] = []

    def start(self, infos: Iterable[PartitionTopicInfo], brokers: Mapping[int, tuple[str, int]]) -> None:
        """Start one thread per broker for ``infos``; ``brokers`` has the addresses known now."""
        by_broker: dict[int, list[PartitionTopicInfo]] = defaultdict(list)
        for info in infos:
            by_broker[info.broker_id].append(info)
        for broker_id, broker_infos in sorted(by_broker.items()):
            runnable_class = LeadersFetcherRunnable if broker_id == LEADERS else FetcherRunnable
            runnable = runnable_class(broker_id, broker_infos, address=brokers.get(broker_id),
                                       lookup_address=self._lookup_address, fetch_size=self._fetch_size,
                                       backoff_ms=self._backoff_ms, socket_timeout_ms=self._socket_timeout_ms,
                                       buffer_size=self._buffer_size, reset_time=self._reset_time,
                                       on_reset=self._on_reset)
            runnable.leader_candidates = self._leader_candidates
            self._runnables.append(runnable)
            runnable.start()

    def initial_offset(self, topic: str, partition_id: int, address: tuple[str, int] | None) -> int | None:
        """The earliest or latest offset (autooffset.reset) of a partition with no committed
        offset, asked of its broker at ``address``; None if it cannot say now (its fetcher
        asks again when it starts)."""
        if address is None:
            return None
        try:
            with SimpleConsumer(address[0], address[1], socket_timeout_ms=self._socket_timeout_ms,
                                buffer_size=self._buffer_size) as consumer:
                offsets = consumer.get_offsets_before(topic, partition_id, self._reset_time, 1)
        except (OSError, ValueError, KafkaError) as exc:
            log.warning("reading the start offset of %s-%d at %s:%d failed (%s); its fetcher will retry",
                        topic, partition_id, *address, exc)
            return None
        return offsets[0] if offsets else None

    def stop(self) -> None:
        """Stop every thread, waiting up to ``_FETCHER_JOIN_S`` in all for them to end."""
        runnables, self._runnables = self._runnables, []
        for runnable in runnables:
            runnable.stop()
        deadline = time.monotonic() + _FETCHER_JOIN_S
        for runnable in runnables:
            runnable.join(max(deadline - time.monotonic(), 0))
            if runnable.is_alive():
                # Blocked connecting to a dead broker: it ends by itself, and whatever it still
                # fetches is dropped, its partitions being deactivated next.
                log.warning("fetcher for broker %d is still busy; leaving it to stop by itself", runnable.broker_id)


class FetcherRunnable(threading.Thread):
    """0.7's FetcherRunnable: MultiFetch rounds to one broker for the partitions owned there,
    ``fetch.size`` bytes each, sleeping ``fetcher.backoff.ms`` after a round with no data.

    Unlike 0.7's, which died on a socket error until the next rebalance, it reconnects after
    ``fetcher.backoff.ms`` (re-reading the broker's address, which a restart may change).
    """

    def __init__(self, broker_id: int, infos: list[PartitionTopicInfo], *,
                 address: tuple[str, int] | None,
                 lookup_address: LookupAddress,
                 fetch_size: int, backoff_ms: int, socket_timeout_ms: int, buffer_size: int,
                 reset_time: int, on_reset: OnReset) -> None:
        super().__init__(name=f"fetcher-{broker_id}", daemon=True)
        self.broker_id, self._infos = broker_id, infos
        self._address, self._lookup_address = address, lookup_address
        self._fetch_size, self._backoff_s = fetch_size, backoff_ms / 1000
        self._socket_timeout_ms, self._buffer_size = socket_timeout_ms, buffer_size
        self._reset_time, self._on_reset = reset_time, on_reset
        self._stopped = threading.Event()

    def stop(self) -> None:
        """Ask the thread to stop (any thread); it ends after its current request."""
        self._stopped.set()

    def run(self) -> None:
        consumer: SimpleConsumer | ReplicatedConsumer | None = None
        try:
            while not self._stopped.is_set():
                if consumer is None:
                    consumer = self._connect()
                    if consumer is None:
                        log.warning("broker %d is not registered; its partitions wait", self.broker_id)
                        self._stopped.wait(self._backoff_s)
                        continue
                try:
                    read = self._round(consumer)
                except (OSError, ValueError, KafkaError) as exc:  # ValueError: UnexpectedResponse
                    if self._stopped.is_set():
                        break
                    log.warning("fetching from %s failed (%s); retrying in %.0f ms",
                                self._source(), exc, self._backoff_s * 1000)
                    consumer.close()
                    consumer = None
                    self._address = None
                    self._stopped.wait(self._backoff_s)
                    continue
                if read == 0:
                    self._stopped.wait(self._backoff_s)
        finally:
            if consumer is not None:
                consumer.close()

    def _connect(self) -> SimpleConsumer | None:
        """A consumer of this thread's broker; None if it is not registered now."""
        self._address = self._address or self._lookup_address(self.broker_id)
        if self._address is None:
            return None
        return SimpleConsumer(*self._address, socket_timeout_ms=self._socket_timeout_ms, buffer_size=self._buffer_size)

    def _source(self) -> str:
        host, port = self._address or ("?", 0)
        return f"broker {self.broker_id} at {host}:{port}"

    def _round(self, consumer: SimpleConsumer | ReplicatedConsumer) -> int:
        """One MultiFetch for the partitions still fetching; returns the valid bytes queued."""
        infos = [info for info in self._infos if info.fetching]
        if not infos:
            return 0
        for info in infos:
            if info.fetch_offset is None:
                self._reset(consumer, info, write=False)
        infos = [info for info in infos if info.fetch_offset is not None]
        if not infos:
            return 0
        sets = consumer.multifetch([FetchRequest(info.topic, info.partition_id, info.fetch_offset, self._fetch_size)
                                    for info in infos])
        read = 0
        for fetched, info in zip(sets, infos):
            if self._stopped.is_set():
                break
            if fetched.error_code == OffsetOutOfRange.code:
                log.info("offset %d of %s:%s is out of range; resetting", fetched.offset, info.topic, info.partition)
                self._reset(consumer, info, write=True)
            elif fetched.error_code != NO_ERROR or (fetched.valid_bytes == 0 and fetched.size_bytes > 0):
                # A broker error, or a first message larger than fetch.size: no later fetch
                # can get past it. The user's iterator raises it; the partition stops.
                error = _error_of(fetched)
                log.error("stopping %s:%s: %s", info.topic, info.partition, error)
                info.fetching = False
                info.stream._put(FetchedDataChunk(info, None, fetched.offset, error), self._stopped)
            elif fetched.valid_bytes and info.stream._put(FetchedDataChunk(info, fetched, fetched.offset), self._stopped):
                info.fetch_offset = fetched.next_offset
                read += fetched.valid_bytes
        return read

    def _reset(self, consumer: SimpleConsumer | ReplicatedConsumer, info: PartitionTopicInfo, *, write: bool) -> None:
        """Move a partition to the earliest or latest offset (autooffset.reset); after an
        OffsetOutOfRange also write it to the offsets path, as 0.7 does."""
        offsets = consumer.get_offsets_before(info.topic, info.partition_id, self._reset_time, 1)
        if not offsets:
            raise ValueError(f"broker {self.broker_id} returned no offset for {info.topic}:{info.partition}")
        if self._stopped.is_set() or not info.active:
            return
        info.fetch_offset = info.consumed_offset = offsets[0]
        if write:
            self._on_reset(info, offsets[0])


class LeadersFetcherRunnable(FetcherRunnable):
    """The fetcher of the replicated partitions a member owns: each from its leader, one
    MultiFetch per leader. A round that fails (leader gone, no leader yet) refreshes the
    metadata and is tried again after fetcher.backoff.ms, from the same offsets."""

    leader_candidates: Candidates

    def _connect(self) -> ReplicatedConsumer:
        # leader_wait_ms=0: one try per round; this thread's loop does the waiting, so stop()
        # is seen within fetcher.backoff.ms.
        return ReplicatedConsumer(self.leader_candidates, socket_timeout_ms=self._socket_timeout_ms,
                                  buffer_size=self._buffer_size, leader_wait_ms=0)

    def _source(self) -> str:
        return "the leaders of replicated partitions"


def _error_of(fetched: FetchedMessageSet) -> Exception:
    try:
        iter(fetched)  # raises the broker's error, or InvalidFetchSize
    except Exception as exc:
        return exc
    return InvalidMessage(fetched.offset, "no complete message in the fetched set")
