"""The controller's admin requests (docs/replication.md §2, §3): nodes under
``/replication/admin`` that the commands write and the controller carries out, each answer a
write fenced by the controller epoch (controller.py's ``transaction``).

- controlled shutdown: a broker's own ephemeral node, answered by writing ``done`` in it once
  its leaderships are moved (reconciling treats the broker as leaving);
- preferred leader election: leadership back to each listed partition's first replica;
- partition reassignment: the assignment is first widened to old + new replicas, and narrowed
  to the new ones only once every new replica is in the ISR, so data is copied before any
  replica is dropped (reassignment.py's steps). Each write of a topic's assignment is a
  compare-and-set on the topic node's version, and updates the cache at once, so moving two
  partitions of one topic in one request cannot undo the first move.

The request nodes are deleted when done; a reassignment keeps its progress in ZooKeeper.
"""

from __future__ import annotations

import logging

from twisted.internet.defer import inlineCallbacks

from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import PartitionState, TopicAssignment
from twisted_broker.registry.zookeeper import BadVersionError, NodeExistsError, NoNodeError, ZooKeeper
from twisted_broker.replication.assignment import AssignmentError, check_reassignment
from twisted_broker.replication.cluster_state import ClusterState
from twisted_broker.replication.election import preferred_leader
from twisted_broker.replication.reassignment import reassignment_step

log = logging.getLogger(__name__)


