"""The controller (docs/replication.md §3): one broker at a time makes every leadership change.

Every broker runs one ``Controller``; the one whose ephemeral ``/replication/controller`` node
exists acts, the others wait for the node to go. Acting means *reconciling*: for every
partition, compare what ZooKeeper says with the rules of election.py and write what must
change, each write a compare-and-set on the state node's version. Reconciling is idempotent
and reads nothing but ZooKeeper (through ClusterState), so a controller that dies half-way
leaves nothing a successor cannot finish: it simply reconciles again. It runs after every
change of the live brokers, of the topics, of an admin request, and when control is won.

Admin requests are nodes under ``/replication/admin`` (the commands write them): controlled
shutdown (a broker's own ephemeral node, answered by writing ``done`` in it), preferred
leader election and partition reassignment (deleted when done). A reassignment keeps its
progress in ZooKeeper: the assignment is first widened to old + new replicas, and narrowed to
the new ones only once every new replica is in the ISR, so data is copied before any replica
is dropped.
"""

from __future__ import annotations

import logging
import random
from dataclasses import replace

from twisted.internet.defer import inlineCallbacks

from twisted_broker.registry.zookeeper import BadVersionError, CONNECTED, NodeExistsError, NoNodeError, ZooKeeper
from twisted_broker.registry import replication_paths as paths
from twisted_broker.replication.assignment import AssignmentError, check_reassignment
from twisted_broker.replication.cluster_state import ClusterState, Subscriber
from twisted_broker.replication.election import (
    elect_leader, initial_state, leader_counts, preferred_leader, remove_from_isr,
)
from twisted_broker.registry.replication_paths import ControllerInfo, PartitionState, TopicAssignment
from twisted_broker.replication.reassignment import reassignment_step

log = logging.getLogger(__name__)

CONTROLLER_RETRY_S = 0.2  # after a refused write or a failed read: ZooKeeper moved, look again


