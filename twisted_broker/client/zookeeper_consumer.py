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

Replicated topics (docs/replication.md): their partitions come from ``/replication/topics/<t>``
(watched), named by number alone (``/consumers/<g>/owners/<t>/<p>``, ``offsets/<t>/<p>``,
Kafka 0.8's naming), and are sorted for the range assignment as strings like 0.7's names
(``"10" < "2"``): every member of our groups computes the same, and a Kafka 0.8 consumer,
which sorts numbers, cannot share the group anyway (it reads 0.8's ``/brokers/topics`` JSON,
which we do not write). One fetcher thread reads them all from their leaders and follows a
leader change without a rebalance (client/consumer_fetcher.py).

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

Modules: the streams the user iterates are in client/consumer_stream.py, the fetcher threads
(and where a partition without a committed offset starts) in client/consumer_fetcher.py, the
reading of the group for a rebalance in client/group_assignment.py, the owner nodes it claims
and the fetchers' lookups in client/group_registry.py. ConsumerTimeout, KafkaStream, MessageAndMetadata and
PartitionTopicInfo stay importable from here.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import Future

from twisted_broker.client.consumer_fetcher import Fetcher
from twisted_broker.client.consumer_stream import (  # re-exported: the connector's public names
    ConsumerTimeout, KafkaStream, MessageAndMetadata, PartitionTopicInfo, split_partition_name,
)
from twisted_broker.client.group_assignment import AssignmentReader
from twisted_broker.client.group_registry import FetcherLookups, OwnedPartitions
from twisted_broker.client.simple_consumer import EARLIEST_TIME, LATEST_TIME
from twisted_broker.client.topic_filter import TopicFilter
from twisted_broker.config import ConfigError, ConsumerConfig
from twisted_broker.errors import KafkaError
from twisted_broker.registry import paths
from twisted_broker.registry.consumer_registry import EXPIRED, ConsumerRegistry, RegistryError

__all__ = ["ConsumerRebalanceFailed", "ConsumerTimeout", "KafkaStream", "MessageAndMetadata",
           "PartitionTopicInfo", "ZookeeperConsumerConnector"]

log = logging.getLogger(__name__)


class ConsumerRebalanceFailed(Exception):
    """A rebalance found partitions owned by others through all ``rebalance.retries.max``
    attempts (or ZooKeeper failed each time)."""


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
        self._subscription: paths.Subscription | None = None
        self._topic_streams: dict[str, list[KafkaStream]] = {}
        self._filter_streams: list[KafkaStream] = []
        self._assignment: AssignmentReader | None = None  # set with the subscription
        # Guarded by _commit_lock: what we own, as the commit and the streams see it.
        self._commit_lock = threading.RLock()
        self._infos: dict[tuple[str, str], PartitionTopicInfo] = {}
        # Touched by the rebalance thread, or by shutdown() holding _rebalance_lock.
        self._rebalance_lock = threading.Lock()
        self._owned = OwnedPartitions(self._registry)
        lookups = FetcherLookups(self._registry)
        self._fetcher = Fetcher(fetch_size=config.fetch_size, backoff_ms=config.fetcher_backoff_ms,
                                socket_timeout_ms=config.socket_timeout_ms, buffer_size=config.socket_buffersize,
                                reset_time=EARLIEST_TIME if config.autooffset_reset == "smallest" else LATEST_TIME,
                                lookup_address=lookups.broker_address,
                                on_reset=lookups.write_reset_offset, leader_candidates=lookups.live_brokers)
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
        self._filter_streams = [self._new_stream() for _ in range(num_streams)]
        self._start(subscription, topic_filter)
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
            self._fetcher.stop()
            with self._commit_lock:
                for stream in self._streams():
                    stream._shut_down([info for info in self._infos.values() if info.stream is stream])
                if self.config.autocommit_enable:
                    self.commit_offsets()
                self._infos = {}
            try:
                self._owned.release_all()
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

    def _start(self, subscription: paths.Subscription, topic_filter: TopicFilter | None = None) -> None:
        with self._state_lock:
            if self._shut_down:
                raise RuntimeError("the connector is shut down")
            if self._subscription is not None:
                raise RuntimeError("a consumer connector can create message streams at most once")
            self._subscription = subscription
            self._assignment = AssignmentReader(self.consumer_id, subscription, topic_filter)
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
        self._fetcher.stop()
        with self._commit_lock:
            self._clear_streams()
            self._infos = {}
        self._owned.forget()
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
        # Steps 1, 2 and 4: read the group, compute our share.
        assignment = self._assignment.read(registry, consumer_ids)
        decision = assignment.owned
        if decision == self._owned.threads and decision.keys() == self._infos.keys():
            log.debug("consumer %s: assignment unchanged", self.consumer_id)
            return True
        log.info("consumer %s rebalancing: partitions %s, consumers %s", self.consumer_id,
                 assignment.partitions, assignment.consumers)
        # Step 3: stop fetching, drop queued chunks, commit, release.
        self._fetcher.stop()
        with self._commit_lock:
            self._clear_streams()
            self.commit_offsets()
            self._infos = {}
        self._owned.release_all()
        # Step 5: own all of the share or none of it; then read where to start.
        conflict = self._owned.claim_all(decision)
        if conflict is not None:
            log.info("%s: %s:%s is still owned by another consumer", *conflict)
            return False
        try:
            brokers = registry.brokers()
            infos = {}
            for (topic, partition), thread in decision.items():
                committed = registry.read_offset(topic, partition)
                broker_id, partition_id = split_partition_name(partition)
                offset = committed if committed is not None else self._fetcher.initial_offset(
                    topic, partition_id, brokers.get(broker_id))
                infos[(topic, partition)] = PartitionTopicInfo(
                    topic, partition, thread, self._stream_for(topic, thread), offset, committed)
        except BaseException:
            self._owned.release_all()
            raise
        with self._commit_lock:
            self._infos = infos
        # Step 6: one fetcher per broker.
        self._fetcher.start(infos.values(), brokers)
        log.info("consumer %s owns %s", self.consumer_id,
                 ", ".join(f"{t}:{p}" for t, p in sorted(decision)) or "nothing")
        return True

    def _stream_for(self, topic: str, thread_id: str) -> KafkaStream:
        index = int(thread_id[len(self.consumer_id) + 1:])
        if isinstance(self._subscription, paths.WildcardSubscription):
            return self._filter_streams[index]
        return self._topic_streams[topic][index]

    # -- streams, and the fetchers' calls ---------------------------------------------------------

    def _clear_streams(self) -> None:
        """Deactivate the owned partitions and drop queued data (caller holds _commit_lock)."""
        for stream in self._streams():
            stream._clear([info for info in self._infos.values() if info.stream is stream])

    def _streams(self) -> list[KafkaStream]:
        return [stream for streams in self._topic_streams.values() for stream in streams] + self._filter_streams

    def _run_autocommit(self) -> None:
        """The autocommit thread: commit_offsets() every autocommit.interval.ms."""
        interval_s = self.config.autocommit_interval_ms / 1000
        while not self._closing.wait(interval_s):
            try:
                self.commit_offsets()
            except Exception:  # noqa: BLE001 - the timer must survive; 0.7 logged and went on
                log.exception("autocommit failed")
