"""The controller (docs/replication.md §3): one broker at a time makes every leadership change.

Every broker runs one ``Controller``; the one whose ephemeral ``/replication/controller`` node
exists acts, the others wait for the node to go. Winning is one ZooKeeper transaction: the
node is created and ``/replication/controller_epoch`` bumped together (compare-and-set), so
there is never a controller node whose epoch was not bumped. Acting means *reconciling*: for
every partition, compare what ZooKeeper says with the rules of election.py and write what
must change. Every write is *fenced* (KAFKA-6082): one transaction with a check that the
epoch node is still at the version this controller bumped it to, beside the write's own
compare-and-set; once a newer controller exists the check fails, and this one stops acting
at once (between two partitions) and campaigns again. Reconciling is idempotent and reads
nothing but ZooKeeper (through ClusterState), so a controller that dies half-way leaves
nothing a successor cannot finish: it simply reconciles again. It runs after every change of
the live brokers (a broker registered anew counts as gone and new: its broker epoch, the
czxid of its registration, changed), of the topics, of a broker's offline replicas, of an
admin request, and when control is won. Admin requests are controller_admin.py's.
"""

from __future__ import annotations

import logging
import random

from twisted.internet.defer import gatherResults, inlineCallbacks

from twisted_broker.registry.zookeeper import BadVersionError, CONNECTED, NodeExistsError, NoNodeError, ZooKeeper
from twisted_broker.registry import replication_paths as paths
from twisted_broker.replication.cluster_state import ClusterState, Subscriber
from twisted_broker.replication.controller_admin import ControllerAdmin
from twisted_broker.replication.election import leader_counts, next_state, with_isr_sessions
from twisted_broker.replication.replica_ends import EndsReader
from twisted_broker.registry.replication_paths import ControllerInfo, PartitionState

log = logging.getLogger(__name__)

LOGGED_PASS = 50  # a pass writing at least this many states logs its timing
CREATE_BATCH = 200  # new partitions' first states per fenced multi-op
CONTROLLER_RETRY_S = 0.2  # after a refused write or a failed read: ZooKeeper moved, look again


class Deposed(Exception):
    """A newer controller bumped the controller epoch: this one's write was refused."""


