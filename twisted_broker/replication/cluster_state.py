"""What ZooKeeper says about replication, kept current on the reactor thread by watches.

One ``ClusterState`` per broker feeds both the replica manager and the controller: the live
brokers (0.7's ``/brokers/ids``, with their addresses and their *broker epoch*: the czxid of
the registration, new at every registration, as Kafka's KIP-380), every replicated topic's
assignment, every partition's state with the node version that compare-and-set writes need
and the zxid of its last write, and the partitions each broker lists as offline (its log
failed there: ``/replication/offline_replicas/<id>``). Each change is passed to the
subscribers' callbacks after the cache holds it; a callback that raises is logged and counted
(``callback_errors``), and the others are called all the same: one partition's trouble must
not stop a broker handling the next, nor its controller from campaigning.

Watches fire once; each handler reads the node again with a new watch, so a change made
between the event and the read is never missed (the read sees it). kazoo keeps watches over a
reconnection but not over a new session, so every (re)connection reads everything again
(``resync``): a few reads per partition, cheap at this project's scale.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from twisted.internet.defer import Deferred, gatherResults, inlineCallbacks

from twisted_broker.registry import paths as registry_paths
from twisted_broker.registry.zookeeper import CONNECTED, NoNodeError, ZooKeeper
from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import PartitionState, TopicAssignment

log = logging.getLogger(__name__)

RESYNC_RETRY_S = 1.0  # after a resync that failed while connected


@dataclass
class Subscriber:
    on_brokers: Callable[[set[int], set[int]], object] = lambda gone, new: None  # (gone, new) ids
    on_assignment: Callable[[str], object] = lambda topic: None
    on_state: Callable[[str, int], object] = lambda topic, partition: None
    on_resynced: Callable[[], object] = lambda: None
    on_offline: Callable[[int], object] = lambda broker_id: None  # its offline_replicas listing changed


@dataclass
class ClusterState:
    """The cache; read it freely on the reactor thread, change it only through ZooKeeper."""

    zk: ZooKeeper
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)  # id -> (host, port)
    sessions: dict[int, str] = field(default_factory=dict)  # id -> creatorId of its registration
    broker_epochs: dict[int, int] = field(default_factory=dict)  # id -> czxid of its registration
    assignments: dict[str, TopicAssignment] = field(default_factory=dict)
    # topic -> (czxid, version) of its node: the version for a conditional write, the czxid
    # tells a topic deleted and created again from an older read finishing late
    assignment_stamps: dict[str, tuple[int, int]] = field(default_factory=dict)
    states: dict[tuple[str, int], tuple[PartitionState, int]] = field(default_factory=dict)  # -> (state, version)
    # -> the zxid of the state's last write, when known: a broker registered after it (a larger
    # czxid) restarted since, so the ISR that state names for it predates the restart.
    state_zxids: dict[tuple[str, int], int] = field(default_factory=dict)
    offline_replicas: dict[int, frozenset[tuple[str, int]]] = field(default_factory=dict)
    subscribers: list[Subscriber] = field(default_factory=list)
    synced: bool = False
    callback_errors: int = 0  # subscriber callbacks that raised (each logged with its traceback)
    clock: object = None  # for the resync retry; None: the global reactor
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

    def registered_since_state(self, topic: str, partition: int) -> frozenset[int]:
        """The ISR members registered after the partition's state was last written: they
        restarted (or their session was renewed) since, so their membership predates it and
        their log may lack what that run had not flushed. Empty when the state's zxid is not
        known yet (a state this broker created; the watch's read brings it)."""
        state, zxid = self.state(topic, partition), self.state_zxids.get((topic, partition))
        if state is None:
            return frozenset()
        # The creatorId a member had when it joined, where the state records it (the leader's:
        # also the one it was elected under, as a state of an older version records only
        # that): a member whose session was only renewed (same process) did not restart. Else
        # the broker epoch: registered after the state's last write.
        recorded = dict(state.isr_sessions)
        if state.online and state.leader_session:
            recorded.setdefault(state.leader, state.leader_session)
        return frozenset(b for b in state.isr if (
            self.sessions.get(b, recorded[b]) != recorded[b] if b in recorded
            else zxid is not None and self.broker_epochs.get(b, 0) > zxid))

    def offline_for(self, topic: str, partition: int) -> frozenset[int]:
        """The brokers whose log of this partition failed (they list it as offline)."""
        return frozenset(b for b, listed in self.offline_replicas.items() if (topic, partition) in listed)

    # -- calling the subscribers -----------------------------------------------------------

    def _notify(self, callback: str, *args) -> None:
        for subscriber in list(self.subscribers):
            try:
                getattr(subscriber, callback)(*args)
            except Exception:
                self.callback_errors += 1
                log.exception("%s%s raised in a subscriber of the ZooKeeper cache (the others go on)", callback,
                              _described(args))

    # -- reading ZooKeeper ---------------------------------------------------------------

    @inlineCallbacks
    def resync(self):
        """Read everything again with fresh watches."""
        self._generation += 1
        generation = self._generation
        try:
            yield self._read_brokers(generation)
            yield self._ensure(paths.OFFLINE_REPLICAS)
            yield self._read_offline(generation)
            yield self._ensure(paths.TOPICS)
            yield self._read_topics(generation)
        except Exception as exc:  # the connection went again: the next CONNECTED resyncs
            log.warning("reading replication state from ZooKeeper failed: %s", exc)
            if generation == self._generation and self.zk.connected:
                # Not a lost connection (no CONNECTED will come to resync): try again, or
                # this broker's controller would never campaign.
                self._later(RESYNC_RETRY_S, self._resync_if_current, generation)
            return
        if generation == self._generation:
            self.synced = True
            self._notify("on_resynced")

    def _resync_if_current(self, generation: int) -> None:
        if generation == self._generation:
            self.resync()

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
        found, sessions, epochs = {}, {}, {}
        for name in ids:
            if not name.isdigit():
                continue
            try:
                value, stat = yield self.zk.get(registry_paths.broker_id_path(int(name)))
                info = registry_paths.BrokerInfo.decode(int(name), value)
            except NoNodeError:
                continue  # gone between the listing and the read
            except ValueError as exc:
                log.warning("ignoring broker %s: %s", name, exc)
                continue
            found[int(name)] = (info.host, info.port)
            sessions[int(name)] = info.creator_id
            epochs[int(name)] = stat.czxid
        if generation != self._generation:
            return
        # A broker registered again restarted (or its session was renewed): it is reported as
        # gone (with everything it had not flushed) and new at once. Its new registration's
        # czxid says so even when the two changes reached us as one; a new creatorId too.
        restarted = {b for b in found if b in self.brokers and (
            self.broker_epochs.get(b) != epochs[b] or self.sessions.get(b) != sessions[b])}
        gone = set(self.brokers) - set(found) | restarted
        new = set(found) - set(self.brokers) | restarted
        self.brokers, self.sessions, self.broker_epochs = found, sessions, epochs
        if gone or new:
            self._notify("on_brokers", gone, new)

    def read_brokers(self):
        """Read the registered brokers again now (a new controller's first look: the cache may
        not have caught up with the expiry that made it controller). A Deferred."""
        return self._read_brokers(self._generation)

    def _brokers_changed(self, generation: int) -> None:
        if generation == self._generation:
            self._read_brokers(generation).addErrback(self._log_failure, "brokers")

    @inlineCallbacks
    def _read_offline(self, generation: int):
        """Each broker's listing of the partitions whose log failed there (children watched,
        each child's value watched)."""
        names = yield self.zk.get_children(paths.OFFLINE_REPLICAS,
                                           watch=lambda event: self._offline_changed(generation))
        ids = {int(name) for name in names if name.isdigit()}
        if generation != self._generation:
            return
        for broker_id in set(self.offline_replicas) - ids:
            del self.offline_replicas[broker_id]
            self._notify("on_offline", broker_id)
        for broker_id in sorted(ids - set(self.offline_replicas)):
            yield self._read_offline_listing(broker_id, generation)

    def _offline_changed(self, generation: int) -> None:
        if generation == self._generation:
            self._read_offline(generation).addErrback(self._log_failure, "offline replicas")

    @inlineCallbacks
    def _read_offline_listing(self, broker_id: int, generation: int):
        path = paths.offline_replicas_path(broker_id)
        try:
            value, _stat = yield self.zk.get(
                path, watch=lambda event: self._offline_listing_changed(broker_id, generation))
            listed = frozenset((m.topic, m.partition) for m in paths.decode_partition_list(value, with_replicas=False))
        except NoNodeError:
            listed = None
        except ValueError as exc:
            log.error("%s: %s", path, exc)
            return
        if generation != self._generation:
            return
        if listed is None:
            if self.offline_replicas.pop(broker_id, None) is not None:
                self._notify("on_offline", broker_id)
        elif self.offline_replicas.get(broker_id) != listed:
            self.offline_replicas[broker_id] = listed
            log.warning("broker %d lists %d partition(s) offline (its log failed): %s", broker_id, len(listed),
                        ", ".join(f"{t}-{p}" for t, p in sorted(listed)))
            self._notify("on_offline", broker_id)

    def _offline_listing_changed(self, broker_id: int, generation: int) -> None:
        if generation == self._generation:
            self._read_offline_listing(broker_id, generation).addErrback(self._log_failure,
                                                                         f"offline replicas of {broker_id}")

    @inlineCallbacks
    def _read_topics(self, generation: int):
        topics = yield self.zk.get_children(paths.TOPICS, watch=lambda event: self._topics_changed(generation))
        if generation != self._generation:
            return
        for topic in set(self.assignments) - set(topics):
            del self.assignments[topic]
            self.assignment_stamps.pop(topic, None)
            for key in [k for k in self.states if k[0] == topic]:
                del self.states[key]
                self.state_zxids.pop(key, None)
            self._notify("on_assignment", topic)  # deleted: its replicas go (and their logs)
        # All at once (ZooKeeper answers a session's requests in order): a resync of a
        # thousand partitions costs a few round trips, not two per partition (issue 23).
        yield gatherResults([self._read_assignment(topic, generation) for topic in topics], consumeErrors=True)

    def _topics_changed(self, generation: int) -> None:
        if generation == self._generation:
            self._read_topics(generation).addErrback(self._log_failure, "topics")

    @inlineCallbacks
    def _read_assignment(self, topic: str, generation: int):
        try:
            value, stat = yield self.zk.get(paths.topic_path(topic),
                                            watch=lambda event: self._assignment_changed(topic, generation))
            assignment = TopicAssignment.decode(value)
        except NoNodeError:
            return
        except ValueError as exc:
            log.error("replicated topic %s: %s", topic, exc)
            return
        if generation != self._generation:
            return
        # A topic created since the first read most likely has no states yet (the controller
        # writes them after it sees the topic): watch for them with one request each, not a
        # failed get first. At the first read (a start), the topics found have their states.
        fresh = self.synced and topic not in self.assignments and not any(key[0] == topic for key in self.states)
        if self.assignment_stamps.get(topic, (-1, -1)) < (stat.czxid, stat.version):  # not a late older read
            self.assignments[topic] = assignment
            self.assignment_stamps[topic] = (stat.czxid, stat.version)
            self._notify("on_assignment", topic)
        yield gatherResults([self._read_state(topic, partition, generation, expect_missing=fresh)
                             for partition in self.assignments[topic].replicas], consumeErrors=True)

    def _assignment_changed(self, topic: str, generation: int) -> None:
        if generation == self._generation:
            self._read_assignment(topic, generation).addErrback(self._log_failure, f"topic {topic}")

    @inlineCallbacks
    def _read_state(self, topic: str, partition: int, generation: int, *, watch: bool = True,
                    expect_missing: bool = False):
        path = paths.state_path(topic, partition)
        changed = lambda event: self._state_changed(topic, partition, generation)  # noqa: E731
        try:
            if watch:
                # One request, not two: a get's watch fires on a change or a deletion (with a
                # thousand partitions moving, every state is read again by every broker).
                try:
                    if expect_missing:
                        raise NoNodeError(path)
                    value, stat = yield self.zk.get(path, watch=changed)
                except NoNodeError:
                    if (yield self.zk.exists(path, watch=changed)) is None:
                        return  # not created yet by the controller: the watch fires when it is
                    value, stat = yield self.zk.get(path)
            else:
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
            if known[1] == stat.version:  # this broker's own write: its zxid is now known
                self.state_zxids[(topic, partition)] = stat.mzxid
            return  # an older read finishing late
        self.states[(topic, partition)] = (state, stat.version)
        self.state_zxids[(topic, partition)] = stat.mzxid
        self._notify("on_state", topic, partition)

    def _state_changed(self, topic: str, partition: int, generation: int) -> None:
        if generation == self._generation and topic in self.assignments:
            self._read_state(topic, partition, generation).addErrback(self._log_failure, f"{topic}-{partition}")

    def reread_state(self, topic: str, partition: int) -> Deferred:
        """Read one state now (after a refused compare-and-set), beside its watch. A failed
        read is logged, not raised: the watch, or the next resync, reads it again (callers
        that fire and forget it left "Unhandled error in Deferred" behind)."""
        return self._read_state(topic, partition, self._generation, watch=False).addErrback(
            self._log_failure, f"{topic}-{partition}")

    def written(self, topic: str, partition: int, state: PartitionState, version: int,
                zxid: int | None = None) -> None:
        """Record a state this broker wrote, so the next compare-and-set uses its version
        without waiting for the watch. Without ``zxid`` the previous write's is kept until the
        watch's read: older, so at worst a broker registered in between looks restarted."""
        known = self.states.get((topic, partition))
        if known is None or known[1] < version:
            self.states[(topic, partition)] = (state, version)
            if zxid is not None:
                self.state_zxids[(topic, partition)] = zxid
            self._notify("on_state", topic, partition)

    def assignment_version(self, topic: str) -> int | None:
        stamp = self.assignment_stamps.get(topic)
        return stamp[1] if stamp else None

    def assignment_written(self, topic: str, assignment: TopicAssignment, stat) -> None:
        """Record a topic assignment this broker wrote (a reassignment step) with the new
        node's stat, so the next step of the same request starts from it, not from the
        assignment it replaced."""
        if self.assignment_stamps.get(topic, (-1, -1)) < (stat.czxid, stat.version):
            self.assignments[topic] = assignment
            self.assignment_stamps[topic] = (stat.czxid, stat.version)
            self._notify("on_assignment", topic)

    def _later(self, seconds: float, call, *args):
        if self.clock is None:
            from twisted.internet import reactor
            self.clock = reactor
        return self.clock.callLater(seconds, call, *args)

    @staticmethod
    def _log_failure(failure, what: str) -> None:
        log.warning("watching %s in ZooKeeper failed: %s", what, failure.getErrorMessage())


def _described(args: tuple) -> str:
    """A callback's arguments for its log line: ``(topic-partition)`` names the partition."""
    if len(args) == 2 and isinstance(args[0], str) and isinstance(args[1], int):
        return f" for {args[0]}-{args[1]}"
    return f"{args!r}" if args else ""