class ControllerAdmin:
    """The admin requests of one Controller (``controller``: its ``transaction``, ``write``,
    ``epoch``, ``active``, ``elections`` and ``schedule_reconcile``)."""

    def __init__(self, controller, zk: ZooKeeper, cluster: ClusterState) -> None:
        self._controller = controller
        self._zk = zk
        self._cluster = cluster
        self.reassigning = False  # a reassignment is pending: ISR changes may advance it
        # The brokers asking for a controlled shutdown, kept by watches (None: not read yet):
        # a pass then starts at once, not behind the hundreds of requests queued on this
        # session while a thousand partitions are created (issue 23).
        self._asking: frozenset[int] | None = None

    # -- watching the requests --------------------------------------------------------------

    def watch(self) -> None:
        self._asking = None
        for path in (paths.SHUTDOWN, paths.PREFERRED_REPLICA_ELECTION, paths.REASSIGN_PARTITIONS):
            self._watch(path)

    @inlineCallbacks
    def _watch(self, path: str):
        try:
            if path == paths.SHUTDOWN:
                yield self.ensure(path)
                yield self._read_shutdowns()
            else:
                yield self._zk.exists(path, watch=self._changed)
        except Exception as exc:
            if path == paths.SHUTDOWN:
                self._asking = None  # not known now: the next pass reads the requests itself
            log.warning("watching %s: %s", path, exc)

    def _changed(self, event) -> None:
        # One bound method for the nodes; the event names the node, relative to the chroot
        # (None when kazoo drops every watch with a lost session: watch them all). A change of
        # the shutdown requests (a child, or a request's value) reconciles once they are read.
        if self._controller.active:
            if event.path is None:
                self.watch()
            elif event.path.startswith(paths.SHUTDOWN):
                self._watch(paths.SHUTDOWN).addCallback(lambda _: self._controller.reconcile())
                return
            else:
                self._watch(event.path)
            self._controller.reconcile()

    @inlineCallbacks
    def _read_shutdowns(self):
        children = yield self._zk.get_children(paths.SHUTDOWN, watch=self._changed)
        self._asking = frozenset((yield self._asking_among(children, watch=self._changed)))

    # -- what a reconciliation does after the partitions -------------------------------------

    @inlineCallbacks
    def carry_out(self, leaving: frozenset[int]):
        yield self._answer_shutdowns(leaving)
        if self._controller.active:
            yield self._reassign()
        if self._controller.active:
            yield self._preferred_election()

    @inlineCallbacks
    def shutdown_requests(self):
        """The brokers asking for a controlled shutdown (not answered yet): as the watches
        last read them, or read now before they were."""
        if self._asking is not None:
            return sorted(self._asking)
        try:
            children = yield self._zk.get_children(paths.SHUTDOWN)
        except NoNodeError:
            return []
        return (yield self._asking_among(children))

    @inlineCallbacks
    def _asking_among(self, children: list[str], watch=None):
        reads = []
        for name in children:
            try:
                reads.append((int(name), self._zk.get(paths.shutdown_path(int(name)), watch=watch)))
            except ValueError:
                continue
        asking, failed = [], None
        for broker_id, read in reads:  # every read waited for, so none fails unseen
            try:
                value, _ = yield read
            except NoNodeError:
                continue
            except Exception as exc:
                failed = failed or exc
                continue
            if value != b"done":
                asking.append(broker_id)
        if failed is not None:
            raise failed
        return asking

    def answer_finished_shutdowns(self, leaving: frozenset[int]):
        """Answer the shutdowns already complete: brokers that lead nothing. A pass with
        refused writes (leaders' ISR writes came first) runs again before it answers the rest,
        and a broker waiting for its answer need not wait for that (issue 23: at scale, some
        write of most passes is refused, and a broker still in ISRs waited past its 5 s). Its
        ISR places left go with its session when it stops, as Kafka answers a controlled
        shutdown once the broker leads nothing."""
        done = frozenset(b for b in leaving if not any(
            state.leader == b for state, _v in self._cluster.states.values()))
        return self._answer_shutdowns(done)

    @inlineCallbacks
    def _answer_shutdowns(self, leaving: frozenset[int]):
        for broker_id in leaving:
            led = [key for key, (state, _) in self._cluster.states.items() if state.leader == broker_id]
            if led:
                log.info("controlled shutdown of broker %d: it still leads %d partition(s) no other in-sync "
                         "replica can take", broker_id, len(led))
            if not (yield self._fenced([("set", paths.shutdown_path(broker_id), b"done", -1)])):
                return

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
            yield self._fenced([("delete", path, -1)])
            return None

    @inlineCallbacks
    def _preferred_election(self):
        request = yield self._read_request(paths.PREFERRED_REPLICA_ELECTION, with_replicas=False)
        if request is None:
            return
        moves, version = request
        wanted = {(m.topic, m.partition) for m in moves}
        live = set(self._cluster.brokers)
        for (topic, partition), (state, _v) in sorted(self._cluster.states.items()):
            if wanted and (topic, partition) not in wanted:
                continue
            # Not to a broker whose log failed there, nor to one restarted since it was in sync.
            unfit = self._cluster.offline_for(topic, partition) | self._cluster.registered_since_state(topic, partition)
            new = preferred_leader(state, self._cluster.replicas(topic, partition), live=live - unfit,
                                   controller_epoch=self._controller.epoch)
            if new is not None:
                log.info("%s-%d: preferred leader %d takes over (epoch %d)", topic, partition, new.leader,
                         new.leader_epoch)
                if not (yield self._controller.write(topic, partition, new)):
                    self._controller.schedule_reconcile()
                    return
                self._controller.elections += 1
        yield self._fenced([("delete", paths.PREFERRED_REPLICA_ELECTION, version)])

    @inlineCallbacks
    def _reassign(self):
        request = yield self._read_request(paths.REASSIGN_PARTITIONS, with_replicas=True)
        self.reassigning = request is not None
        if request is None:
            return
        moves, version = request
        remaining = []
        for move in moves:
            if not self._controller.active:
                return
            done = yield self._reassign_one(move)
            if not done:
                remaining.append(move)
        if not remaining:
            if (yield self._fenced([("delete", paths.REASSIGN_PARTITIONS, version)])):
                self.reassigning = False
        elif len(remaining) != len(moves):
            yield self._fenced([("set", paths.REASSIGN_PARTITIONS,
                                 paths.encode_partition_list(remaining, with_replicas=True), version)])

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
                                 cluster.state(move.topic, move.partition), controller_epoch=self._controller.epoch)
        if step.state is not None and step.assignment is not None:
            if not (yield self._write_assignment(move.topic, move.partition, step.assignment, step.state)):
                return False
        elif step.state is not None and not (yield self._controller.write(move.topic, move.partition, step.state)):
            return False
        elif step.assignment is not None and not (yield self._write_assignment(move.topic, move.partition,
                                                                                step.assignment)):
            return False
        if step.done:
            log.info("%s-%d reassigned to %s", move.topic, move.partition, list(target))
        return step.done

    @inlineCallbacks
    def _write_assignment(self, topic: str, partition: int, replicas, state: PartitionState | None = None):
        """Compare-and-set the topic's assignment with one partition's replicas changed, from
        the cached one at the version it was read (or written) at; False when the node moved
        (the watch brings the new one, and the step is tried again).

        With ``state`` (the last step: the ISR, and maybe the leader, moved into the new
        replicas), that state is compare-and-set in the same transaction, after the
        assignment. Written one after the other, a leader that took office under the old
        assignment could, before it saw the new one, take a dropped replica's fetch back into
        the ISR, which then named a broker that holds no replica until the leader's next
        tick. In one transaction every broker sees the assignment's change first (ZooKeeper
        fires the watches, and answers the reads they cause, in order), as Kafka's leader is
        sent the new replicas with its leadership (KIP-455, step B6)."""
        assignment, version = self._cluster.assignments[topic], self._cluster.assignment_version(topic)
        changed = TopicAssignment({**assignment.replicas, partition: tuple(replicas)})
        path = paths.topic_path(topic)
        ops = [("set", path, changed.encode(), -1 if version is None else version)]
        state_version = self._cluster.version(topic, partition)
        if state is not None:
            if state_version is None:  # no state to set yet (a step only moves a state it has read)
                return False
            state = self._controller.prepared(topic, partition, state)
            ops.append(("set", paths.state_path(topic, partition), state.encode(), state_version))
        try:
            stats = yield self._controller.transaction(ops)
        except BadVersionError:
            if state is not None:
                yield self._cluster.reread_state(topic, partition)
            self._controller.schedule_reconcile()
            return False
        except Exception as exc:  # Deposed, or ZooKeeper gone
            log.warning("writing %s: %s", path, exc)
            return False
        self._cluster.assignment_written(topic, changed, stats[0])
        if state is not None:
            self._cluster.written(topic, partition, state, stats[1].version, stats[1].mzxid)
        return True

    # -- ZooKeeper helpers ------------------------------------------------------------------

    @inlineCallbacks
    def _fenced(self, ops: list[tuple]):
        """A fenced answer to a request; False when refused (deposed, or the node moved or
        went: a later reconciliation looks again)."""
        try:
            yield self._controller.transaction(ops)
        except NoNodeError:
            return True  # the asker went (its ephemeral node), or the request was withdrawn
        except Exception as exc:
            log.info("answering an admin request (%s) refused: %s", ops[0][1], exc)
            self._controller.schedule_reconcile()
            return False
        return True

    @inlineCallbacks
    def ensure(self, path: str):
        """A persistent node (and its parents) that may exist already."""
        try:
            yield self._zk.create(path)
        except NodeExistsError:
            pass

    @inlineCallbacks
    def delete(self, path: str):
        try:
            yield self._zk.delete(path)
        except NoNodeError:
            pass
