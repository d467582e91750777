"""ZookeeperConsumerConnector: a member of a Kafka 0.7 consumer group, blocking and thread-based
as 0.7's ``kafka.consumer.ZookeeperConsumerConnector`` (with its KafkaStream, ConsumerIterator,
PartitionTopicInfo and FetcherRunnable), sharing groups with Java consumers (spec 5).

How this works
--------------
``create_message_streams({topic: n})`` (or ``create_message_streams_by_filter``) registers the
consumer in ``/consumers/<g>/ids/<id>``, then rebalances: every member computes the same range
assignment (registry/rebalance.py) from the registrations and ``/brokers/topics``, and takes
its partitions by creating ephemeral ``owners`` nodes. One fetcher thread per broker sends
MultiFetch rounds for the partitions owned there and puts each non-empty message set (a
"chunk") into the bounded queue of the stream that owns the partition. Iterating a stream
takes chunks and yields their messages; handing a message to the user advances the
partition's **consumed offset** to that message's ``next_offset`` (spec 3.5), and commits
(``autocommit.interval.ms``, ``commit_offsets()``, before each rebalance, at shutdown) write
the consumed offsets to ``/consumers/<g>/offsets/<t>/<b>-<p>``. Delivery is at least once.

A change of the group's members, of a subscribed topic's brokers, or (for a filter) of the
topic list wakes the rebalance thread; rebalances run there only, one at a time, events that
arrive meanwhile coalescing into one more. A rebalance (spec 5.5) reads the group and computes
this member's share; if that is what it owns already, nothing else happens. Otherwise it stops
the fetchers, drops queued chunks, commits, deletes its owner nodes, claims its new partitions
(all of them, or none: on a conflict it deletes this attempt's nodes, sleeps
``rebalance.backoff.ms`` and tries again, ``rebalance.retries.max`` attempts in all), reads
their offsets and starts the fetchers. Dropping chunks and deactivating the old partitions
happen under each stream's lock, so no message of a released partition reaches the user
after the commit: the next owner starts exactly where this one stopped.

Threads: the caller's (create_message_streams*, commit_offsets, shutdown), the user's
(iterating streams; a stream may be shared by threads), ``rebalance-<consumerId>``, one
``fetcher-<b>`` per broker, ``autocommit-<consumerId>``, and kazoo's, which only record events.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass

from twisted_broker.client.fetched_message_set import FetchedMessageSet
from twisted_broker.client.simple_consumer import EARLIEST_TIME, LATEST_TIME, SimpleConsumer
from twisted_broker.client.topic_filter import TopicFilter, topic_filter_for
from twisted_broker.config import ConfigError, ConsumerConfig
from twisted_broker.errors import CrcMismatch, InvalidMessage, KafkaError, OffsetOutOfRange
from twisted_broker.registry import paths, rebalance
from twisted_broker.registry.consumer_registry import EXPIRED, ConsumerRegistry, RegistryError
from twisted_broker.wire.message import Message
from twisted_broker.wire.requests import FetchRequest
from twisted_broker.wire.responses import NO_ERROR

log = logging.getLogger(__name__)

_FETCHER_JOIN_S = 2.0  # a fetcher stuck connecting is left to finish alone (its data is dropped)
_PUT_POLL_S = 0.1  # a fetcher blocked on a full queue checks this often whether it must stop


class ConsumerTimeout(Exception):
    """No message arrived within ``consumer.timeout.ms``; the stream can be iterated again."""


class ConsumerRebalanceFailed(Exception):
    """A rebalance found partitions owned by others through all ``rebalance.retries.max``
    attempts (or ZooKeeper failed each time)."""


@dataclass(frozen=True, slots=True)
class MessageAndMetadata:
    """One consumed message. ``offset`` is where its entry starts (for a message inside a
    compressed wrapper, the wrapper's), ``next_offset`` where consumption resumes after it
    (spec 3.5): committing after this message writes ``next_offset``."""

    topic: str
    partition: str  # <brokerId>-<partId>
    offset: int
    next_offset: int
    payload: bytes
    message: Message

    @property
    def broker_id(self) -> int:
        return paths.parse_partition_name(self.partition)[0]

    @property
    def partition_id(self) -> int:
        return paths.parse_partition_name(self.partition)[1]


class PartitionTopicInfo:
    """One partition this consumer owns: where its fetcher reads next, what the user has
    consumed, what was last committed. Deactivated for good when the partition is released."""

    __slots__ = ("topic", "partition", "broker_id", "partition_id", "thread_id", "stream",
                 "fetch_offset", "consumed_offset", "committed_offset", "active", "fetching")

    def __init__(self, topic: str, partition: str, thread_id: str, stream: "KafkaStream",
                 offset: int | None, committed_offset: int | None) -> None:
        self.topic, self.partition, self.thread_id, self.stream = topic, partition, thread_id, stream
        self.broker_id, self.partition_id = paths.parse_partition_name(partition)
        self.fetch_offset = offset  # None: resolved by autooffset.reset before the first fetch
        self.consumed_offset = offset
        self.committed_offset = committed_offset
        self.active = True  # False once released: nothing of it may reach the user any more
        self.fetching = True  # False after an error the fetcher cannot get past

    def __repr__(self) -> str:
        return (f"{self.topic}:{self.partition}: fetched offset {self.fetch_offset}, consumed "
                f"offset {self.consumed_offset}, owner {self.thread_id}")


class _Chunk:
    """What a fetcher hands a stream: a fetched set, or the error that stopped a partition."""

    __slots__ = ("info", "message_set", "fetch_offset", "error")

    def __init__(self, info: PartitionTopicInfo, message_set: FetchedMessageSet | None,
                 fetch_offset: int, error: Exception | None = None) -> None:
        self.info, self.message_set, self.fetch_offset, self.error = info, message_set, fetch_offset, error


_SHUTDOWN = object()  # the queue item that ends iteration (0.7's shutdownCommand)


class KafkaStream:
    """A blocking iterator over the messages of the partitions assigned to one stream.

    It never ends while the connector runs: ``next()`` waits for data, or raises
    ConsumerTimeout after ``consumer.timeout.ms`` (>= 0) without a message (the stream stays
    usable). After the connector's shutdown() it raises StopIteration. A message failing its
    CRC raises CrcMismatch; the next call goes on with the message after it. Thread-safe.
    """

    def __init__(self, *, max_chunks: int, consumer_timeout_ms: int, shallow: bool) -> None:
        self._queue: queue.Queue = queue.Queue(max(max_chunks, 1))
        self._timeout_s = None if consumer_timeout_ms < 0 else consumer_timeout_ms / 1000
        self._shallow = shallow
        self._lock = threading.Lock()
        self._chunk: _Chunk | None = None
        self._messages: Iterator[tuple[int, int, Message]] | None = None
        self._done = False

    def __iter__(self) -> "KafkaStream":
        return self

    def __next__(self) -> MessageAndMetadata:
        """The next message (user's thread). Raises ConsumerTimeout, StopIteration after
        shutdown, the error a fetch of one of its partitions met (OffsetOutOfRange cannot be
        among them: it is handled by autooffset.reset), or an InvalidMessage subclass."""
        while True:
            with self._lock:
                if self._done:
                    raise StopIteration
                if self._chunk is not None:
                    message = self._next_in_chunk()
                    if message is not None:
                        return message
            try:
                chunk = self._queue.get(timeout=self._timeout_s)
            except queue.Empty:
                raise ConsumerTimeout(f"no message within {self._timeout_s * 1000:.0f} ms") from None
            with self._lock:
                if chunk is _SHUTDOWN:
                    self._done = True
                    self._offer(_SHUTDOWN)  # for other threads waiting on this stream
                    raise StopIteration
                if self._done or not chunk.info.active:
                    continue  # fetched for a partition released since
                self._start_chunk(chunk)

    def _start_chunk(self, chunk: _Chunk) -> None:
        if chunk.error is not None:
            raise chunk.error
        info = chunk.info
        if info.consumed_offset != chunk.fetch_offset:
            log.error("consumed offset %s doesn't match fetch offset %d for %r; consumer may lose data",
                      info.consumed_offset, chunk.fetch_offset, info)
            info.consumed_offset = chunk.fetch_offset
        self._chunk = chunk
        self._messages = chunk.message_set.iter_entries() if self._shallow else iter(chunk.message_set)

    def _next_in_chunk(self) -> MessageAndMetadata | None:
        info = self._chunk.info
        if not info.active:
            self._chunk = self._messages = None
            return None
        try:
            item = next(self._messages, None)
        except InvalidMessage:
            self._chunk = self._messages = None  # the rest of this set cannot be walked
            raise
        if item is None:
            self._chunk = self._messages = None
            return None
        offset, next_offset, message = item
        if not message.is_valid():
            raise CrcMismatch(offset, f"message of {info.topic}:{info.partition} at offset {offset} fails its CRC")
        info.consumed_offset = next_offset
        return MessageAndMetadata(info.topic, info.partition, offset, next_offset, bytes(message.payload), message)

    # -- the connector's side ------------------------------------------------------------------

    def _put(self, chunk: _Chunk, stopped: threading.Event) -> bool:
        """Queue a chunk, waiting while the queue is full (fetcher thread). False if the
        fetcher was stopped before there was room."""
        while not stopped.is_set():
            try:
                self._queue.put(chunk, timeout=_PUT_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _clear(self, infos: list[PartitionTopicInfo]) -> None:
        """Deactivate ``infos`` (this stream's) and drop every queued or current chunk. After
        this returns, no message of them reaches the user, so their consumed offsets are final."""
        with self._lock:
            for info in infos:
                info.active = False
            self._chunk = self._messages = None
            self._drain()

    def _shut_down(self, infos: list[PartitionTopicInfo]) -> None:
        """_clear, then end iteration for every thread using this stream."""
        with self._lock:
            for info in infos:
                info.active = False
            self._chunk = self._messages = None
            self._done = True
            self._drain()
            self._offer(_SHUTDOWN)

    def _drain(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def _offer(self, item: object) -> None:
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            pass  # the queue holds items already: a waiting thread is not blocked


class _Fetcher(threading.Thread):
    """0.7's FetcherRunnable: MultiFetch rounds to one broker for the partitions owned there,
    ``fetch.size`` bytes each, sleeping ``fetcher.backoff.ms`` after a round with no data.

    Unlike 0.7's, which died on a socket error until the next rebalance, it reconnects after
    ``fetcher.backoff.ms`` (re-reading the broker's address, which a restart may change).
    """

    def __init__(self, broker_id: int, infos: list[PartitionTopicInfo], *,
                 address: tuple[str, int] | None,
                 lookup_address: Callable[[int], tuple[str, int] | None],
                 fetch_size: int, backoff_ms: int, socket_timeout_ms: int, buffer_size: int,
                 reset_time: int, on_reset: Callable[[PartitionTopicInfo, int], None]) -> None:
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
        consumer: SimpleConsumer | None = None
        address = self._address
        try:
            while not self._stopped.is_set():
                if consumer is None:
                    address = address or self._lookup_address(self.broker_id)
                    if address is None:
                        log.warning("broker %d is not registered; its partitions wait", self.broker_id)
                        self._stopped.wait(self._backoff_s)
                        continue
                    consumer = SimpleConsumer(address[0], address[1], socket_timeout_ms=self._socket_timeout_ms,
                                              buffer_size=self._buffer_size)
                try:
                    read = self._round(consumer)
                except (OSError, ValueError, KafkaError) as exc:  # ValueError: UnexpectedResponse
                    if self._stopped.is_set():
                        break
                    log.warning("fetching from broker %d at %s:%d failed (%s); retrying in %.0f ms",
                                self.broker_id, address[0], address[1], exc, self._backoff_s * 1000)
                    consumer.close()
                    consumer, address = None, None
                    self._stopped.wait(self._backoff_s)
                    continue
                if read == 0:
                    self._stopped.wait(self._backoff_s)
        finally:
            if consumer is not None:
                consumer.close()

    def _round(self, consumer: SimpleConsumer) -> int:
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
                info.stream._put(_Chunk(info, None, fetched.offset, error), self._stopped)
            elif fetched.valid_bytes and info.stream._put(_Chunk(info, fetched, fetched.offset), self._stopped):
                info.fetch_offset = fetched.next_offset
                read += fetched.valid_bytes
        return read

    def _reset(self, consumer: SimpleConsumer, info: PartitionTopicInfo, *, write: bool) -> None:
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


def _error_of(fetched: FetchedMessageSet) -> Exception:
    try:
        iter(fetched)  # raises the broker's error, or InvalidFetchSize
    except Exception as exc:
        return exc
    return InvalidMessage(fetched.offset, "no complete message in the fetched set")


class ZookeeperConsumerConnector:
    """A consumer group member configured by a ConsumerConfig (``groupid``, ``zk.connect``...).

    Connects to ZooKeeper when built (raises RegistryError if it cannot within
    zk.connectiontimeout.ms; ConfigError without zk.connect). Streams are created once per
    connector. Call shutdown() when done.
    """

    def __init__(self, config: ConsumerConfig, *, hostname: str | None = None) -> None:
        if not config.zk_connect:
            raise ConfigError("zk.connect is required for a consumer group")
        self.config = config
        self.consumer_id = paths.consumer_id(
            config.groupid, consumerid=config.consumerid, hostname=hostname or socket.gethostname(),
            now_ms=int(time.time() * 1000), uuid=uuid.uuid4())
        self._registry = ConsumerRegistry(config.zk_connect, config.groupid,
                                          session_timeout_ms=config.zk_sessiontimeout_ms,
                                          connection_timeout_ms=config.zk_connectiontimeout_ms,
                                          on_event=self._on_registry_event)
        self._registry.start()
        self._reset_time = EARLIEST_TIME if config.autooffset_reset == "smallest" else LATEST_TIME
        self._subscription: paths.Subscription | None = None
        self._topic_streams: dict[str, list[KafkaStream]] = {}
        self._filter_streams: list[KafkaStream] = []
        self._filters: dict[tuple[bool, str], TopicFilter] = {}
        # Guarded by _commit_lock: what we own, as the commit and the streams see it.
        self._commit_lock = threading.RLock()
        self._infos: dict[tuple[str, str], PartitionTopicInfo] = {}
        # Touched by the rebalance thread, or by shutdown() holding _rebalance_lock.
        self._rebalance_lock = threading.Lock()
        self._owned: dict[tuple[str, str], str] = {}  # owner nodes we hold -> thread id
        self._fetchers: list[_Fetcher] = []
        self._expired = False
        self._needs_registration = False
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._first_rebalance: Future[None] = Future()
        self._rebalancer: threading.Thread | None = None
        self._shut_down = False
        self._state_lock = threading.Lock()
        self._autocommitter: threading.Thread | None = None
        if config.autocommit_enable:
            self._autocommitter = threading.Thread(target=self._run_autocommit, name=f"autocommit-{self.consumer_id}",
                                                   daemon=True)
            self._autocommitter.start()

    # -- public API ----------------------------------------------------------------------------

    def create_message_streams(self, topic_count_map: Mapping[str, int]) -> dict[str, list[KafkaStream]]:
        """Subscribe to topics: ``{topic: n}`` gives ``{topic: [n KafkaStreams]}``.

        Blocks the caller until the first rebalance is done. Raises ValueError for a count
        < 1, RuntimeError if streams were created already, RegistryError (ConsumerIdInUse)
        if the registration fails, ConsumerRebalanceFailed.
        """
        subscription = paths.StaticSubscription(topic_count_map)
        self._topic_streams = {topic: [self._new_stream() for _ in range(count)]
                               for topic, count in subscription.topic_counts.items()}
        self._start(subscription)
        return {topic: list(streams) for topic, streams in self._topic_streams.items()}

    def create_message_streams_by_filter(self, topic_filter: TopicFilter, num_streams: int = 1) -> list[KafkaStream]:
        """Subscribe to every topic ``topic_filter`` allows, now and later, with ``num_streams``
        streams shared by all of them. Blocks and raises as create_message_streams."""
        subscription = topic_filter.subscription(num_streams)
        self._filters[(subscription.whitelist, subscription.regex)] = topic_filter
        self._filter_streams = [self._new_stream() for _ in range(num_streams)]
        self._start(subscription)
        return list(self._filter_streams)

    def commit_offsets(self) -> None:
        """Write the consumed offset of every owned partition that moved since its last commit
        (any thread). A failed write is logged and retried at the next commit."""
        with self._commit_lock:
            for info in self._infos.values():
                offset = info.consumed_offset
                if offset is None or offset == info.committed_offset:
                    continue
                try:
                    self._registry.write_offset(info.topic, info.partition, offset)
                except RegistryError as exc:
                    log.warning("committing offset %d of %s:%s failed: %s", offset, info.topic, info.partition, exc)
                    continue
                info.committed_offset = offset

    def shutdown(self) -> None:
        """Stop fetching, end every stream's iteration, commit (if autocommit.enable), delete
        this consumer's owner nodes and close the session. Idempotent; any thread but a
        stream's iterating one blocks only briefly."""
        with self._state_lock:
            if self._shut_down:
                return
            self._shut_down = True
        self._closing.set()
        self._wake.set()
        for thread in (self._rebalancer, self._autocommitter):
            if thread is not None and thread is not threading.current_thread():
                thread.join()
        if not self._first_rebalance.done():
            self._first_rebalance.set_exception(ConsumerRebalanceFailed("the connector was shut down"))
        with self._rebalance_lock:
            self._stop_fetchers()
            with self._commit_lock:
                for stream in self._streams():
                    stream._shut_down([info for info in self._infos.values() if info.stream is stream])
                if self.config.autocommit_enable:
                    self.commit_offsets()
                self._infos = {}
            try:
                self._release_owned()
            except RegistryError as exc:
                log.warning("releasing partitions at shutdown failed (%s); closing the session frees them", exc)
        self._registry.close()

    def __enter__(self) -> "ZookeeperConsumerConnector":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # -- starting --------------------------------------------------------------------------------

    def _new_stream(self) -> KafkaStream:
        return KafkaStream(max_chunks=self.config.queuedchunks_max,
                           consumer_timeout_ms=self.config.consumer_timeout_ms,
                           shallow=self.config.shallowiterator_enable)

    def _start(self, subscription: paths.Subscription) -> None:
        with self._state_lock:
            if self._shut_down:
                raise RuntimeError("the connector is shut down")
            if self._subscription is not None:
                raise RuntimeError("a consumer connector can create message streams at most once")
            self._subscription = subscription
        self._registry.register_consumer(self.consumer_id, subscription.encode(), wait_s=self._session_wait_s())
        log.info("consumer %s registered as %s", self.consumer_id, subscription.encode().decode())
        self._rebalancer = threading.Thread(target=self._run_rebalancer, name=f"rebalance-{self.consumer_id}",
                                            daemon=True)
        self._wake.set()
        self._rebalancer.start()
        self._first_rebalance.result()

    def _session_wait_s(self) -> float:
        return self.config.zk_sessiontimeout_ms * 1.5 / 1000

    # -- events and the rebalance thread --------------------------------------------------------

    def _on_registry_event(self, kind: str) -> None:  # kazoo's threads: record and wake only
        if kind == EXPIRED:
            self._expired = True
        self._wake.set()

    def _run_rebalancer(self) -> None:
        """The rebalance thread: one synced rebalance per wake-up, until shutdown."""
        backoff_s = self.config.rebalance_backoff_ms / 1000
        while True:
            self._wake.wait()
            if self._closing.is_set():
                return
            self._wake.clear()
            failure: Exception | None = None
            with self._rebalance_lock:
                try:
                    if self._expired:
                        self._expired = False
                        self._forget_partitions()
                    if self._needs_registration:
                        self._registry.register_consumer(self.consumer_id, self._subscription.encode(),
                                                         wait_s=self._session_wait_s())
                        self._needs_registration = False
                        log.info("consumer %s registered again after its session expired", self.consumer_id)
                    self._synced_rebalance()
                except RegistryError as exc:  # re-registration failed: not connected yet
                    failure = exc
                    log.warning("consumer %s cannot register (%s); retrying", self.consumer_id, exc)
                except ConsumerRebalanceFailed as exc:
                    failure = exc
                    log.error("%s; trying again in %.0f ms", exc, backoff_s * 1000)
                except Exception as exc:  # noqa: BLE001 - a bug must not end the rebalance thread
                    failure = exc
                    log.exception("consumer %s: rebalance failed", self.consumer_id)
            if not self._first_rebalance.done():
                if failure is None:
                    self._first_rebalance.set_result(None)
                elif not isinstance(failure, RegistryError):
                    self._first_rebalance.set_exception(failure)
            if failure is not None and not self._closing.wait(backoff_s):
                # 0.7 waited for the next ZooKeeper event; with nothing changing, its partitions
                # could stay unowned for good. We keep trying.
                self._wake.set()

    def _forget_partitions(self) -> None:
        """After a session expiry (0.7's resetState): the owner nodes went with the session;
        stop fetching, drop what is queued, forget the partitions (no commit: others may own
        them already), register again."""
        log.warning("consumer %s: ZooKeeper session expired; releasing its partitions and registering again",
                    self.consumer_id)
        self._stop_fetchers()
        with self._commit_lock:
            self._clear_streams()
            self._infos = {}
        self._owned = {}
        self._needs_registration = True

    def _synced_rebalance(self) -> None:
        """Rebalance, up to rebalance.retries.max attempts (rebalance thread). Raises
        ConsumerRebalanceFailed."""
        attempts = self.config.rebalance_retries_max
        for attempt in range(1, attempts + 1):
            if self._closing.is_set():
                return
            try:
                if self._rebalance():
                    return
                reason = "a partition it was assigned is still owned by another consumer"
            except Exception as exc:  # noqa: BLE001 - 0.7 too retries whatever ZooKeeper's state threw
                reason = f"{type(exc).__name__}: {exc}"
                if not isinstance(exc, (RegistryError, OSError, KafkaError)):
                    log.debug("rebalance attempt failed", exc_info=True)
            log.info("consumer %s: rebalance attempt %d of %d failed: %s", self.consumer_id, attempt, attempts, reason)
            if attempt < attempts and self._closing.wait(self.config.rebalance_backoff_ms / 1000):
                return
        raise ConsumerRebalanceFailed(f"{self.consumer_id} can't rebalance after {attempts} retries")

    def _rebalance(self) -> bool:
        """One attempt (spec 5.5). True once this consumer owns exactly its share; False on an
        ownership conflict, after deleting the nodes it created. Raises RegistryError,
        ValueError (a malformed node), OSError/KafkaError (reading offsets failed)."""
        registry = self._registry
        consumer_ids = registry.consumer_ids()
        if self.consumer_id not in consumer_ids:
            # Our node went with a session whose expiry is not handled yet, or was deleted by
            # hand: the group must count us, or two members would claim the same partitions.
            registry.register_consumer(self.consumer_id, self._subscription.encode(), wait_s=self._session_wait_s())
            consumer_ids = registry.consumer_ids()
        subscriptions = {}
        for consumer_id in consumer_ids:
            value = registry.consumer_registration(consumer_id)
            if value is not None:  # None: it just left, and its watch has fired
                subscriptions[consumer_id] = paths.decode_subscription(value)
        subscriptions[self.consumer_id] = self._subscription
        watch_topics = isinstance(self._subscription, paths.WildcardSubscription)
        topics = (registry.topics(watch=watch_topics)
                  if any(isinstance(s, paths.WildcardSubscription) for s in subscriptions.values()) else [])
        topic_counts = {consumer_id: self._topic_counts(subscription, topics)
                        for consumer_id, subscription in subscriptions.items()}
        # Steps 1-2 and 4: every member's threads per topic, our topics' partitions, our share.
        my_threads = rebalance.thread_ids_per_topic(self.consumer_id, topic_counts[self.consumer_id])
        consumers = rebalance.consumers_per_topic(topic_counts)
        partitions = {topic: rebalance.partition_names(registry.topic_partition_counts(topic))
                      for topic in my_threads}
        decision = rebalance.owned_partitions(my_threads, consumers, partitions)
        if decision == self._owned and decision.keys() == self._infos.keys():
            log.debug("consumer %s: assignment unchanged", self.consumer_id)
            return True
        log.info("consumer %s rebalancing: partitions %s, consumers %s", self.consumer_id, partitions, consumers)
        # Step 3: stop fetching, drop queued chunks, commit, release.
        self._stop_fetchers()
        with self._commit_lock:
            self._clear_streams()
            self.commit_offsets()
            self._infos = {}
        self._release_owned()
        # Step 5: own all of the share or none of it; then read where to start.
        for (topic, partition), thread in sorted(decision.items()):
            if not registry.claim(topic, partition, thread):
                log.info("%s: %s:%s is still owned by another consumer", thread, topic, partition)
                self._release_owned()
                return False
            self._owned[(topic, partition)] = thread
        try:
            brokers = registry.brokers()
            infos = {}
            for (topic, partition), thread in decision.items():
                committed = registry.read_offset(topic, partition)
                offset = committed if committed is not None else self._initial_offset(topic, partition, brokers)
                infos[(topic, partition)] = PartitionTopicInfo(
                    topic, partition, thread, self._stream_for(topic, thread), offset, committed)
        except BaseException:
            self._release_owned()
            raise
        with self._commit_lock:
            self._infos = infos
        # Step 6: one fetcher per broker.
        self._start_fetchers(infos, brokers)
        log.info("consumer %s owns %s", self.consumer_id,
                 ", ".join(f"{t}:{p}" for t, p in sorted(decision)) or "nothing")
        return True

    def _topic_counts(self, subscription: paths.Subscription, topics: list[str]) -> dict[str, int]:
        if isinstance(subscription, paths.StaticSubscription):
            return dict(subscription.topic_counts)
        key = (subscription.whitelist, subscription.regex)
        if key not in self._filters:
            self._filters[key] = topic_filter_for(subscription)  # ValueError: a regex we can't read
        topic_filter = self._filters[key]
        return {topic: subscription.streams for topic in topics if topic_filter.is_topic_allowed(topic)}

    def _stream_for(self, topic: str, thread_id: str) -> KafkaStream:
        index = int(thread_id[len(self.consumer_id) + 1:])
        if isinstance(self._subscription, paths.WildcardSubscription):
            return self._filter_streams[index]
        return self._topic_streams[topic][index]

    def _initial_offset(self, topic: str, partition: str, brokers: Mapping[int, tuple[str, int]]) -> int | None:
        """The earliest or latest offset (autooffset.reset) of a partition with no committed
        offset; None if its broker cannot say now (its fetcher asks again)."""
        broker_id, partition_id = paths.parse_partition_name(partition)
        address = brokers.get(broker_id)
        if address is None:
            return None
        try:
            with SimpleConsumer(address[0], address[1], socket_timeout_ms=self.config.socket_timeout_ms,
                                buffer_size=self.config.socket_buffersize) as consumer:
                offsets = consumer.get_offsets_before(topic, partition_id, self._reset_time, 1)
        except (OSError, ValueError, KafkaError) as exc:
            log.warning("reading the %s offset of %s:%s failed (%s); its fetcher will retry",
                        self.config.autooffset_reset, topic, partition, exc)
            return None
        return offsets[0] if offsets else None

    def _release_owned(self) -> None:
        """Delete the owner nodes we hold (rebalance thread). Raises RegistryError; the nodes
        not yet deleted stay listed and are released by the next attempt."""
        for (topic, partition), thread in sorted(self._owned.items()):
            self._registry.release(topic, partition, thread)
            del self._owned[(topic, partition)]

    # -- fetchers and streams ------------------------------------------------------------------

    def _start_fetchers(self, infos: Mapping[tuple[str, str], PartitionTopicInfo],
                        brokers: Mapping[int, tuple[str, int]]) -> None:
        by_broker: dict[int, list[PartitionTopicInfo]] = defaultdict(list)
        for info in infos.values():
            by_broker[info.broker_id].append(info)
        config = self.config
        for broker_id, broker_infos in sorted(by_broker.items()):
            fetcher = _Fetcher(broker_id, broker_infos, address=brokers.get(broker_id),
                               lookup_address=self._broker_address, fetch_size=config.fetch_size,
                               backoff_ms=config.fetcher_backoff_ms, socket_timeout_ms=config.socket_timeout_ms,
                               buffer_size=config.socket_buffersize, reset_time=self._reset_time,
                               on_reset=self._write_reset_offset)
            self._fetchers.append(fetcher)
            fetcher.start()

    def _stop_fetchers(self) -> None:
        fetchers, self._fetchers = self._fetchers, []
        for fetcher in fetchers:
            fetcher.stop()
        deadline = time.monotonic() + _FETCHER_JOIN_S
        for fetcher in fetchers:
            fetcher.join(max(deadline - time.monotonic(), 0))
            if fetcher.is_alive():
                # Blocked connecting to a dead broker: it ends by itself, and whatever it still
                # fetches is dropped, its partitions being deactivated next.
                log.warning("fetcher for broker %d is still busy; leaving it to stop by itself", fetcher.broker_id)

    def _clear_streams(self) -> None:
        """Deactivate the owned partitions and drop queued data (caller holds _commit_lock)."""
        for stream in self._streams():
            stream._clear([info for info in self._infos.values() if info.stream is stream])

    def _streams(self) -> list[KafkaStream]:
        return [stream for streams in self._topic_streams.values() for stream in streams] + self._filter_streams

    def _broker_address(self, broker_id: int) -> tuple[str, int] | None:  # fetcher threads
        try:
            return self._registry.broker_address(broker_id)
        except RegistryError as exc:
            log.warning("looking up broker %d failed: %s", broker_id, exc)
            return None

    def _write_reset_offset(self, info: PartitionTopicInfo, offset: int) -> None:  # fetcher threads
        try:
            self._registry.write_offset(info.topic, info.partition, offset)
            info.committed_offset = offset
        except RegistryError as exc:
            log.warning("writing the reset offset %d of %s:%s failed: %s", offset, info.topic, info.partition, exc)

    def _run_autocommit(self) -> None:
        """The autocommit thread: commit_offsets() every autocommit.interval.ms."""
        interval_s = self.config.autocommit_interval_ms / 1000
        while not self._closing.wait(interval_s):
            try:
                self.commit_offsets()
            except Exception:  # noqa: BLE001 - the timer must survive; 0.7 logged and went on
                log.exception("autocommit failed")
