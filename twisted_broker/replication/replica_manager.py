"""This broker's replicas: roles from ZooKeeper, the leader's side of replication, and the
hooks the broker calls (docs/replication.md). Reactor thread only.

- **Roles.** ClusterState reports every assignment and partition state; for each partition
  assigned here the manager makes the replica lead, follow (through ``fetchers``) or wait.
- **Fencing.** When the ZooKeeper connection is suspended or lost, every leader here is
  fenced at once: it takes no write and publishes no high watermark until the connection is
  back and the state still names it at its epoch. A follower's fetch carrying a newer epoch
  fences it too.
- **Leaders.** Appends, follower fetches and a timer feed ``LeaderPartition``; its decisions
  are carried out here: publish the high watermark (waking held fetches and produce requests
  waiting for acks=all), write a proposed ISR by compare-and-set.
- **Checkpoints.** Every high watermark goes to ``replication-offset-checkpoint`` each second
  (off the reactor thread when ``run_blocking`` is given: checkpoint_writer.py) and at stop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.task import LoopingCall

from twisted_broker.errors import InvalidTopic, WrongPartition
from twisted_broker.registry.zookeeper import BadVersionError, CONNECTED, NoNodeError, ZooKeeper
from twisted_broker.registry import replication_paths as paths
from twisted_broker.replication.checkpoint_writer import HighWatermarkCheckpoints, RunBlocking
from twisted_broker.replication.cluster_state import ClusterState, Subscriber
from twisted_broker.codec.kafka07.replication_errors import NotEnoughReplicas, NotLeaderForPartition
from twisted_broker.replication.election import with_isr_sessions
from twisted_broker.replication.fetch_sessions import FetchSessions
from twisted_broker.replication.follower_requests import FollowerRequests
from twisted_broker.replication.leader import Decision
from twisted_broker.replication.log_failures import OfflineReplicas, log_failure
from twisted_broker.registry.replication_paths import NO_LEADER, PartitionState
from twisted_broker.replication.replica import Replica, Role
from twisted_broker.replication.replica_ends import PublishedEnds
from twisted_broker.storage.log_manager import LogManager

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_S = 1.0
REFUSAL_LOG_INTERVAL_S = 60.0


class ReplicaManager(FollowerRequests):
    def __init__(self, *, broker_id: int, logs: LogManager, zk: ZooKeeper, cluster: ClusterState, clock,
                 lag_time_max_ms: int, min_insync_replicas: int, count_flushed: bool = False,
                 session: str = "", run_blocking: RunBlocking | None = None) -> None:
        self.broker_id = broker_id
        # This process's registration (creatorId): a state naming this broker leader under
        # another session was given to a previous run, which may have lost its unflushed tail.
        self.session = session
        self.logs = logs
        self.zk = zk
        self.cluster = cluster
        self.clock = clock
        self.lag_time_max_ms = lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        # log.visibility=flushed: the high watermark counts what each ISR member has fsynced,
        # not what it has written (docs/replication.md §6).
        self.count_flushed = count_flushed
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.offline = OfflineReplicas(broker_id=broker_id, zk=zk)  # logs failed here: given up
        self.ends = PublishedEnds(broker_id=broker_id, zk=zk, session=session, clock=clock)  # for the controller
        self.connected = zk.connected
        # ZooKeeper's states read in full since the connection last came back: until then the
        # cache may name this broker leader at an epoch deposed meanwhile (a session that
        # expired while it was away: simulation seed 572942119), so leaders stay fenced.
        self.state_read = False
        self.stopping = False
        self.leaving = False  # in a controlled shutdown: no ISR proposals of its own (service.py)
        # Called with a replica whose role became TRUNCATING or that stopped following (set
        # by the fetchers, which then pick it up or drop it).
        self.on_follow: Callable[[Replica], object] = lambda replica: None
        # Followers' fetches held for new data (handlers/kafka07/replication_requests.py): woken by appends.
        self.fetch_sessions = FetchSessions(clock)  # the followers' fetch sessions here (as their leader)
        self._tick = LoopingCall(self._tick_leaders)
        self._checkpoint = LoopingCall(self.checkpoint_high_watermarks)
        self.checkpoints = HighWatermarkCheckpoints(logs.log_dir, run_blocking)
        # Figures for /metrics and the debug port.
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.not_enough_replicas = 0
        self.event_errors = 0  # partitions' events that raised (logged; the others went on)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self.cluster.subscribers.append(Subscriber(
            on_assignment=self._assignment_changed, on_state=self._state_changed, on_brokers=self._brokers_changed,
            on_resynced=self._resynced))
        self.zk.add_state_listener(self._on_connection)
        self.connected = self.zk.connected  # the broker connected before this service started
        self.state_read = self.connected and self.cluster.synced
        self._tick.clock = self._checkpoint.clock = self.clock
        self._tick.start(max(min(self.lag_time_max_ms / 4000, 1.0), 0.05), now=False)
        self._checkpoint.start(CHECKPOINT_INTERVAL_S, now=False)

    def stop(self) -> None:
        self.stopping = True
        for loop in (self._tick, self._checkpoint):
            if loop.running:
                loop.stop()
        for replica in self.replicas.values():
            replica.fail_waiters(NotLeaderForPartition(f"broker {self.broker_id} is stopping"))
        self.checkpoint_high_watermarks(at_once=True)

    def _on_connection(self, state) -> None:
        self.connected = state == CONNECTED
        if not self.connected:
            self.state_read = False  # (CONNECTED always follows one of these)
            fenced = [r.name for r in self.replicas.values() if r.role is Role.LEADER and not r.fenced]
            for replica in self.replicas.values():
                if replica.leader is not None:
                    replica.leader.fence()
            if fenced:
                log.warning("ZooKeeper connection %s: fenced the leaders of %s until it is back", state,
                            ", ".join(fenced))
        # On CONNECTED, ClusterState reads everything again; _resynced unfences (not before:
        # the brokers' list, read first, calls _state_changed with the states not yet read).

    def _resynced(self) -> None:
        self.state_read = self.connected
        self.offline.publish()  # an ephemeral node: gone with a previous session
        self.ends.publish(self.cluster, self.replicas, then=self._take_roles)  # likewise
        self._take_roles()
        for topic in list(self.cluster.assignments):
            self._guarded(self._assignment_changed, topic)

    def _take_roles(self) -> None:
        for topic, partition in list(self.replicas):
            self._guarded(self._state_changed, topic, partition)

    def _guarded(self, handle, *key) -> None:
        """One partition's (or topic's) event: an exception is logged loudly and the next one
        is handled (issue 22, defect 2: one partition's error must not stop the broker's
        handling of every other)."""
        try:
            handle(*key)
        except Exception:
            self.event_errors += 1
            log.exception("replication: handling %s failed; going on with the others", "-".join(map(str, key)))

    # -- roles ---------------------------------------------------------------------------

    def _assignment_changed(self, topic: str) -> None:
        assignment = self.cluster.assignments.get(topic)
        for (t, partition), replica in list(self.replicas.items()):
            if t == topic and (assignment is None or self.broker_id not in assignment.replicas.get(partition, ())):
                self._drop(replica)
        if assignment is None:
            return
        for partition, replicas in assignment.replicas.items():
            held = self.replicas.get((topic, partition))
            if held is not None and held.leader is not None and held.leader.replicas != replicas:
                held.leader.replicas_changed(replicas, self._now_ms())
            if self.broker_id in replicas and (topic, partition) not in self.replicas:
                try:
                    log_ = self.logs.create_replica_log(topic, partition)
                except (InvalidTopic, OSError) as exc:
                    log.error("cannot hold a replica of %s-%d: %s", topic, partition, exc)
                    continue
                self.replicas[(topic, partition)] = Replica(topic, partition, log_)
                self._guarded(self._state_changed, topic, partition)

    def _give_up(self, replica: Replica, error: OSError) -> None:
        """The replica's log failed on disk: neither lead nor follow it again in this process."""
        self.offline.add(replica.topic, replica.partition, error)
        replica.go_offline_for_good()
        replica.fail_waiters(NotLeaderForPartition(f"{replica.name}: its log failed on broker {self.broker_id}"))
        self.on_follow(replica)  # the fetchers drop it
        self.fetch_sessions.changed((replica.topic, replica.partition))  # its followers hear the error

    def _drop(self, replica: Replica) -> None:
        """A reassignment moved this replica away: stop, and delete its log."""
        del self.replicas[(replica.topic, replica.partition)]
        replica.role = Role.OFFLINE
        replica.fail_waiters(NotLeaderForPartition(f"{replica.name} moved away from broker {self.broker_id}"))
        self.on_follow(replica)
        self.logs.delete_log(replica.topic, replica.partition)
        log.info("%s: replica moved away from this broker and deleted", replica.name)

    def _state_changed(self, topic: str, partition: int) -> None:
        replica = self.replicas.get((topic, partition))
        state = self.cluster.state(topic, partition)
        if replica is None or state is None or self.stopping or (topic, partition) in self.offline:
            return
        self.fetch_sessions.changed((topic, partition))  # a held fetch's answer may now carry an error
        replicas = self.cluster.replicas(topic, partition)
        if self.session and (self.cluster.sessions.get(self.broker_id) != self.session or not self.ends.published):
            # Not registered under this run (yet): the registration of a previous run may
            # linger until its session expires. Kafka's brokers take no replica role before
            # they register: a follower that joined an ISR under its previous run's
            # registration would look, once registered, as if it had restarted since. Nor
            # before the recovered log ends are published (replica_ends.py).
            if replica.role is not Role.OFFLINE:
                replica.fail_waiters(NotLeaderForPartition(f"{replica.name}: broker {self.broker_id} is not registered"))
                replica.go_offline(state)
                self.on_follow(replica)
            return
        if state.leader == self.broker_id and state.leader_session and state.leader_session != self.session:
            # Elected in a previous run: wait for the controller's new epoch (it sees the
            # new registration) rather than lead with what this run's log may lack.
            was_fetching = replica.role is not Role.OFFLINE
            replica.go_offline(state)
            if was_fetching:
                self.on_follow(replica)  # now offline: the fetchers drop it
            log.info("%s: elected leader in a previous run (epoch %d); waiting for a new election", replica.name,
                     state.leader_epoch)
            return
        if state.leader == self.broker_id:
            if replica.role is Role.LEADER and replica.leader_epoch == state.leader_epoch:
                leader = replica.leader
                if tuple(leader.isr) != state.isr and leader.pending_isr is None:
                    # The controller changed it (a follower's broker gone, a controlled
                    # shutdown): counted as this leader's own writes are, since on a broker's
                    # loss the controller and the leader race to remove it and either may win.
                    self._count_isr_change(leader.isr, state.isr)
                    self._apply(replica, leader.isr_written(state.isr))
                if leader.fenced and self.connected and self.state_read:
                    leader.unfence()
                    log.info("%s: leader again at epoch %d", replica.name, state.leader_epoch)
                return
            was_fetching = replica.role is not Role.LEADER
            replica.become_leader(state, replicas, broker_id=self.broker_id, now_ms=self._now_ms(),
                                  lag_time_max_ms=self.lag_time_max_ms, min_insync_replicas=self.min_insync_replicas,
                                  log_end=self._leader_end(replica))
            if was_fetching:
                self.on_follow(replica)  # now leader: the fetchers drop it
            if self.count_flushed:
                replica.log.on_durable = lambda: self.appended(replica) if replica.leader is not None else None
            if not (self.connected and self.state_read):
                replica.leader.fence()
            return
        if replica.role is Role.LEADER:
            log.info("%s: no longer leader (epoch %d -> %d, leader %s)", replica.name, replica.leader_epoch,
                     state.leader_epoch, state.leader if state.online else "none")
            replica.fail_waiters(NotLeaderForPartition(f"{replica.name} has a new leader"))
        if state.leader == NO_LEADER:
            replica.go_offline(state)
            self.on_follow(replica)
        elif replica.leader_id != state.leader or replica.leader_epoch != state.leader_epoch \
                or replica.role not in (Role.TRUNCATING, Role.FOLLOWING):
            replica.become_follower(state)
            self.on_follow(replica)

    def _brokers_changed(self, gone: set[int], new: set[int]) -> None:
        if self.broker_id in new or self.broker_id in gone:  # this run's registration came (or went)
            self.ends.publish(self.cluster, self.replicas, then=self._take_roles)  # (a new one's node went)
            self._take_roles()
        if not gone:
            return
        for replica in self.replicas.values():
            if replica.role is Role.LEADER:
                self._apply(replica, replica.leader.brokers_gone(gone))

    def _tick_leaders(self) -> None:
        now = self._now_ms()
        for key, replica in self.replicas.items():
            if key not in self.offline and (error := log_failure(replica.log)) is not None:
                self._give_up(replica, error)
            if replica.role is Role.LEADER:
                for follower, fetched_ms in self.fetch_sessions.last_fetches(key, replica.leader.followers):
                    replica.leader.follower_seen(follower, fetched_ms)
                self._apply(replica, replica.leader.tick(now))
            if replica.ack_waiters:
                replica.expire_waiters(now)

    # -- the leader's decisions ------------------------------------------------------------

    def _apply(self, replica: Replica, decision: Decision) -> None:
        if decision.high_watermark is not None:
            self.fetch_sessions.changed((replica.topic, replica.partition), wake=False)
            replica.log.publish_to(decision.high_watermark)
            replica.release_waiters(decision.copies)
        if decision.propose_isr is not None:
            self._write_isr(replica, decision.propose_isr)

    @inlineCallbacks
    def _write_isr(self, replica: Replica, isr: tuple[int, ...]):
        topic, partition, leader = replica.topic, replica.partition, replica.leader
        state, version = self.cluster.state(topic, partition), self.cluster.version(topic, partition)
        if self.leaving or state is None or version is None or state.leader_epoch != leader.leader_epoch:
            leader.isr_write_refused()
            return
        new = with_isr_sessions(PartitionState(state.leader, state.leader_epoch, isr, state.controller_epoch,
                                               state.leader_session), state, self.cluster.sessions)
        try:
            stat = yield self.zk.set(paths.state_path(topic, partition), new.encode(), version)
        except (BadVersionError, NoNodeError):
            leader.isr_write_refused()
            yield self.cluster.reread_state(topic, partition)
            # A state that arrived while this write was pending was not applied (one proposal
            # at a time), and the re-read finds nothing newer than the cache then: take the
            # state the cache holds now, or this leader would go on with an ISR ZooKeeper no
            # longer has (issue 22, defect 7).
            self._state_changed(topic, partition)
            return
        except Exception as exc:  # connection trouble: the leader is fenced meanwhile
            log.warning("%s: writing the ISR %s failed: %s", replica.name, list(isr), exc)
            leader.isr_write_refused()
            self._state_changed(topic, partition)
            return
        if replica.leader is not leader:
            return  # deposed while writing
        self._count_isr_change(leader.isr, isr)
        log.info("%s: ISR %s -> %s", replica.name, list(leader.isr), list(isr))
        self.cluster.written(topic, partition, new, stat.version, stat.mzxid)
        self._apply(replica, leader.isr_written(isr))

    def _count_isr_change(self, before, after) -> None:
        if len(after) > len(before):
            self.isr_expands += 1
        elif len(after) < len(before):
            self.isr_shrinks += 1

    # -- hooks for the broker ------------------------------------------------------------

    def replica(self, topic: str, partition: int) -> Replica:
        """This broker's replica of a replicated partition. Raises WrongPartition if it holds none."""
        replica = self.replicas.get((topic, partition))
        if replica is None:
            count = self.cluster.partition_count(topic)
            where = "not a partition of it" if count is None or not 0 <= partition < count else "not held here"
            raise WrongPartition(f"partition {partition} of replicated topic {topic!r}: {where}")
        return replica

    def leader_for_write(self, topic: str, partition: int, required_acks: int, *, counted: bool = True) -> Replica:
        """The replica, if this broker may append to it now. Raises WrongPartition,
        NotLeaderForPartition or NotEnoughReplicas (the last is logged and counted, unless
        not ``counted``: a question asked before the request's own, which counts it)."""
        replica = self.replica(topic, partition)
        if replica.role is Role.LEADER and (error := log_failure(replica.log)) is not None:
            self._give_up(replica, error)  # at once, not at the next tick: the append would fail
        if replica.role is not Role.LEADER:
            leader = replica.leader_id
            raise NotLeaderForPartition(f"{replica.name} is led by broker {leader}" if leader is not None
                                        else f"{replica.name} has no leader")
        try:
            replica.leader.check_write(required_acks=required_acks)
        except NotEnoughReplicas as exc:
            if not counted:
                raise
            self.not_enough_replicas += 1
            now = self.clock.seconds()
            if now - replica.refusal_logged_at >= REFUSAL_LOG_INTERVAL_S:  # not once per request
                replica.refusal_logged_at = now
                log.warning("%s: writes refused: %s", replica.name, exc)
            raise
        return replica

    def appended(self, replica: Replica) -> None:
        """The broker appended to a leader's log."""
        if replica.leader is not None:
            self._apply(replica, replica.leader.appended(self._leader_end(replica)))
        self.fetch_sessions.changed((replica.topic, replica.partition))

    def _leader_end(self, replica: Replica) -> int:
        return replica.log.flushed_end if self.count_flushed else replica.log.written_end

    def wait_for_commit(self, replica: Replica, end_offset: int, timeout_ms: int) -> Deferred:
        """Fires once the high watermark reaches ``end_offset``; fails with RequestTimedOut
        after ``timeout_ms``, or NotLeaderForPartition if the leadership is lost first."""
        return replica.wait_for_commit(end_offset, self._now_ms() + timeout_ms)

    # -- checkpoints and figures ---------------------------------------------------------

    def checkpoint_high_watermarks(self, at_once: bool = False) -> None:
        self.checkpoints.save({key: r.log.end_offset for key, r in self.replicas.items()}, at_once=at_once)

    def fence_leaders(self) -> int:
        """Refuse writes on every partition led here (a controlled shutdown moved them, or
        will have once the states are read); returns how many. A state read afterwards that
        still names this broker leader (nobody else could take it) unfences it."""
        leaders = [r.leader for r in self.replicas.values() if r.role is Role.LEADER and not r.leader.fenced]
        for leader in leaders:
            leader.fence()
        return len(leaders)

    def leader_count(self) -> int:
        return sum(r.role is Role.LEADER for r in self.replicas.values())

    def under_replicated(self) -> int:
        """Partitions led here whose ISR is smaller than their replica list."""
        return sum(r.role is Role.LEADER and len(r.leader.isr) < len(self.cluster.replicas(r.topic, r.partition))
                   for r in self.replicas.values())

    def _now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