class Controller:
    def __init__(self, *, broker_id: int, zk: ZooKeeper, cluster: ClusterState, clock,
                 unclean_leader_election: bool = False, rng: random.Random | None = None) -> None:
        self.broker_id = broker_id
        self._rng = rng or random.Random()  # the retries' jitter; tests/simulation seeds it
        self._zk = zk
        self._cluster = cluster
        self._clock = clock
        self._unclean = unclean_leader_election
        self.active = False
        self.epoch: int | None = None
        self._epoch_version: int | None = None  # of the epoch node, as this controller bumped it
        self.controller_id: int | None = None  # who controls, as last seen
        self._reconciling = False
        self._again = False
        # One timer each: a pending reconcile retry must not swallow a campaign's (the
        # controller node would then stay unwatched and nobody would control).
        self._retries: dict[str, object] = {}
        self._stopped = False
        self.admin = ControllerAdmin(self, zk, cluster)
        self.ends = EndsReader(zk=zk, cluster=cluster, on_change=self.reconcile)  # restarted ISRs' log ends
        # Figures for /metrics and the debug port.
        self.elections = 0
        self.offline_partitions = 0
        self.fenced_writes = 0  # writes refused because a newer controller exists

    def start(self) -> None:
        self._cluster.subscribers.append(Subscriber(
            on_brokers=lambda gone, new: self.reconcile(), on_assignment=lambda topic: self.reconcile(),
            on_state=self._state_changed, on_resynced=self._campaign, on_offline=lambda broker: self.reconcile()))
        self._zk.add_state_listener(self._on_connection)

    def _state_changed(self, topic: str, partition: int) -> None:
        # An ISR that grows may complete a reassignment's copy; otherwise states are the
        # leaders' and this controller's own writes, nothing to reconcile.
        if self.admin.reassigning:
            self.reconcile()

    def stop(self) -> None:
        """Stop acting (the session closes next, which frees the controller node)."""
        self._stopped = True
        self.active = False
        for retry in self._retries.values():
            if retry.active():
                retry.cancel()

    def _on_connection(self, state) -> None:
        if state != CONNECTED:
            # A controller that cannot reach ZooKeeper may have lost its node: stop writing
            # until it knows (the fence would refuse a stale write anyway).
            self.active = False

    # -- election of the controller ---------------------------------------------------------

    @inlineCallbacks
    def _campaign(self):
        if self._stopped:
            return
        try:
            # The watch is set whether the node exists or not: its creation, change or
            # deletion calls us again.
            stat = yield self._zk.exists(paths.CONTROLLER, watch=self._controller_changed)
            if stat is not None:
                value, stat = yield self._zk.get(paths.CONTROLLER)
                info = ControllerInfo.decode(value)
                self.controller_id = info.broker_id
                if getattr(stat, "ephemeralOwner", None) == self._zk.session_id:
                    yield self._resume(info)
                else:
                    self.active = False
                return
            epoch, version = yield self._read_epoch()
            results = yield self._zk.transaction([
                ("create", paths.CONTROLLER, ControllerInfo(self.broker_id, epoch + 1).encode(), True),
                ("set", paths.CONTROLLER_EPOCH, str(epoch + 1).encode(), version)])
        except NodeExistsError:
            return  # another broker won; the exists watch calls us for its node
        except BadVersionError:
            # The epoch moved between our read and our write (nothing was written): read again.
            self._schedule("campaign", self._campaign)
            return
        except Exception as exc:
            log.warning("controller election: %s", exc)
            self._schedule("campaign", self._campaign)
            return
        self._take_office(epoch + 1, results[1].version)

    @inlineCallbacks
    def _resume(self, info: ControllerInfo):
        """The node is this session's own: we are the controller, or won in a transaction
        whose answer was lost, or a reconnection or a refused write made us look again."""
        value, stat = yield self._zk.get(paths.CONTROLLER_EPOCH)
        if int(value) == info.epoch:
            if not (self.active and self.epoch == info.epoch and self._epoch_version == stat.version):
                self._take_office(info.epoch, stat.version)
            else:
                self.reconcile()
            return
        # The epoch moved past our node's (a newer controller's): ours is stale. Give it up
        # and stand again.
        log.warning("controller node of epoch %d is stale (controller epoch %s): standing again", info.epoch,
                    value.decode(errors="replace"))
        self.active = False
        yield self.admin.delete(paths.CONTROLLER)
        self._schedule("campaign", self._campaign)

    def _take_office(self, epoch: int, epoch_version: int) -> None:
        self.epoch, self._epoch_version, self.controller_id, self.active = epoch, epoch_version, self.broker_id, True
        log.info("broker %d is the controller (controller epoch %d)", self.broker_id, self.epoch)
        self.admin.watch()
        # The session expiry that freed the controller node may have taken brokers with it
        # whose removal the cache has not read yet: electing one of them would drop the live
        # ISR members (simulation seed 572942160). Kafka's new controller reads the live
        # brokers first too.
        read = self._cluster.read_brokers()
        read.addErrback(lambda failure: log.warning("the new controller's read of the brokers failed: %s",
                                                    failure.getErrorMessage()))
        read.addCallback(lambda _: self.reconcile())

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

    # -- fenced writes ----------------------------------------------------------------------

    @inlineCallbacks
    def transaction(self, ops: list[tuple]):
        """Apply ``ops`` only while this controller's epoch is the current one: a check of the
        epoch node's version goes beside them. Fires with the ops' results; fails with
        Deposed (and this controller stops acting and stands again) once a newer controller
        exists, else with the ops' own errors."""
        if not self.active or self._epoch_version is None:
            raise Deposed(f"broker {self.broker_id} is not the controller")
        try:
            results = yield self._zk.transaction([("check", paths.CONTROLLER_EPOCH, self._epoch_version), *ops])
        except BadVersionError:
            # The check or an op's own compare-and-set: the epoch node says which.
            if (yield self._epoch_is_ours()):
                raise
            self._deposed()
            raise Deposed(f"controller epoch {self.epoch} is no longer the current one") from None
        return results[1:]

    @inlineCallbacks
    def _epoch_is_ours(self):
        try:
            _value, stat = yield self._zk.get(paths.CONTROLLER_EPOCH)
        except Exception:  # cannot tell: stand again, which finds out
            return False
        return stat.version == self._epoch_version

    def _deposed(self) -> None:
        if not self.active:
            return
        self.active = False
        self.fenced_writes += 1
        log.warning("broker %d is no longer the controller (epoch %d): a newer one exists; its writes are refused",
                    self.broker_id, self.epoch)
        self._schedule("campaign", self._campaign)

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
        if hasattr(result, "getErrorMessage"):  # ZooKeeper went: a reconnection reconciles again
            log.warning("reconciling failed: %s", result.getErrorMessage())
        if self._again:
            self._again = False
            self.reconcile()

    @inlineCallbacks
    def _reconcile(self):
        """Decide every partition at once, then write the decisions pipelined: one fenced
        compare-and-set each, all in flight together (ZooKeeper applies a session's requests
        in order), so losing a broker that leads hundreds of partitions costs about one round
        trip, not one per partition (issue 23; Kafka 1.1's asynchronous batched writes,
        KAFKA-5642). A write refused because the state moved (its leader's ISR write came
        first) re-reads that state and the pass is run again; the others stand."""
        cluster = self._cluster
        started = self._clock.seconds()
        leaving = frozenset((yield self.admin.shutdown_requests()))
        yield self.ends.read()  # before the decisions: the states they start from are read after
        if not self.active or self._stopped:
            return  # deposed, or stopping: not one write more
        live = set(cluster.brokers)
        counts = leader_counts({key: state for key, (state, _v) in cluster.states.items()})
        decisions = []
        for topic, assignment in sorted(cluster.assignments.items()):
            for partition, replicas in sorted(assignment.replicas.items()):
                state = cluster.state(topic, partition)
                restarted = cluster.registered_since_state(topic, partition)
                new = next_state(state, replicas, live=live, failed=cluster.offline_for(topic, partition),
                                 leader_counts=counts, controller_epoch=self.epoch, unclean=self._unclean,
                                 leaving=leaving, restarted=restarted, ends=self.ends.of(topic, partition))
                if new is None:
                    continue
                decisions.append((topic, partition, state, new, replicas, restarted))
                if state is not None and new.leader != state.leader:  # balance the next choices
                    if new.online:
                        counts[new.leader] = counts.get(new.leader, 0) + 1
                    if state.online:
                        counts[state.leader] = counts.get(state.leader, 1) - 1
        if decisions:
            # New partitions' first states in multi-ops (a topic of 1,000 partitions: a few
            # writes, not 1,000); every other change one compare-and-set each, pipelined.
            new_ones = [i for i, (topic, partition, *_rest) in enumerate(decisions)
                        if cluster.version(topic, partition) is None]
            changes = [i for i, (topic, partition, *_rest) in enumerate(decisions)
                       if cluster.version(topic, partition) is not None]
            writes = [self.write(decisions[i][0], decisions[i][1], decisions[i][3]) for i in changes]
            batches = [self.create_states([(decisions[i][0], decisions[i][1], decisions[i][3])
                                           for i in new_ones[at:at + CREATE_BATCH]])
                       for at in range(0, len(new_ones), CREATE_BATCH)]
            if leaving:
                # A broker in a controlled shutdown is answered once its leaderships are moved,
                # not after the whole pass (its ISR removals race the leaders' own ISR writes).
                moved = [w for w, i in zip(writes, changes) if decisions[i][2].leader in leaving]
                gatherResults(moved, consumeErrors=True).addCallback(
                    lambda _: self.admin.answer_finished_shutdowns(leaving) if self.active else None).addErrback(
                    lambda failure: log.warning("answering controlled shutdowns: %s", failure.getErrorMessage()))
            decided = self._clock.seconds()
            results = yield gatherResults([*writes, *batches], consumeErrors=True)
            written = [False] * len(decisions)
            for i, ok in zip([*changes, *new_ones], [*results[:len(writes)], *(ok for batch in results[len(writes):]
                                                                              for ok in batch)]):
                written[i] = ok
            if len(decisions) >= LOGGED_PASS:
                log.info("controller: %d partition states written in %.2f s (%d refused), decided in %.2f s",
                         len(decisions), self._clock.seconds() - decided, written.count(False), decided - started)
            for (topic, partition, state, new, replicas, restarted), ok in zip(decisions, written):
                if ok and state is not None and new.leader != state.leader:
                    self.elections += 1
                    self._log_election(topic, partition, state, new, replicas, live, restarted)
            if not all(written):
                self._schedule("reconcile", self.reconcile)
                if self.active:
                    yield self.admin.answer_finished_shutdowns(leaving)
                return
        self.offline_partitions = sum(1 for state, _v in cluster.states.values() if not state.online)
        if self.active:
            yield self.admin.carry_out(leaving)

    def _log_election(self, topic, partition, old: PartitionState, new: PartitionState, replicas, live,
                      restarted) -> None:
        if not new.online:
            log.error("%s-%d is offline: no in-sync replica of %s is alive and whole (ISR %s, live %s, restarted "
                      "since %s)%s", topic, partition, list(replicas), list(old.isr), sorted(live), sorted(restarted),
                      "" if self._unclean else "; unclean.leader.election.enable=false keeps it so")
        elif new.leader not in old.isr:
            log.warning("%s-%d: UNCLEAN election of broker %d, outside the ISR %s: committed messages it lacks "
                        "are lost", topic, partition, new.leader, list(old.isr))
        else:
            log.info("%s-%d: leader %s -> %d, epoch %d, ISR %s", topic, partition,
                     old.leader if old.online else "none", new.leader, new.leader_epoch, list(new.isr))

    def prepared(self, topic: str, partition: int, state: PartitionState) -> PartitionState:
        """``state`` as it is written: the leader's and ISR members' sessions recorded."""
        old = self._cluster.state(topic, partition)
        if state.online and (old is None or state.leader_epoch != old.leader_epoch):
            # Every election (a new epoch) records the session the leader has now: a state
            # carried over from an older one would make the leader refuse to lead.
            state = PartitionState(state.leader, state.leader_epoch, state.isr, state.controller_epoch,
                                   self._cluster.sessions.get(state.leader, ""))
        return with_isr_sessions(state, old, self._cluster.sessions)

    @inlineCallbacks
    def write(self, topic: str, partition: int, state: PartitionState):
        """Compare-and-set one state, fenced; False when ZooKeeper moved (the caller reconciles
        again) or this controller was deposed."""
        version = self._cluster.version(topic, partition)
        path = paths.state_path(topic, partition)
        state = self.prepared(topic, partition, state)
        try:
            if version is None:
                yield self.admin.ensure(path.rsplit("/", 1)[0])
                yield self.transaction([("create", path, state.encode(), False)])
                new_version, zxid = 0, None
            else:
                [stat] = yield self.transaction([("set", path, state.encode(), version)])
                new_version, zxid = stat.version, stat.mzxid
        except Deposed:
            return False
        except (BadVersionError, NodeExistsError):
            yield self._cluster.reread_state(topic, partition)
            return False
        except Exception as exc:
            log.warning("writing %s: %s", path, exc)
            return False
        self._cluster.written(topic, partition, state, new_version, zxid)
        return True

    @inlineCallbacks
    def create_states(self, batch: list[tuple[str, int, PartitionState]]):
        """New partitions' first states in one fenced multi-op; one bool per state. A batch
        refused as a whole (a parent node missing: a topic written without them; a state that
        is there already) is written one state at a time."""
        prepared = [(topic, partition, self.prepared(topic, partition, state)) for topic, partition, state in batch]
        try:
            yield self.transaction([("create", paths.state_path(topic, partition), state.encode(), False)
                                    for topic, partition, state in prepared])
        except Deposed:
            return [False] * len(batch)
        except (NoNodeError, NodeExistsError):
            return (yield gatherResults([self.write(*item) for item in batch], consumeErrors=True))
        except Exception as exc:
            log.warning("writing %d new partition states: %s", len(batch), exc)
            return [False] * len(batch)
        for topic, partition, state in prepared:
            self._cluster.written(topic, partition, state, 0)
        return [True] * len(batch)

    def schedule_reconcile(self) -> None:
        self._schedule("reconcile", self.reconcile)

    def _schedule(self, kind: str, call) -> None:
        pending = self._retries.get(kind)
        if self._stopped or (pending is not None and pending.active()):
            return
        self._retries[kind] = self._clock.callLater(CONTROLLER_RETRY_S * (1 + self._rng.random()), call)
