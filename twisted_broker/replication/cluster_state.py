"""What ZooKeeper says about replication, kept current on the reactor thread by watches.

One ``ClusterState`` per broker feeds both the replica manager and the controller: the live
brokers (0.7's ``/brokers/ids``, with their addresses), every replicated topic's assignment,
and every partition's state with the node version that compare-and-set writes need. Each
change is passed to the subscribers' callbacks after the cache holds it.

Watches fire once; each handler reads the node again with a new watch, so a change made
between the event and the read is never missed (the read sees it). kazoo keeps watches over a
reconnection but not over a new session, so every (re)connection reads everything again
(``resync``): a few reads per partition, cheap at this project's scale.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from twisted.internet.defer import Deferred, inlineCallbacks

from twisted_broker.registry import paths as registry_paths
from twisted_broker.registry.zookeeper import CONNECTED, NoNodeError, ZooKeeper
from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import PartitionState, TopicAssignment

log = logging.getLogger(__name__)


@dataclass
class Subscriber:
    on_brokers: Callable[[set[int], set[int]], object] = lambda gone, new: None  # (gone, new) ids
    on_assignment: Callable[[str], object] = lambda topic: None
    on_state: Callable[[str, int], object] = lambda topic, partition: None
    on_resynced: Callable[[], object] = lambda: None


@dataclass
class ClusterState:
    """The cache; read it freely on the reactor thread, change it only through ZooKeeper."""

    zk: ZooKeeper
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)  # id -> (host, port)
    sessions: dict[int, str] = field(default_factory=dict)  # id -> creatorId of its registration
    assignments: dict[str, TopicAssignment] = field(default_factory=dict)
    states: dict[tuple[str, int], tuple[PartitionState, int]] = field(default_factory=dict)  # -> (state, version)
    subscribers: list[Subscriber] = field(default_factory=list)
    synced: bool = False
    _generation: int = 0  # bumped by every resync: results of an older one are dropped

    def start(self) -> None:
        self.zk.add_state_listener(self._on_connection)
        if self.zk.connected:
            self.resync()

    def _on_connection(self, state) -> None:
        if state == CONNECTED:
            self.resync()

    # -- queries -------------------------------------------------------------------------

    def state(self, topic: str, partition: int) -> PartitionState | None:
        entry = self.states.get((topic, partition))
        return entry[0] if entry else None

    def version(self, topic: str, partition: int) -> int | None:
        entry = self.states.get((topic, partition))
        return entry[1] if entry else None

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        assignment = self.assignments.get(topic)
        return assignment.replicas.get(partition, ()) if assignment else ()

    def is_replicated(self, topic: str) -> bool:
        return topic in self.assignments

    def partition_count(self, topic: str) -> int | None:
        assignment = self.assignments.get(topic)
        return assignment.partition_count if assignment else None

    # -- reading ZooKeeper ---------------------------------------------------------------

    @inlineCallbacks
    def resync(self):
        """Read everything again with fresh watches."""
        self._generation += 1
        generation = self._generation
        try:
            yield self._read_brokers(generation)
            yield self._ensure(paths.TOPICS)
            yield self._read_topics(generation)
        except Exception as exc:  # the connection went again: the next CONNECTED resyncs
            log.warning("reading replication state from ZooKeeper failed: %s", exc)
            return
        if generation == self._generation:
            self.synced = True
            for subscriber in self.subscribers:
                subscriber.on_resynced()

    @inlineCallbacks
    def _ensure(self, path: str):
        try:
            yield self.zk.create(path)
        except Exception:  # NodeExistsError, the usual case
            pass

    @inlineCallbacks
    def _read_brokers(self, generation: int):
        yield self._ensure(registry_paths.BROKER_IDS)
        ids = yield self.zk.get_children(registry_paths.BROKER_IDS, watch=lambda event: self._brokers_changed(generation))
        found, sessions = {}, {}
        for name in ids:
            if not name.isdigit():
                continue
            try:
                value, _stat = yield self.zk.get(registry_paths.broker_id_path(int(name)))
                info = registry_paths.BrokerInfo.decode(int(name), value)
            except NoNodeError:
                continue  # gone between the listing and the read
            except ValueError as exc:
                log.warning("ignoring broker %s: %s", name, exc)
                continue
            found[int(name)] = (info.host, info.port)
            sessions[int(name)] = info.creator_id
        if generation != self._generation:
            return
        # A broker registered again under a new creatorId restarted: it is reported as gone
        # (with everything it had not flushed) and new at once.
        restarted = {b for b in found if b in self.sessions and self.sessions[b] != sessions[b]}
        gone = set(self.brokers) - set(found) | restarted
        new = set(found) - set(self.brokers) | restarted
        self.brokers, self.sessions = found, sessions
        if gone or new:
            for subscriber in self.subscribers:
                subscriber.on_brokers(gone, new)

    def _brokers_changed(self, generation: int) -> None:
        if generation == self._generation:
            self._read_brokers(generation).addErrback(self._log_failure, "brokers")

    @inlineCallbacks
    def _read_topics(self, generation: int):
        topics = yield self.zk.get_children(paths.TOPICS, watch=lambda event: self._topics_changed(generation))
        if generation != self._generation:
            return
        for topic in set(self.assignments) - set(topics):
            del self.assignments[topic]
            for key in [k for k in self.states if k[0] == topic]:
                del self.states[key]
        for topic in topics:
            yield self._read_assignment(topic, generation)

    def _topics_changed(self, generation: int) -> None:
        if generation == self._generation:
            self._read_topics(generation).addErrback(self._log_failure, "topics")

    @inlineCallbacks
    def _read_assignment(self, topic: str, generation: int):
        try:
            value, _stat = yield self.zk.get(paths.topic_path(topic),
                                             watch=lambda event: self._assignment_changed(topic, generation))
            assignment = TopicAssignment.decode(value)
        except NoNodeError:
            return
        except ValueError as exc:
            log.error("replicated topic %s: %s", topic, exc)
            return
        if generation != self._generation:
            return
        self.assignments[topic] = assignment
        for subscriber in self.subscribers:
            subscriber.on_assignment(topic)
        for partition in assignment.replicas:
            yield self._read_state(topic, partition, generation)

    def _assignment_changed(self, topic: str, generation: int) -> None:
        if generation == self._generation:
            self._read_assignment(topic, generation).addErrback(self._log_failure, f"topic {topic}")

    @inlineCallbacks
    def _read_state(self, topic: str, partition: int, generation: int, *, watch: bool = True):
        path = paths.state_path(topic, partition)
        try:
            if watch:  # an exists watch also fires on a data change
                stat = yield self.zk.exists(path, watch=lambda event: self._state_changed(topic, partition, generation))
                if stat is None:
                    return  # not created yet by the controller: the watch fires when it is
            value, stat = yield self.zk.get(path)
            state = PartitionState.decode(value)
        except NoNodeError:
            return
        except ValueError as exc:
            log.error("%s-%d: %s", topic, partition, exc)
            return
        if generation != self._generation:
            return
        known = self.states.get((topic, partition))
        if known is not None and known[1] >= stat.version:
            return  # an older read finishing late
        self.states[(topic, partition)] = (state, stat.version)
        for subscriber in self.subscribers:
            subscriber.on_state(topic, partition)

    def _state_changed(self, topic: str, partition: int, generation: int) -> None:
        if generation == self._generation and topic in self.assignments:
            self._read_state(topic, partition, generation).addErrback(self._log_failure, f"{topic}-{partition}")

    def reread_state(self, topic: str, partition: int) -> Deferred:
        """Read one state now (after a refused compare-and-set), beside its watch."""
        return self._read_state(topic, partition, self._generation, watch=False)

    def written(self, topic: str, partition: int, state: PartitionState, version: int) -> None:
        """Record a state this broker wrote, so the next compare-and-set uses its version
        without waiting for the watch."""
        known = self.states.get((topic, partition))
        if known is None or known[1] < version:
            self.states[(topic, partition)] = (state, version)
            for subscriber in self.subscribers:
                subscriber.on_state(topic, partition)

    @staticmethod
    def _log_failure(failure, what: str) -> None:
        log.warning("watching %s in ZooKeeper failed: %s", what, failure.getErrorMessage())
