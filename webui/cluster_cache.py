"""What the console knows about a cluster's registry: brokers, topics, consumer groups.

``ClusterCache`` reads a ZkMirror of spec 5.2's paths (``/brokers/ids``, ``/brokers/topics``,
``/consumers``) and replication's (``/replication/controller``, ``/replication/topics/<t>`` and
each partition's ``state``, docs/replication.md §2), kept current by watches, and turns node
names and values into plain values with registry/paths.py and registry/replication_paths.py. Derived values are cached until the mirror changes, so a page view
costs dictionary lookups, never a ZooKeeper read. A replicated topic's decoded entry
(replicated_entries.py) outlives other changes: it is decoded again only when one of its own
nodes changed. A value that does not parse (a tool wrote garbage) is shown as such, not
dropped, so the console can point at it.

``LocalCluster`` is the same interface for a broker embedding the console without ZooKeeper
(``enable.zookeeper=false``): the one broker and the topics on its disk, no groups.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from twisted.internet.defer import Deferred, succeed

from twisted_broker.registry import paths
from twisted_broker.registry import replication_paths
from twisted_broker.registry.replication_paths import ControllerInfo
from webui.replicated_entries import ReplicatedEntries, ReplicatedTopicEntry
from webui.zk_mirror import ANY, LEAF, SELF, ZkMirror

log = logging.getLogger(__name__)

TEMPLATE = {
    paths.BROKER_IDS: {ANY: LEAF},
    paths.BROKER_TOPICS: {ANY: {ANY: LEAF}},
    paths.CONSUMERS: {ANY: {"ids": {ANY: LEAF},
                            "owners": {ANY: {ANY: LEAF}},
                            "offsets": {ANY: {ANY: LEAF}}}},
    replication_paths.ROOT: {"controller": LEAF, "listeners": {ANY: LEAF},
                             "topics": {ANY: {SELF: LEAF, "partitions": {ANY: {"state": LEAF}}}}},
}


@dataclass(frozen=True)
class BrokerEntry:
    broker_id: int
    host: str
    port: int
    creator_id: str
    registered_ms: int | None  # creation time of /brokers/ids/<id>


@dataclass(frozen=True)
class ConsumerEntry:
    consumer_id: str
    registration: str  # the node's value as text
    subscription: paths.Subscription | None  # None: the value does not parse (see error)
    registered_ms: int | None
    error: str | None = None


@dataclass(frozen=True)
class GroupState:
    group: str
    consumers: dict[str, ConsumerEntry] = field(default_factory=dict)
    owners: dict[str, dict[str, str]] = field(default_factory=dict)  # topic -> partition -> thread
    offsets: dict[str, dict[str, int | None]] = field(default_factory=dict)  # None: unparsable value
    # An ``ids`` node: every 0.7 consumer registers there, and the node stays after it stops.
    # False (no ids node, and brokers with modern listeners): a group of Kafka clients, with
    # modern offsets and its members in the coordinator's memory.
    registered: bool = True

    @property
    def topics(self) -> list[str]:
        """Topics the group has offsets or owners for, sorted."""
        return sorted(set(self.offsets) | set(self.owners))


class ClusterCache:
    """The registry of one cluster, as the console shows it. Reactor thread only."""

    def __init__(self, mirror: ZkMirror, *, zk_connect: str) -> None:
        self.mirror = mirror
        self.zk_connect = zk_connect
        self._memo: dict[object, object] = {}
        self._memo_version = -1
        self._entries = ReplicatedEntries()  # outlive the memo: decoded again only when changed

    @classmethod
    def over(cls, zk, *, zk_connect: str) -> "ClusterCache":
        return cls(ZkMirror(zk, TEMPLATE), zk_connect=zk_connect)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self.mirror.start()

    def stop(self) -> None:
        self.mirror.stop()

    @property
    def synced(self) -> bool:
        return self.mirror.synced

    def when_synced(self) -> Deferred[None]:
        return self.mirror.when_synced()

    @property
    def version(self) -> int:
        return self.mirror.version

    @property
    def has_registry(self) -> bool:
        return True

    # -- brokers and topics ------------------------------------------------------------------

    def brokers(self) -> dict[int, BrokerEntry]:
        """The registered brokers by id (a registration that does not parse is skipped)."""
        return self._cached("brokers", self._brokers)

    def _brokers(self) -> dict[int, BrokerEntry]:
        brokers = {}
        for name in self.mirror.children.get(paths.BROKER_IDS, ()):
            node = self.mirror.data.get(f"{paths.BROKER_IDS}/{name}")
            if node is None or not (name.isascii() and name.isdigit()):
                continue
            try:
                info = paths.BrokerInfo.decode(int(name), node.value)
            except (ValueError, UnicodeDecodeError) as exc:
                log.debug("skipping broker %s: %s", name, exc)
                continue
            brokers[info.broker_id] = BrokerEntry(info.broker_id, info.host, info.port,
                                                  info.creator_id, node.ctime_ms)
        return dict(sorted(brokers.items()))

    def topics(self) -> list[str]:
        """Every registered topic, sorted."""
        return self._cached("topics", lambda: self._names(paths.BROKER_TOPICS))

    def topic_brokers(self, topic: str) -> dict[int, int]:
        """``{broker id: partition count}`` registered for ``topic`` ({}: unknown)."""
        return self._cached(("topic", topic), lambda: self._topic_brokers(topic))

    def _topic_brokers(self, topic: str) -> dict[int, int]:
        base = paths.topic_path(topic)
        counts = {}
        for name in self.mirror.children.get(base, ()):
            node = self.mirror.data.get(f"{base}/{name}")
            if node is None or not (name.isascii() and name.isdigit()):
                continue
            try:
                counts[int(name)] = paths.decode_partition_count(node.value)
            except (ValueError, UnicodeDecodeError):
                log.debug("skipping %s/%s: partition count %r", base, name, node.value)
        return dict(sorted(counts.items()))

    def partition_count(self) -> int:
        """Partitions of every topic on every broker."""
        return self._cached("partitions", lambda: sum(
            sum(self.topic_brokers(topic).values()) for topic in self.topics()))

    def broker_topics(self, broker_id: int) -> dict[str, int]:
        """``{topic: partition count}`` of the topics ``broker_id`` has registered."""
        return self._cached(("broker_topics", broker_id), lambda: {
            topic: counts[broker_id] for topic in self.topics()
            if broker_id in (counts := self.topic_brokers(topic))})

    # -- replication ---------------------------------------------------------------------------

    def controller(self) -> ControllerInfo | None:
        """Who is the controller now (None: none elected, or the value does not parse)."""
        return self._cached("controller", self._controller)

    def _controller(self) -> ControllerInfo | None:
        node = self.mirror.data.get(replication_paths.CONTROLLER)
        try:
            return None if node is None else ControllerInfo.decode(node.value)
        except ValueError as exc:
            log.debug("controller: %s", exc)
            return None

    def replicated_topics(self) -> list[str]:
        """Every replicated topic (under /replication/topics), sorted."""
        return self._cached("replicated", self._replicated_names)

    def _replicated_names(self) -> list[str]:
        names = self._names(replication_paths.TOPICS)
        self._entries.keep_only(names)
        return names

    def replicated_topic(self, topic: str) -> ReplicatedTopicEntry | None:
        """The topic's assignment and partition states; None if it is not a replicated topic."""
        return self._cached_child(replication_paths.TOPICS, topic, "replicated", self._replicated_topic)

    def _replicated_topic(self, topic: str) -> ReplicatedTopicEntry:
        return self._entries.entry(self.mirror.data, topic)

    def modern_listeners(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every live broker's modern listener (docs/kafka-protocol.md §4)."""
        return self._cached("listeners", self._modern_listeners)

    def _modern_listeners(self) -> list[tuple[str, int]]:
        found = []
        for name in self.mirror.children.get(replication_paths.LISTENERS, ()):
            node = self.mirror.data.get(f"{replication_paths.LISTENERS}/{name}")
            try:
                data = json.loads(node.value) if node is not None else None
                if data is not None:
                    found.append((str(data["host"]), int(data["port"])))
            except (ValueError, KeyError, TypeError) as exc:
                log.debug("modern listener %s: %s", name, exc)
        return found

    def modern_partitions(self, topic: str) -> dict[str, int]:
        """``{0.7 partition name: modern partition}`` (docs/kafka-protocol.md §4): a replicated
        topic's ``p`` is p; a 0.7 topic's ``b-p`` pairs are numbered in broker-id order."""
        replicated = self.replicated_topic(topic)
        if replicated is not None:
            return {str(p): p for p in sorted(replicated.assignment.replicas)} if replicated.assignment else {}
        pairs = [(b, p) for b, count in self.topic_brokers(topic).items() for p in range(count)]
        return {paths.partition_name(b, p): number for number, (b, p) in enumerate(sorted(pairs))}

    def all_topics(self) -> list[str]:
        """0.7 topics and replicated topics, sorted."""
        return self._cached("all_topics", lambda: sorted({*self.topics(), *self.replicated_topics()}))

    # -- consumer groups -------------------------------------------------------------------------

    def groups(self) -> list[str]:
        return self._cached("groups", lambda: self._names(paths.CONSUMERS))

    def group(self, group: str) -> GroupState | None:
        """The group's consumers, owners and offsets; None if there is no such group."""
        return self._cached_child(paths.CONSUMERS, group, "group", self._group)

    def _group(self, group: str) -> GroupState:
        children, data = self.mirror.children, self.mirror.data
        ids = paths.consumer_ids_path(group)
        consumers = {}
        for consumer_id in children.get(ids, ()):
            node = data.get(f"{ids}/{consumer_id}")
            if node is None:
                continue
            text = node.value.decode("utf-8", "replace")
            try:
                consumers[consumer_id] = ConsumerEntry(consumer_id, text, paths.decode_subscription(node.value),
                                                       node.ctime_ms)
            except (ValueError, UnicodeDecodeError) as exc:
                consumers[consumer_id] = ConsumerEntry(consumer_id, text, None, node.ctime_ms, str(exc))
        owners = {}
        base = f"{paths.consumer_group_path(group)}/owners"
        for topic in children.get(base, ()):
            found = {}
            for name in children.get(f"{base}/{topic}", ()):
                node = data.get(f"{base}/{topic}/{name}")
                if node is not None:
                    found[name] = node.value.decode("utf-8", "replace")
            owners[topic] = found
        offsets: dict[str, dict[str, int | None]] = {}
        base = f"{paths.consumer_group_path(group)}/offsets"
        for topic in children.get(base, ()):
            found_offsets: dict[str, int | None] = {}
            for name in children.get(f"{base}/{topic}", ()):
                node = data.get(f"{base}/{topic}/{name}")
                if node is None:
                    continue
                try:
                    found_offsets[name] = paths.decode_offset(node.value)
                except ValueError:
                    found_offsets[name] = None
            offsets[topic] = found_offsets
        # Without modern listeners there are no Kafka clients' groups: offsets written by hand
        # or by a tool are a 0.7 group's.
        registered = ids in children or not self.modern_listeners()
        return GroupState(group, consumers, owners, offsets, registered=registered)

    def consumer_count(self) -> int:
        return self._cached("consumers", lambda: sum(
            len(self.mirror.children.get(paths.consumer_ids_path(group), ())) for group in self.groups()))

    # -- memo ------------------------------------------------------------------------------

    def _names(self, path: str) -> list[str]:
        return sorted(self.mirror.children.get(path, ()))

    def _cached_child(self, parent: str, name: str, kind: str, compute: Callable):
        """``compute(name)``, cached, for a child ``name`` of ``parent``; None if there is none."""
        if name not in self._cached(("names", parent), lambda: frozenset(self.mirror.children.get(parent, ()))):
            return None
        return self._cached((kind, name), lambda: compute(name))

    def memo(self, key: str, compute: Callable):
        """``compute()``, kept until the mirror changes (a page's summary of the registry)."""
        return self._cached(("memo", key), compute)

    def _cached(self, key, compute: Callable):
        if self._memo_version != self.mirror.version:
            self._memo.clear()
            self._memo_version = self.mirror.version
        try:
            return self._memo[key]
        except KeyError:
            value = self._memo[key] = compute()
            return value


class LocalCluster:
    """One broker without ZooKeeper: itself and the topics on its disk; no consumer groups."""

    zk_connect = None
    synced = True
    has_registry = False

    def __init__(self, *, broker_id: int, host: str, port: Callable[[], int | None],
                 topics: Callable[[], list[str]], partitions_for: Callable[[str], int],
                 started_ms: int) -> None:
        self._broker_id, self._host, self._port = broker_id, host, port
        self._topics, self._partitions_for, self._started_ms = topics, partitions_for, started_ms

    @property
    def version(self) -> int:
        return len(self._topics())

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def when_synced(self) -> Deferred[None]:
        return succeed(None)

    def memo(self, key: str, compute: Callable):
        return compute()  # the disk's topics are read at each call: nothing to keep

    def brokers(self) -> dict[int, BrokerEntry]:
        port = self._port()
        if port is None:
            return {}
        return {self._broker_id: BrokerEntry(self._broker_id, self._host, port, "(no ZooKeeper)", self._started_ms)}

    def topics(self) -> list[str]:
        return sorted(self._topics())

    def topic_brokers(self, topic: str) -> dict[int, int]:
        return {self._broker_id: self._partitions_for(topic)} if topic in self._topics() else {}

    def partition_count(self) -> int:
        return sum(self._partitions_for(topic) for topic in self._topics())

    def broker_topics(self, broker_id: int) -> dict[str, int]:
        if broker_id != self._broker_id:
            return {}
        return {topic: self._partitions_for(topic) for topic in self.topics()}

    def controller(self) -> ControllerInfo | None:
        return None  # no ZooKeeper, no replication

    def replicated_topics(self) -> list[str]:
        return []

    def replicated_topic(self, topic: str) -> ReplicatedTopicEntry | None:
        return None

    def modern_listeners(self) -> list[tuple[str, int]]:
        return []  # no groups without ZooKeeper: nothing asks

    def all_topics(self) -> list[str]:
        return self.topics()

    def groups(self) -> list[str]:
        return []

    def group(self, group: str) -> GroupState | None:
        return None

    def consumer_count(self) -> int:
        return 0
