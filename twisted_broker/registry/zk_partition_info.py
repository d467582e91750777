"""ZkBrokerPartitionInfo: where a producer's topics live, read from ZooKeeper (0.7's
``ZKBrokerPartitionInfo``, spec 5.6). It implements client/broker_partition_info.py's
BrokerPartitionInfo for the blocking Producer::

    info = ZkBrokerPartitionInfo.from_config(config)       # config.zk_connect is set
    producer = Producer(config, broker_partition_info=info)
    ...
    producer.close(); info.close()

What it keeps, current through watches on ``/brokers/ids``, ``/brokers/topics`` and each
``/brokers/topics/<t>``:

- the live brokers, ``{id: (host, port)}``;
- per topic, the ``(broker id, partition)`` candidates, sorted **numerically** by broker id
  then partition (unlike the consumer's string sort). As in 0.7:

  * a topic no broker has registered gets every live broker's partition 0 (the broker that
    receives the first message creates the topic with its own partition count);
  * new registrations are merged into what the topic had, so the brokers a new topic was
    bootstrapped over keep their partition 0 until they register the topic themselves;
  * a broker that leaves ``/brokers/ids`` takes its partitions with it.

  Consequence kept from 0.7: a broker that joins later is not used for a topic that already
  exists until it holds that topic (a message produced to it directly creates it).

Watches only mark what changed; a background thread re-reads it, so the producer's calls
(``partitions``, ``broker``) answer from memory without blocking. ``refresh`` re-reads
everything in the calling thread.
"""

from __future__ import annotations

import logging
import threading

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, KazooState

from twisted_broker.config import ProducerConfig
from twisted_broker.registry import paths

log = logging.getLogger(__name__)

Partition = tuple[int, int]  # (broker id, partition id)
_ALL = "*"  # a dirty mark meaning: re-read everything


