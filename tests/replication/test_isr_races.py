"""ISR races between the controller and a partition's leader (issue 22, defect 7, first half).

One broker's ReplicaManager and ClusterState run in this process over the real kazoo bridge
to a real ZooKeeper; the other brokers are only their registrations, and the controller is
this test, writing the partition state as the controller does (compare-and-set). The leader's
own ISR write is held at the bridge so that the controller's write lands while it is pending,
the interleaving that lost the controller's change: the leader's write was then refused, the
re-read found nothing newer than the cache, and the leader went on with an ISR ZooKeeper no
longer had (a restarted follower shown in sync by the leader and out of it by metadata).
"""

from __future__ import annotations

import pytest_twisted
from kazoo.client import KazooClient
from twisted.internet import reactor
from twisted.internet.defer import Deferred

from tests.replication.controller_harness import wait_until
from twisted_broker.registry import paths as registry_paths
from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import PartitionState, TopicAssignment
from twisted_broker.registry.zookeeper import ZooKeeper
from twisted_broker.replication.cluster_state import ClusterState
from twisted_broker.replication.replica import Role
from twisted_broker.replication.replica_manager import ReplicaManager
from twisted_broker.storage.log_manager import LogManager

STATE = paths.state_path("t", 0)


class HeldWrites:
    """The real bridge, except that a set of ``path`` waits for ``release`` (the leader's
    write still on its way to ZooKeeper)."""

    def __init__(self, zk: ZooKeeper, path: str) -> None:
        self._zk, self._path = zk, path
        self.held: list[tuple[Deferred, tuple]] = []

    def __getattr__(self, name):
        return getattr(self._zk, name)

    def set(self, path, value, version=-1):
        if path != self._path:
            return self._zk.set(path, value, version)
        waiting: Deferred = Deferred()
        self.held.append((waiting, (path, value, version)))
        return waiting

    def release(self) -> None:
        for waiting, args in self.held:
            self._zk.set(*args).chainDeferred(waiting)
        self.held = []


@pytest_twisted.inlineCallbacks
def test_a_controller_isr_change_landing_while_the_leaders_write_is_pending_is_not_lost(zk_connect, tmp_path):
    admin = KazooClient(hosts=zk_connect)
    admin.start(10)
    bridge = ZooKeeper(zk_connect, reactor=reactor)
    yield bridge.start(10)
    manager = None
    try:
        for broker_id in (1, 2, 3):
            admin.create(registry_paths.broker_id_path(broker_id),
                         registry_paths.BrokerInfo(broker_id, f"h-{broker_id}", "127.0.0.1", 9000 + broker_id).encode(),
                         makepath=True, ephemeral=True)
        admin.create(paths.topic_path("t"), TopicAssignment({0: (1, 2, 3)}).encode(), makepath=True)
        admin.create(STATE, PartitionState(1, 0, (1, 2, 3), 1).encode(), makepath=True)

        zk = HeldWrites(bridge, STATE)
        cluster = ClusterState(zk)
        logs = LogManager(str(tmp_path), now=reactor.seconds)
        manager = ReplicaManager(broker_id=1, logs=logs, zk=zk, cluster=cluster, clock=reactor,
                                 lag_time_max_ms=60_000, min_insync_replicas=1)
        manager.start()
        cluster.start()
        yield wait_until(lambda: ("t", 0) in manager.replicas and manager.replicas[("t", 0)].role is Role.LEADER,
                     "broker 1 to lead t-0")
        replica = manager.replicas[("t", 0)]

        # The leader drops broker 3 (its registration ended); its write is held.
        manager._brokers_changed({3}, set())
        yield wait_until(lambda: zk.held, "the leader's ISR write")
        assert replica.leader.pending_isr == (1, 2)

        # Meanwhile the controller drops broker 2 (it restarted), compare-and-set.
        _value, stat = admin.get(STATE)
        admin.set(STATE, PartitionState(1, 0, (1, 3), 1).encode(), version=stat.version)
        yield wait_until(lambda: cluster.state("t", 0).isr == (1, 3), "the cache to see the controller's write")

        zk.release()  # the leader's write now finds a newer version: refused
        yield wait_until(lambda: replica.leader.pending_isr is None and not zk.held, "the refusal")
        in_zookeeper = PartitionState.decode(admin.get(STATE)[0]).isr
        # The leader may propose again from what it now knows, but it never counts broker 2,
        # which ZooKeeper says is out of sync, towards its high watermark.
        yield wait_until(lambda: 2 not in replica.leader.isr, f"the leader to drop broker 2 (ZooKeeper: {in_zookeeper})",
                     timeout_s=5.0)
        zk.release()
        yield wait_until(lambda: tuple(replica.leader.isr) == PartitionState.decode(admin.get(STATE)[0]).isr
                     and replica.leader.pending_isr is None, "the leader's ISR and ZooKeeper's to agree")
    finally:
        if manager is not None:
            manager.stop()
        yield bridge.stop()
        admin.stop()
        admin.close()
