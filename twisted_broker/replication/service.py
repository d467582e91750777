"""Replication as one Twisted service of the broker: the ZooKeeper cache, the controller, the
replicas and their fetchers, started after the broker listens and registers, stopped before.

Stop is a controlled shutdown (``controlled.shutdown.enable``, docs/replication.md §3): the
broker asks the controller to move its leaderships away, by an ephemeral node the controller
answers with ``done``, and waits for that (at most ``controlled.shutdown.max.ms``) while it
still serves; then its leaders take no more writes, the fetchers stop and the high
watermarks are checkpointed.
"""

from __future__ import annotations

import logging

from twisted.application.service import Service
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.task import deferLater

from twisted_broker.registry.zookeeper import NodeExistsError, NoNodeError, ZooKeeper
from twisted_broker.registry import replication_paths as paths
from twisted_broker.replication.cluster_state import ClusterState
from twisted_broker.replication.controller import Controller
from twisted_broker.replication.fetcher import Fetchers
from twisted_broker.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

SHUTDOWN_POLL_S = 0.05


class ReplicationService(Service):
    def __init__(self, *, cluster: ClusterState, manager: ReplicaManager, controller: Controller, fetchers: Fetchers,
                 zk: ZooKeeper, reactor, controlled_shutdown: bool, controlled_shutdown_max_ms: int) -> None:
        self.cluster, self.manager, self.controller, self.fetchers = cluster, manager, controller, fetchers
        self._zk = zk
        self._reactor = reactor
        self._controlled_shutdown = controlled_shutdown
        self._controlled_shutdown_max_s = controlled_shutdown_max_ms / 1000

    def startService(self) -> None:
        super().startService()
        self.manager.start()
        self.controller.start()
        self.cluster.start()

    @inlineCallbacks
    def stopService(self):
        super().stopService()
        if self._controlled_shutdown and self._zk.connected and self._has_a_part():
            yield self._move_leaderships_away()
        self.fetchers.stop()
        self.manager.stop()
        self.controller.stop()

    def _has_a_part(self) -> bool:
        """Whether the controller has something to move: a leadership this broker holds, or one
        (or an ISR place) the state in ZooKeeper gives it that it has not applied yet (a loaded
        broker can be told it leads a moment before it acts on it; stopping then would leave
        those partitions to a failover instead)."""
        me = self.manager.broker_id
        return bool(self.manager.leader_count()) or any(
            state.leader == me or me in state.isr for state, _version in self.cluster.states.values())

    @inlineCallbacks
    def _move_leaderships_away(self):
        broker_id = self.manager.broker_id
        path = paths.shutdown_path(broker_id)
        started = self._reactor.seconds()
        # As Kafka's controller stops a leaving broker's replica fetchers: followed on, it
        # would catch up and its leaders add it back to the ISRs the controller takes it out
        # of, and its own ISR writes as a leader would race the controller's moves (the scale
        # run: two seconds of such writes, then no answer within 5 s).
        self.fetchers.stop()
        self.manager.leaving = True
        try:
            try:
                yield self._zk.create(path, b"{}", ephemeral=True)
            except NodeExistsError:
                yield self._zk.set(path, b"{}")
            while self._reactor.seconds() - started < self._controlled_shutdown_max_s:
                value, _stat = yield self._zk.get(path)
                if value == b"done":
                    break
                yield deferLater(self._reactor, SHUTDOWN_POLL_S, lambda: None)
            else:
                log.warning("controlled shutdown: no answer from the controller within %.1f s; stopping with %d "
                            "leadership(s)", self._controlled_shutdown_max_s, self.manager.leader_count())
                return
            # The controller has written the new states. Rather than wait until this broker
            # has read and applied each of them (hundreds of reads at scale: issue 23), it
            # takes no more writes as leader now (a write taken after the new leader's epoch
            # began would be lost); a partition no other in-sync replica could take is
            # unavailable from now, a moment before the stop that follows at once.
            fenced = self.manager.fence_leaders()
            log.info("controlled shutdown: leaderships moved away in %.2f s (%d fenced here until the states arrive)",
                     self._reactor.seconds() - started, fenced)
        except (NoNodeError, Exception) as exc:  # ZooKeeper went away: stop as a plain stop does
            log.warning("controlled shutdown failed: %s", exc)


__all__ = ["ReplicationService", "Deferred"]