class ZkBrokerPartitionInfo:
    """The brokers and partitions of a ZooKeeper-registered cluster. Thread-safe."""

    def __init__(self, zk_connect: str, *, session_timeout_ms: int = 6000,
                 connection_timeout_ms: int = 6000) -> None:
        """Connect and read the registry. Raises RuntimeError if ZooKeeper does not answer
        within ``connection_timeout_ms``."""
        self._request_timeout_s = max(session_timeout_ms, connection_timeout_ms) / 1000
        self._client = KazooClient(hosts=zk_connect, timeout=session_timeout_ms / 1000,
                                   connection_retry={"max_tries": -1, "max_delay": 2})
        self._lock = threading.Lock()
        self._brokers: dict[int, tuple[str, int]] = {}
        self._registered: dict[str, dict[int, int]] = {}  # topic -> {broker id: partitions}
        self._candidates: dict[str, set[Partition]] = {}  # what partitions() answers, merged
        self._dirty: set[str] = set()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._disconnected = False
        try:
            self._client.start(connection_timeout_ms / 1000)
        except (KazooException, KazooTimeoutError) as exc:
            self._client.close()
            raise RuntimeError(f"ZooKeeper at {zk_connect} did not answer: {exc}") from exc
        self._client.add_listener(self._on_state)
        try:
            self._read_all()
        except (KazooException, KazooTimeoutError) as exc:
            self._client.stop()
            self._client.close()
            raise RuntimeError(f"reading the broker registry at {zk_connect} failed: {exc}") from exc
        self._thread = threading.Thread(target=self._run, name="zk-broker-partition-info", daemon=True)
        self._thread.start()

    @classmethod
    def from_config(cls, config: ProducerConfig) -> "ZkBrokerPartitionInfo":
        """The info for a producer config with ``zk.connect``. Raises ValueError without it."""
        if not config.zk_connect:
            raise ValueError("zk.connect is not set")
        return cls(config.zk_connect, session_timeout_ms=config.zk_sessiontimeout_ms,
                   connection_timeout_ms=config.zk_connectiontimeout_ms)

    # -- BrokerPartitionInfo ---------------------------------------------------------------

    def partitions(self, topic: str) -> list[Partition]:
        """``(broker id, partition)`` candidates for ``topic``, sorted numerically; every live
        broker's partition 0 for a topic none has registered. Any thread; never blocks on
        ZooKeeper."""
        with self._lock:
            candidates = {p for p in self._candidates.get(topic, ()) if p[0] in self._brokers}
            if not candidates:
                candidates = {(broker_id, 0) for broker_id in self._brokers}  # 0.7's bootstrap
            if candidates:
                self._candidates[topic] = candidates
            return sorted(candidates)

    def broker(self, broker_id: int) -> tuple[str, int]:
        """``(host, port)`` of a live broker. Raises KeyError if it is not registered."""
        with self._lock:
            return self._brokers[broker_id]

    def brokers(self) -> dict[int, tuple[str, int]]:
        """The live brokers, ``{id: (host, port)}`` (any thread; from memory)."""
        with self._lock:
            return dict(self._brokers)

    def registered_0_7(self, topic: str) -> bool:
        """Whether some broker registered ``topic`` under /brokers/topics: a 0.7 topic
        (replicated topics are never registered there)."""
        with self._lock:
            return bool(self._registered.get(topic))

    def refresh(self) -> None:
        """Re-read brokers and topics now (blocks the caller; the producer calls it when a
        broker it chose is unknown). ZooKeeper errors are logged, the old view kept."""
        try:
            self._read_all()
        except (KazooException, KazooTimeoutError) as exc:
            log.warning("reading the broker registry failed: %s", exc)

    def close(self) -> None:
        """Stop watching and close the session. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._wake.notify_all()
        self._thread.join(self._request_timeout_s)
        self._client.stop()
        self._client.close()

    def __enter__(self) -> "ZkBrokerPartitionInfo":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- reading (with watches) --------------------------------------------------------------

    def _read_all(self) -> None:
        self._read_brokers()
        for topic in self._read_topics():
            self._read_topic(topic)

    def _read_brokers(self) -> None:
        ids = self._children(paths.BROKER_IDS)
        brokers = {}
        for name in ids:
            if not (name.isascii() and name.isdigit()):
                continue
            value = self._get(paths.broker_id_path(int(name)))
            if value is None:
                continue
            try:
                info = paths.BrokerInfo.decode(int(name), value)
            except ValueError as exc:
                log.warning("ignoring broker %s: %s", name, exc)
                continue
            brokers[info.broker_id] = (info.host, info.port)
        with self._lock:
            gone = set(self._brokers) - set(brokers)
            self._brokers = brokers
            for topic, candidates in self._candidates.items():
                self._candidates[topic] = {p for p in candidates if p[0] not in gone}

    def _read_topics(self) -> list[str]:
        topics = self._children(paths.BROKER_TOPICS)
        with self._lock:
            for topic in set(self._registered) - set(topics):
                del self._registered[topic]
        return topics

    def _read_topic(self, topic: str) -> None:
        path = paths.topic_path(topic)
        registered = {}
        for name in self._children(path):
            value = self._get(f"{path}/{name}")
            if value is None or not (name.isascii() and name.isdigit()):
                continue
            try:
                registered[int(name)] = paths.decode_partition_count(value)
            except ValueError:
                log.warning("ignoring %s/%s: partition count %r is not decimal", path, name, value)
        with self._lock:
            self._registered[topic] = registered
            merged = self._candidates.get(topic, set()) | {
                (broker_id, part) for broker_id, count in registered.items() for part in range(count)}
            self._candidates[topic] = {p for p in merged if p[0] in self._brokers}

    def _children(self, path: str) -> list[str]:
        try:
            return self._client.get_children_async(path, watch=self._watch).get(timeout=self._request_timeout_s)
        except NoNodeError:
            # Watch for its creation instead.
            if self._client.exists_async(path, watch=self._watch).get(timeout=self._request_timeout_s):
                return self._children(path)
            return []

    def _get(self, path: str) -> bytes | None:
        try:
            return self._client.get_async(path).get(timeout=self._request_timeout_s)[0]
        except NoNodeError:
            return None

    # -- events ----------------------------------------------------------------------------------

    def _watch(self, event) -> None:  # kazoo's thread: record and wake, never block
        if event.type == EventType.NONE:
            return  # connection lost: the state listener re-reads on reconnection
        self._mark(event.path)

    def _on_state(self, state: KazooState) -> None:  # kazoo's thread
        if state in (KazooState.SUSPENDED, KazooState.LOST):
            self._disconnected = True
        elif state == KazooState.CONNECTED and self._disconnected:
            self._disconnected = False
            self._mark(_ALL)  # kazoo dropped the watches: read (and watch) everything again

    def _mark(self, path: str) -> None:
        with self._lock:
            self._dirty.add(path)
            self._wake.notify_all()

    def _run(self) -> None:
        """The refresher thread: re-reads what the watches marked."""
        while True:
            with self._lock:
                while not self._dirty and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                dirty, self._dirty = self._dirty, set()
            try:
                self._reread(dirty)
            except (KazooException, KazooTimeoutError) as exc:
                log.warning("re-reading the broker registry failed (%s); retrying", exc)
                with self._lock:
                    self._dirty |= dirty
                    self._wake.wait(1.0)

    def _reread(self, dirty: set[str]) -> None:
        if _ALL in dirty:
            self._read_all()
            return
        topics_prefix = paths.BROKER_TOPICS + "/"
        if paths.BROKER_IDS in dirty:
            self._read_brokers()
        if paths.BROKER_TOPICS in dirty:
            with self._lock:
                known = set(self._registered)
            for topic in self._read_topics():
                if topic not in known:
                    self._read_topic(topic)
        for path in dirty:
            if path.startswith(topics_prefix) and "/" not in path[len(topics_prefix):]:
                self._read_topic(path[len(topics_prefix):])
