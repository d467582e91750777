"""When a stopping broker asks the controller to move its partitions (issue 23: the short scale
test on a loaded CI machine saw a broker stop with 100 leaderships its manager had not applied
yet). The cluster cache is filled by hand; no ZooKeeper is asked."""

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from tests.unit.replication.test_replica_manager_events import NoZooKeeper
from twisted_broker.registry.replication_paths import PartitionState, TopicAssignment
from twisted_broker.replication.cluster_state import ClusterState
from twisted_broker.replication.fetcher import Fetchers
from twisted_broker.replication.replica import Role
from twisted_broker.replication.replica_manager import ReplicaManager
from twisted_broker.replication.service import ReplicationService
from twisted_broker.storage.log_manager import LogManager


def service(tmp_path, states: dict) -> ReplicationService:
    zk = NoZooKeeper()
    cluster = ClusterState(zk)
    cluster.brokers = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002)}
    cluster.assignments = {"t": TopicAssignment({p: (1, 2) for p in states})}
    cluster.states.update({("t", p): (state, 0) for p, state in states.items()})
    manager = ReplicaManager(broker_id=1, logs=LogManager(str(tmp_path), now=lambda: 0.0), zk=zk, cluster=cluster,
                             clock=Clock(), lag_time_max_ms=10_000, min_insync_replicas=1)
    return ReplicationService(cluster=cluster, manager=manager, controller=None, fetchers=None, zk=zk,
                              reactor=Clock(), controlled_shutdown=True, controlled_shutdown_max_ms=5000)


def test_a_leadership_in_zookeeper_not_yet_applied_is_still_moved_away(tmp_path):
    stopping = service(tmp_path, {0: PartitionState(1, 3, (1, 2), 1)})
    assert stopping.manager.leader_count() == 0  # the manager has not acted on the state yet
    assert stopping._has_a_part()


def test_an_isr_place_alone_is_given_up_too(tmp_path):
    assert service(tmp_path, {0: PartitionState(2, 3, (2, 1), 1)})._has_a_part()


def test_a_broker_with_no_part_in_any_partition_stops_without_asking(tmp_path):
    assert not service(tmp_path, {0: PartitionState(2, 3, (2,), 1)})._has_a_part()


class AnsweringZooKeeper(NoZooKeeper):
    """The controller has answered the controlled shutdown already."""

    def create(self, path, value, ephemeral=False):
        return succeed(path)

    def get(self, path):
        return succeed((b"done", None))


def test_a_leaving_broker_stops_following_proposes_no_isr_and_fences_its_leaders(tmp_path):
    # The scale run of 2026-12-06: the leaving broker, still fetching, was added back to the
    # ISRs the controller took it out of, its own ISR writes raced the controller's moves, and
    # no answer came within 5 s.
    stopping = service(tmp_path, {0: PartitionState(1, 3, (1, 2), 1), 1: PartitionState(2, 3, (2, 1), 1)})
    stopping._zk = AnsweringZooKeeper()
    stopping.fetchers = Fetchers(stopping.manager, reactor=Clock(), fetch_wait_max_ms=500, fetch_max_bytes=1 << 20,
                                 connect=lambda reactor, host, port, timeout_s: Deferred())  # never connects
    stopping.manager._resynced()
    leader, follower = stopping.manager.replicas[("t", 0)], stopping.manager.replicas[("t", 1)]
    assert leader.role is Role.LEADER and stopping.fetchers.fetchers  # it follows broker 2 for t-1
    stopping._move_leaderships_away()
    assert stopping.manager.leaving and leader.fenced
    assert not any(f.running for f in stopping.fetchers.fetchers.values())
    stopping.fetchers.follow(follower)  # t-1's state read again: it must not follow anew
    assert not any(f.running for f in stopping.fetchers.fetchers.values())
