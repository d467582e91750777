"""What the modern listener tells clients about the cluster, and where a partition it is asked
for lives on this broker (docs/kafka-protocol.md §4).

- **Brokers**: node id = ``brokerid``, at the host and port of each broker's modern listener
  of the same name as the one asked (Kafka's rule; docs/security.md, "Listeners"). Each broker
  writes its own to the ephemeral ``/replication/listeners/<id>`` (JSON, version 1: ``host``
  and ``port`` of its first listener, ``endpoints`` ``["NAME://host:port", ...]``) once it
  listens, and again after a new ZooKeeper session: 0.7's ``/brokers/ids`` value
  (``creator:host:port``) has no room for a second port that 0.7 clients would not misread. A
  value without ``endpoints`` is the broker's PLAINTEXT listener.
- **Controller**: the replication controller (ZooKeeper), or this broker without ZooKeeper.
- **Partitions**: a replicated topic's are its own, leaders from the cluster state. A 0.7
  topic's are its (broker, local partition) pairs in broker-id order, numbered 0..N-1, each
  led by its broker (one broker: modern p = local p). The pairs come from 0.7's registry
  (``/brokers/topics/<t>/<broker>`` = the broker's partition count), this broker's own logs
  included before its registration lands.

Reactor thread only; ZooKeeper reads are Deferreds.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from twisted.application.service import Service
from twisted.internet.defer import FirstError, gatherResults, inlineCallbacks

from twisted_broker.errors import InvalidTopic
from twisted_broker.codec.kafka import errors as kafka_errors
from twisted_broker.registry import paths as registry_paths
from twisted_broker.registry.zookeeper import CONNECTED, UNAVAILABLE_ERRORS, NodeExistsError, NoNodeError
from twisted_broker.registry import replication_paths
from twisted_broker.security.listeners import PLAINTEXT, endpoint_text, parse_endpoint
from twisted_broker.storage.log_manager import LogManager
from twisted_broker.storage.topic_name import check_topic_name

log = logging.getLogger(__name__)


def listener_path(broker_id: int) -> str:
    return f"{replication_paths.LISTENERS}/{broker_id}"


@dataclass(frozen=True, slots=True)
class PartitionView:
    partition: int
    leader: int  # -1: none now
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    local_partition: int | None = None  # a 0.7 topic's partition in its leader's log directory


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    replicated: bool
    partitions: tuple[PartitionView, ...]


class KafkaClusterView:
    """Brokers, controller and topics as the modern protocol numbers them (not the
    registry's ClusterView, the blocking view of 0.7's registry that the tools read).

    ``cluster`` (ClusterState), ``zk`` and ``controller`` are None without ZooKeeper;
    ``port()`` is the first modern listener's bound port, ``endpoints()`` {listener name:
    (host, port)} of them all (None: the one listener is ``host`` and ``port()``)."""

    def __init__(self, *, broker_id: int, host: str, port: Callable[[], int], logs: LogManager,
                 partitions_for: Callable[[str], int], zk=None, cluster=None, controller=None,
                 endpoints: Callable[[], dict[str, tuple[str, int]]] | None = None) -> None:
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.endpoints = endpoints
        self.logs = logs
        self.partitions_for = partitions_for
        self.zk = zk
        self.cluster = cluster
        self.controller = controller
        # 0.7 topics: the (broker, local partition) pairs last read, by topic.
        self._pairs: dict[str, tuple[tuple[int, int], ...]] = {}
        # The other brokers' listeners, kept by a watch on /replication/listeners (None until
        # first read): a Metadata request asks ZooKeeper nothing for them, for with a thousand
        # partitions moving, reads queue behind the state watches' (issue 23).
        self._listeners: dict[int, tuple[str, int]] | None = None
        self._endpoints: dict[int, dict[str, tuple[str, int]]] = {}  # the same, by listener name
        self._watching_listeners = False

    # -- brokers ----------------------------------------------------------------------------

    @inlineCallbacks
    def brokers(self, listener: str = ""):
        """{broker id: (host, port)} of the live brokers' modern listeners named ``listener``
        (those without one are left out), this one's always; "": the first listeners'."""
        own = self.endpoints().get(listener) if listener and self.endpoints is not None else None
        found = {self.broker_id: own or (self.host, self.port())}
        if self.zk is not None:
            if self._listeners is None:
                yield self._watch_listeners()
            if own is None:
                found.update({b: a for b, a in (self._listeners or {}).items() if b != self.broker_id})
            else:
                found.update({b: named[listener] for b, named in self._endpoints.items()
                              if b != self.broker_id and listener in named})
        return found

    def _watch_listeners(self):
        if not self._watching_listeners:
            self._watching_listeners = True  # a new session has no watches: read again
            self.zk.add_state_listener(lambda state: self._read_listeners() if state == CONNECTED else None)
        return self._read_listeners()

    @inlineCallbacks
    def _read_listeners(self):
        path = replication_paths.LISTENERS
        try:
            nodes = yield self._other_brokers_nodes(path, watch=lambda event: self._read_listeners())
        except UNAVAILABLE_ERRORS as exc:  # kept as they were; the next session reads them again
            log.warning("reading %s from ZooKeeper failed: %r", path, exc)
            return
        found, named = {}, {}
        for broker, value in nodes.items():
            try:
                data = json.loads(value)
                found[broker] = (str(data["host"]), int(data["port"]))
                named[broker] = dict(_named(endpoint) for endpoint in data["endpoints"]) \
                    if "endpoints" in data else {PLAINTEXT: found[broker]}
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring %s: %s", listener_path(broker), exc)
                found.pop(broker, None)
        self._listeners, self._endpoints = found, named

    @inlineCallbacks
    def _other_brokers_nodes(self, path: str, *, watch=None):
        """{broker id: value} of the children of ``path`` named by the other brokers' ids
        (none without ZooKeeper, or without ``path``), read all at once; ``watch`` is set on
        the children. ZooKeeper's unavailability errors are raised."""
        if self.zk is None:
            return {}
        try:
            names = yield self.zk.get_children(path, watch=watch) if watch else self.zk.get_children(path)
            ids = [int(name) for name in names if name.isdigit() and int(name) != self.broker_id]
            values = yield gatherResults([self._value_or_none(f"{path}/{broker}") for broker in ids],
                                         consumeErrors=True)
        except NoNodeError:
            return {}
        except FirstError as exc:
            raise exc.subFailure.value from None
        return {broker: value for broker, value in zip(ids, values) if value is not None}

    @inlineCallbacks
    def _value_or_none(self, path: str):
        try:
            value, _stat = yield self.zk.get(path)
        except NoNodeError:
            return None
        return value

    def controller_id(self) -> int:
        if self.controller is None:
            return self.broker_id
        return self.controller.controller_id if self.controller.controller_id is not None else -1

    # -- topics -----------------------------------------------------------------------------

    @inlineCallbacks
    def topic_names(self):
        """Every topic: replicated ones and 0.7 ones (registered anywhere, or held here)."""
        names = set(self.logs.topics())
        if self.zk is not None:
            names.update(self.cluster.assignments)
            try:
                names.update((yield self.zk.get_children(registry_paths.BROKER_TOPICS)))
            except UNAVAILABLE_ERRORS as exc:  # NoNodeError among them: no 0.7 topic registered
                if not isinstance(exc, NoNodeError):
                    log.warning("listing 0.7 topics in ZooKeeper failed: %r", exc)
        return sorted(names)

    @inlineCallbacks
    def topic(self, name: str):
        """The TopicView of ``name``, or None if no broker has it."""
        if self.cluster is not None and self.cluster.is_replicated(name):
            return self._replicated(name)
        pairs = yield self._read_pairs(name)
        if not pairs:
            return None
        live = self.cluster.brokers if self.cluster is not None else {self.broker_id: None}
        partitions = tuple(
            PartitionView(index, broker if broker in live else -1, 0, (broker,), (broker,) if broker in live else (),
                          local)
            for index, (broker, local) in enumerate(pairs))
        return TopicView(name, False, partitions)

    def _replicated(self, name: str) -> TopicView:
        assignment = self.cluster.assignments[name]
        partitions = []
        for partition, replicas in sorted(assignment.replicas.items()):
            state = self.cluster.state(name, partition)
            leader = state.leader if state is not None else replication_paths.NO_LEADER
            partitions.append(PartitionView(partition, leader, state.leader_epoch if state else -1, tuple(replicas),
                                            tuple(state.isr) if state else ()))
        return TopicView(name, True, tuple(partitions))

    @inlineCallbacks
    def _read_pairs(self, topic: str):
        counts: dict[int, int] = {}
        if not is_valid_topic_name(topic):  # no such node can exist, nor may its path be built
            return ()
        if self.logs.has_topic(topic):
            counts[self.broker_id] = self.partitions_for(topic)
        path = registry_paths.topic_path(topic)
        try:
            nodes = yield self._other_brokers_nodes(path)
        except UNAVAILABLE_ERRORS as exc:  # answer with what this broker knows itself
            log.warning("reading %s from ZooKeeper failed: %r", path, exc)
            nodes = {}
        for broker, value in nodes.items():
            try:
                counts[broker] = registry_paths.decode_partition_count(value)
            except ValueError:
                continue
        pairs = tuple((broker, local) for broker in sorted(counts) for local in range(counts[broker]))
        self._pairs[topic] = pairs
        return pairs

    @inlineCallbacks
    def local_partition(self, topic: str, partition: int):
        """Where modern ``partition`` of 0.7 topic ``topic`` is in this broker's logs: its local
        partition number, or a Kafka error code (int, negated) when it is elsewhere or unknown.
        The pairs are those last read; they are read again when the partition is not in them."""
        pairs = self._pairs.get(topic)
        if pairs is None or not 0 <= partition < len(pairs):
            pairs = yield self._read_pairs(topic)
        return locate_pair(pairs, partition, self.broker_id)

    def partition_names(self, topic: str):
        """{modern partition: its name in ZooKeeper's committed offsets (docs/kafka-protocol.md §5: ``<broker>-<local
        partition>`` for a 0.7 topic, the number for a replicated one)}; None for a topic
        no broker has."""
        if self.cluster is not None and self.cluster.is_replicated(topic):
            return {p: str(p) for p in self.cluster.assignments[topic].replicas}
        pairs = self._pairs.get(topic)
        if pairs is None:  # not read yet: a Deferred, which the coordinator waits for
            return self._read_pairs(topic).addCallback(_names)
        return _names(pairs)

    def local_partition_now(self, topic: str, partition: int) -> int | None:
        """As ``local_partition`` from the pairs already read; None when it must read them."""
        pairs = self._pairs.get(topic)
        if pairs is None or not 0 <= partition < len(pairs):
            return None
        return locate_pair(pairs, partition, self.broker_id)


