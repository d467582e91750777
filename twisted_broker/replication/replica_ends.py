"""Each broker's recovered log ends, published for the controller (docs/replication.md §3,
"Every ISR member restarted"; Kafka's KIP-966 in spirit).

When every member of a partition's ISR has restarted (or lost its log there), none is known
to hold every committed message: each may have lost the tail it had not flushed, and the one
that kept the most must lead. The controller cannot see logs, so:

- ``PublishedEnds`` (the replica manager's): once this run is registered (the node of a
  previous run went with its session) and ZooKeeper is read, every replica held here is listed
  with its last leader epoch and log end in the ephemeral ``/replication/replica_ends/<id>``,
  with this run's creatorId; no replica takes a role before the first listing, so it lists
  the ends as recovered. Written again on each new session (an ephemeral node goes with it).
  A replica of a partition whose ISR all restarted takes no role before that election (the
  partition has no leader), so what it lists stays its recovered end.
- ``EndsReader`` (the controller's): before each pass, the nodes of the brokers such an
  election needs (election.every_member_restarted) are read, each watched: its creation or
  change makes the controller reconcile again. A node of another run than the broker's
  current registration is ignored; election.py waits for every registered member's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from twisted.internet.defer import gatherResults, inlineCallbacks

from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import ReplicaEnds
from twisted_broker.registry.zookeeper import NodeExistsError, NoNodeError, ZooKeeper
from twisted_broker.replication.cluster_state import ClusterState
from twisted_broker.replication.election import every_member_restarted
from twisted_broker.replication.replica import Replica

log = logging.getLogger(__name__)

PUBLISH_RETRY_S = 1.0  # after a failed write while connected


class PublishedEnds:
    """This broker's ``/replication/replica_ends/<id>``."""

    def __init__(self, *, broker_id: int, zk: ZooKeeper, session: str, clock) -> None:
        self.broker_id, self._zk, self.session, self._clock = broker_id, zk, session, clock
        self.published = False  # once in this process: until then no replica takes a role
        self._retry = None

    @inlineCallbacks
    def publish(self, cluster: ClusterState, replicas: Mapping[tuple[str, int], Replica], then: Callable[[], object]):
        """If this run is registered and every assignment read (``cluster``), write every
        replica's (last leader epoch, log end), then call ``then``. A failure is logged and
        retried while connected (a new session publishes again anyway)."""
        if not (self.session and cluster.synced and cluster.sessions.get(self.broker_id) == self.session):
            return
        path = paths.replica_ends_path(self.broker_id)
        value = ReplicaEnds(self.session, {key: (replica.epochs.latest_epoch, replica.log.written_end)
                                           for key, replica in replicas.items()}).encode()
        try:
            try:
                yield self._zk.create(path, value, ephemeral=True)
            except NodeExistsError:  # this session's, written before
                yield self._zk.set(path, value)
        except Exception as exc:
            log.warning("could not write %s: %s", path, exc)
            if self._zk.connected and (self._retry is None or not self._retry.active()):
                self._retry = self._clock.callLater(PUBLISH_RETRY_S, lambda: self.publish(cluster, replicas, then))
            return
        if not self.published:
            log.info("published the log ends of %d replica(s) in %s", len(replicas), path)
        self.published = True
        then()


class EndsReader:
    """The published ends that an election of restarted ISR members needs."""

    def __init__(self, *, zk: ZooKeeper, cluster: ClusterState, on_change: Callable[[], object]) -> None:
        self._zk, self._cluster, self._on_change = zk, cluster, on_change
        self._nodes: dict[int, ReplicaEnds] = {}
        self._watched: set[int] = set()  # brokers whose node has a watch set
        zk.add_state_listener(lambda state: self._watched.clear())  # a new session has none

    def wanted(self) -> set[int]:
        """The restarted members of every partition whose ISR all restarted."""
        cluster, brokers = self._cluster, set()
        for (topic, partition), (state, _version) in cluster.states.items():
            restarted = cluster.registered_since_state(topic, partition)
            if restarted and every_member_restarted(state, restarted, cluster.offline_for(topic, partition)):
                brokers |= restarted
        return brokers

    @inlineCallbacks
    def read(self):
        """Read the wanted brokers' nodes now (nothing is asked when none is wanted). A node
        that cannot be read counts as not published: the partition waits."""
        wanted = sorted(self.wanted())
        nodes = yield gatherResults([self._read(broker_id) for broker_id in wanted]) if wanted else []
        self._nodes = {b: node for b, node in zip(wanted, nodes) if node is not None}

    def of(self, topic: str, partition: int) -> dict[int, tuple[int, int]]:
        """Each broker's published (last leader epoch, log end) of the partition, for the
        brokers read whose node is their current registration's."""
        sessions = self._cluster.sessions
        return {b: node.end_of(topic, partition) for b, node in self._nodes.items() if node.session == sessions.get(b)}

    @inlineCallbacks
    def _read(self, broker_id: int):
        path = paths.replica_ends_path(broker_id)
        watch = None if broker_id in self._watched else (lambda event: self._changed(broker_id))
        self._watched.add(broker_id)
        try:
            # An exists watch fires at the node's creation, change or deletion.
            if (yield self._zk.exists(path, watch=watch)) is None:
                return None
            value, _stat = yield self._zk.get(path)
            return ReplicaEnds.decode(value)
        except NoNodeError:  # gone between the two requests: the watch says when it is back
            return None
        except Exception as exc:  # a lost connection (a reconnection reconciles), a bad value
            log.warning("reading %s: %s", path, exc)
            self._watched.discard(broker_id)
            return None

    def _changed(self, broker_id: int) -> None:
        self._watched.discard(broker_id)
        self._on_change()