class Controller:
    def __init__(self, *, broker_id: int, zk: ZooKeeper, cluster: ClusterState, clock,
                 unclean_leader_election: bool = False) -> None:
        self.broker_id = broker_id
        self._zk = zk
        self._cluster = cluster
        self._clock = clock
        self._unclean = unclean_leader_election
        self.active = False
        self.epoch: int | None = None
        self.controller_id: int | None = None  # who controls, as last seen
        self._reconciling = False
        self._again = False
        self._retry = None
        self._stopped = False
        self._reassigning = False  # a reassignment is pending: ISR changes may advance it
        # Figures for /metrics and the debug port.
        self.elections = 0
        self.offline_partitions = 0

    def start(self) -> None:
        self._cluster.subscribers.append(Subscriber(
            on_brokers=lambda gone, new: self.reconcile(), on_assignment=lambda topic: self.reconcile(),
            on_state=self._state_changed, on_resynced=self._campaign))
        self._zk.add_state_listener(self._on_connection)

    def _state_changed(self, topic: str, partition: int) -> None:
        # An ISR that grows may complete a reassignment's copy; otherwise states are the
        # leaders' and this controller's own writes, nothing to reconcile.
        if self._reassigning:
            self.reconcile()

    def stop(self) -> None:
        """Stop acting (the session closes next, which frees the controller node)."""
        self._stopped = True
        self.active = False
        if self._retry is not None and self._retry.active():
            self._retry.cancel()

    def _on_connection(self, state) -> None:
        if state != CONNECTED:
            # A controller that cannot reach ZooKeeper may have lost its node: stop writing
            # until it knows (compare-and-set would refuse a stale write anyway).
            self.active = False

    # -- election of the controller ---------------------------------------------------------

    @inlineCallbacks
    def _campaign(self):
        if self._stopped:
            return
        try:
            # A bound method: kazoo keeps one watcher per function, however often we campaign.
            stat = yield self._zk.exists(paths.CONTROLLER, watch=self._controller_changed)
            if stat is not None:
                value, _ = yield self._zk.get(paths.CONTROLLER)
                info = ControllerInfo.decode(value)
                self.controller_id = info.broker_id
                self.active = info.broker_id == self.broker_id and self.epoch == info.epoch
                if self.active:
                    self.reconcile()
                return
            epoch, version = yield self._read_epoch()
            yield self._zk.create(paths.CONTROLLER, ControllerInfo(self.broker_id, epoch + 1).encode(), ephemeral=True)
            yield self._zk.set(paths.CONTROLLER_EPOCH, str(epoch + 1).encode(), version)
        except NodeExistsError:
            return  # another broker won; the exists watch calls us when its node goes
        except BadVersionError:
            # Only the holder of the node bumps the epoch, so this is a predecessor's late
            # write: give the node up and try again with the epoch read anew.
            yield self._delete(paths.CONTROLLER)
            self._schedule(self._campaign)
            return
        except Exception as exc:
            log.warning("controller election: %s", exc)
            self._schedule(self._campaign)
            return
        self.epoch, self.controller_id, self.active = epoch + 1, self.broker_id, True
        log.info("broker %d is the controller (controller epoch %d)", self.broker_id, self.epoch)
        self._watch_admin()
        self.reconcile()

    def _controller_changed(self, event) -> None:
        self._campaign()

    @inlineCallbacks
    def _read_epoch(self):
        try:
            value, stat = yield self._zk.get(paths.CONTROLLER_EPOCH)
            return int(value), stat.version
        except NoNodeError:
            try:
                yield self._zk.create(paths.CONTROLLER_EPOCH, b"0")
            except NodeExistsError:
                pass
            value, stat = yield self._zk.get(paths.CONTROLLER_EPOCH)
            return int(value), stat.version

    # -- reconciling ------------------------------------------------------------------------

    def reconcile(self) -> None:
        """Bring every partition's state in line with the rules; coalesces calls made while
        one runs."""
        if not self.active or self._stopped:
            return
        if self._reconciling:
            self._again = True
            return
        self._reconciling = True
        self._reconcile().addBoth(self._reconciled)

    def _reconciled(self, result) -> None:
        self._reconciling = False
        if self._again:
            self._again = False
            self.reconcile()

    @inlineCallbacks
    def _reconcile(self, leaving: frozenset[int] = frozenset()):
        cluster = self._cluster
        live = set(cluster.brokers)
        leaving = frozenset(leaving | set((yield self._shutdown_requests())))
        counts = leader_counts({key: state for key, (state, _v) in cluster.states.items()})
        offline = 0
        for topic, assignment in sorted(cluster.assignments.items()):
            for partition, replicas in sorted(assignment.replicas.items()):
                state = cluster.state(topic, partition)
                if state is None:
                    new = initial_state(replicas, live, controller_epoch=self.epoch)
                else:
                    restarted = self._restarted_leader(state)
                    new = elect_leader(state, replicas, live=live, leader_counts=counts, controller_epoch=self.epoch,
                                       unclean=self._unclean, leaving=leaving | restarted)
                    if new is None and restarted:
                        # No other in-sync replica: it leads on, at a new epoch that fences
                        # what its previous run may have answered.
                        new = replace(state, leader_epoch=state.leader_epoch + 1, controller_epoch=self.epoch)
                    for gone in [b for b in (new or state).isr if b not in live or b in leaving]:
                        new = remove_from_isr(new or state, gone, controller_epoch=self.epoch) or new
                if new is not None and new != state:
                    if state is not None and new.leader != state.leader:
                        self.elections += 1
                        if new.online:
                            counts[new.leader] = counts.get(new.leader, 0) + 1
                        if state.online:
                            counts[state.leader] = counts.get(state.leader, 1) - 1
                        self._log_election(topic, partition, state, new, replicas, live)
                    if not (yield self._write(topic, partition, new)):
                        self._schedule(self.reconcile)
                        return
                current = cluster.state(topic, partition)
                offline += current is not None and not current.online
        self.offline_partitions = offline
        yield self._answer_shutdowns(leaving)
        yield self._reassign()
        yield self._preferred_election()

    def _restarted_leader(self, state: PartitionState) -> frozenset[int]:
        """{leader} if the leader is registered under another session than the one it was
        elected in (it restarted); empty otherwise."""
        session = self._cluster.sessions.get(state.leader)
        if state.online and session is not None and state.leader_session and state.leader_session != session:
            return frozenset({state.leader})
        return frozenset()

    def _log_election(self, topic, partition, old: PartitionState, new: PartitionState, replicas, live) -> None:
        if not new.online:
            log.error("%s-%d is offline: no in-sync replica of %s is alive (ISR %s, live %s)%s", topic, partition,
                      list(replicas), list(old.isr), sorted(live),
                      "" if self._unclean else "; unclean.leader.election.enable=false keeps it so")
        elif new.leader not in old.isr:
            log.warning("%s-%d: UNCLEAN election of broker %d, outside the ISR %s: committed messages it lacks "
                        "are lost", topic, partition, new.leader, list(old.isr))
        else:
            log.info("%s-%d: leader %s -> %d, epoch %d, ISR %s", topic, partition,
                     old.leader if old.online else "none", new.leader, new.leader_epoch, list(new.isr))

    @inlineCallbacks
    def _write(self, topic: str, partition: int, state: PartitionState):
        """Compare-and-set one state; False when ZooKeeper moved (the caller reconciles again)."""
        version = self._cluster.version(topic, partition)
        path = paths.state_path(topic, partition)
        old = self._cluster.state(topic, partition)
        if state.online and (old is None or state.leader_epoch != old.leader_epoch):
            # Every election (a new epoch) records the session the leader has now: a state
            # carried over from an older one would make the leader refuse to lead.
            state = replace(state, leader_session=self._cluster.sessions.get(state.leader, ""))
        try:
            if version is None:
                yield self._zk.create(path, state.encode())
                new_version = 0
            else:
                stat = yield self._zk.set(path, state.encode(), version)
                new_version = stat.version
        except (BadVersionError, NodeExistsError):
            yield self._cluster.reread_state(topic, partition)
            return False
        except Exception as exc:
            log.warning("writing %s: %s", path, exc)
            return False
        self._cluster.written(topic, partition, state, new_version)
        return True

    def _schedule(self, call) -> None:
        if self._stopped or (self._retry is not None and self._retry.active()):
            return
        self._retry = self._clock.callLater(CONTROLLER_RETRY_S * (1 + random.random()), call)

    # -- admin requests -----------------------------------------------------------------

    def _watch_admin(self) -> None:
        for path in (paths.SHUTDOWN, paths.PREFERRED_REPLICA_ELECTION, paths.REASSIGN_PARTITIONS):
            self._watch(path)

    @inlineCallbacks
    def _watch(self, path: str):
        try:
            if path == paths.SHUTDOWN:
                try:
                    yield self._zk.create(path)
                except NodeExistsError:
                    pass
                yield self._zk.get_children(path, watch=self._admin_changed)
            else:
                yield self._zk.exists(path, watch=self._admin_changed)
        except Exception as exc:
            log.warning("watching %s: %s", path, exc)

    def _admin_changed(self, event) -> None:
        # One bound method for the three nodes (kazoo keeps one watcher per function and path);
        # the event names the node, relative to the chroot.
        if self.active:
            self._watch(event.path)
            self.reconcile()

    @inlineCallbacks
    def _shutdown_requests(self):
        try:
            children = yield self._zk.get_children(paths.SHUTDOWN)
        except NoNodeError:
            return []
        asking = []
        for name in children:
            try:
                value, _ = yield self._zk.get(paths.shutdown_path(int(name)))
            except (NoNodeError, ValueError):
                continue
            if value != b"done":
                asking.append(int(name))
        return asking

    @inlineCallbacks
    def _answer_shutdowns(self, leaving: frozenset[int]):
        for broker_id in leaving:
            led = [key for key, (state, _) in self._cluster.states.items() if state.leader == broker_id]
            if led:
                log.info("controlled shutdown of broker %d: it still leads %d partition(s) no other in-sync "
                         "replica can take", broker_id, len(led))
            try:
                yield self._zk.set(paths.shutdown_path(broker_id), b"done")
            except NoNodeError:
                pass

    @inlineCallbacks
    def _read_request(self, path: str, *, with_replicas: bool):
        """An admin request's partitions and node version; None when there is none (a request
        that cannot be read is logged and deleted: its author's command reports the timeout)."""
        try:
            value, stat = yield self._zk.get(path)
            return paths.decode_partition_list(value, with_replicas=with_replicas), stat.version
        except NoNodeError:
            return None
        except ValueError as exc:
            log.error("%s refused: %s", path, exc)
            yield self._delete(path)
            return None

    @inlineCallbacks
    def _preferred_election(self):
        request = yield self._read_request(paths.PREFERRED_REPLICA_ELECTION, with_replicas=False)
        if request is None:
            return
        moves, _version = request
        wanted = {(m.topic, m.partition) for m in moves}
        live = set(self._cluster.brokers)
        for (topic, partition), (state, _v) in sorted(self._cluster.states.items()):
            if wanted and (topic, partition) not in wanted:
                continue
            new = preferred_leader(state, self._cluster.replicas(topic, partition), live=live,
                                   controller_epoch=self.epoch)
            if new is not None:
                log.info("%s-%d: preferred leader %d takes over (epoch %d)", topic, partition, new.leader,
                         new.leader_epoch)
                if not (yield self._write(topic, partition, new)):
                    self._schedule(self.reconcile)
                    return
                self.elections += 1
        yield self._delete(paths.PREFERRED_REPLICA_ELECTION)

    @inlineCallbacks
    def _reassign(self):
        request = yield self._read_request(paths.REASSIGN_PARTITIONS, with_replicas=True)
        self._reassigning = request is not None
        if request is None:
            return
        moves, version = request
        remaining = []
        for move in moves:
            done = yield self._reassign_one(move)
            if not done:
                remaining.append(move)
        try:
            if not remaining:
                yield self._zk.delete(paths.REASSIGN_PARTITIONS)
                self._reassigning = False
            elif len(remaining) != len(moves):
                yield self._zk.set(paths.REASSIGN_PARTITIONS,
                                   paths.encode_partition_list(remaining, with_replicas=True), version)
        except (NoNodeError, BadVersionError):
            self._schedule(self.reconcile)

    @inlineCallbacks
    def _reassign_one(self, move) -> bool:
        """One step of one partition's move; True once it is complete (or impossible)."""
        cluster = self._cluster
        assignment = cluster.assignments.get(move.topic)
        if assignment is None or move.partition not in assignment.replicas:
            log.error("reassignment of %s-%d refused: no such replicated partition", move.topic, move.partition)
            return True
        try:
            target = check_reassignment(move.replicas, cluster.brokers)
        except AssignmentError as exc:
            log.error("reassignment of %s-%d refused: %s", move.topic, move.partition, exc)
            return True
        step = reassignment_step(assignment.replicas[move.partition], target,
                                 cluster.state(move.topic, move.partition), controller_epoch=self.epoch)
        if step.state is not None and not (yield self._write(move.topic, move.partition, step.state)):
            return False
        if step.assignment is not None:
            yield self._write_assignment(move.topic, assignment, move.partition, step.assignment)
        if step.done:
            log.info("%s-%d reassigned to %s", move.topic, move.partition, list(target))
        return step.done

    @inlineCallbacks
    def _write_assignment(self, topic: str, assignment: TopicAssignment, partition: int, replicas):
        changed = TopicAssignment({**assignment.replicas, partition: tuple(replicas)})
        yield self._zk.set(paths.topic_path(topic), changed.encode())

    @inlineCallbacks
    def _delete(self, path: str):
        try:
            yield self._zk.delete(path)
        except NoNodeError:
            pass