def _named(endpoint: str) -> tuple[str, tuple[str, int]]:
    name, host, port = parse_endpoint(endpoint)
    return name, (host, port)


def _names(pairs) -> dict[int, str] | None:
    return {index: registry_paths.partition_name(*pair) for index, pair in enumerate(pairs)} if pairs else None


def is_valid_topic_name(name: str) -> bool:
    try:
        check_topic_name(name)
    except InvalidTopic:
        return False
    return True


def locate_pair(pairs, partition: int, broker_id: int) -> int:
    """The local partition of modern ``partition``, or minus the error code that says why not."""
    if not 0 <= partition < len(pairs):
        return -kafka_errors.UNKNOWN_TOPIC_OR_PARTITION
    broker, local = pairs[partition]
    return local if broker == broker_id else -kafka_errors.NOT_LEADER_FOR_PARTITION


class ListenerRegistration(Service):
    """Writes this broker's modern listeners to ``/replication/listeners/<id>`` (ephemeral) once
    the reactor runs, and again after each new ZooKeeper session. ``endpoints()``: {listener
    name: (host, port)}, the first one's also written as ``host`` and ``port``."""

    def __init__(self, zk, *, broker_id: int, host: str, port: Callable[[], int],
                 endpoints: Callable[[], dict[str, tuple[str, int]]] | None = None) -> None:
        self._zk, self._broker_id, self._host, self._port = zk, broker_id, host, port
        self._endpoints = endpoints or (lambda: {PLAINTEXT: (host, port())})

    def startService(self) -> None:
        super().startService()
        self._zk.add_state_listener(self._on_state)
        self._register()

    def _on_state(self, state) -> None:
        if state == CONNECTED and self.running:
            self._register()

    @inlineCallbacks
    def _register(self):
        path = listener_path(self._broker_id)
        value = json.dumps({"version": 1, "host": self._host, "port": self._port(), "endpoints": [
            endpoint_text(name, host, port) for name, (host, port) in self._endpoints().items()]}).encode()
        try:
            try:
                yield self._zk.create(path, value, ephemeral=True)
            except NodeExistsError:
                # Left by this broker's previous process, whose session has not expired yet:
                # it would vanish with that session. (A live broker with this id cannot exist:
                # the broker's own registration refused to start then.)
                yield self._zk.delete(path)
                yield self._zk.create(path, value, ephemeral=True)
        except Exception as exc:  # the next CONNECTED tries again
            log.warning("registering the Kafka clients' listener at %s failed: %s", path, exc)
