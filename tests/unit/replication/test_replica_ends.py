"""Each broker's recovered log ends: published once it is registered and before any replica
takes a role; read by the controller only for partitions whose every ISR member restarted,
and only from a node of the broker's current registration (docs/replication.md §3)."""

from twisted.internet.defer import fail, succeed
from twisted.internet.task import Clock

from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import NO_LEADER, PartitionState, ReplicaEnds, TopicAssignment
from twisted_broker.registry.zookeeper import NodeExistsError, NoNodeError
from twisted_broker.replication.cluster_state import ClusterState
from twisted_broker.replication.replica import Role
from twisted_broker.replication.replica_ends import EndsReader
from twisted_broker.replication.replica_manager import ReplicaManager
from twisted_broker.storage.log_manager import LogManager


class MemoryZooKeeper:
    """Nodes in a dict; every answer at once; watches fire once, at a write of their node."""

    connected = True

    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.watches: dict[str, list] = {}
        self.refuse_writes = False

    def add_state_listener(self, listener) -> None:
        pass

    def create(self, path, value=b"", *, ephemeral=False):
        if self.refuse_writes:
            return fail(ConnectionError("connection loss"))
        if path in self.nodes:
            return fail(NodeExistsError())
        return self._write(path, value)

    def set(self, path, value, version=-1):
        return self._write(path, value) if path in self.nodes else fail(NoNodeError())

    def exists(self, path, watch=None):
        if watch is not None:
            self.watches.setdefault(path, []).append(watch)
        return succeed(object() if path in self.nodes else None)

    def get(self, path, watch=None):
        return succeed((self.nodes[path], object())) if path in self.nodes else fail(NoNodeError())

    def _write(self, path, value):
        self.nodes[path] = value
        for watch in self.watches.pop(path, []):
            watch(None)
        return succeed(path)


def test_a_broker_publishes_its_ends_once_registered_and_takes_no_role_before(tmp_path):
    zk = MemoryZooKeeper()
    cluster = ClusterState(zk)
    cluster.synced = True
    cluster.brokers = {1: ("127.0.0.1", 9001)}
    cluster.assignments = {"t": TopicAssignment({0: (1,)})}
    cluster.states[("t", 0)] = (PartitionState(1, 3, (1,), 1, "c1"), 0)
    clock = Clock()
    manager = ReplicaManager(broker_id=1, logs=LogManager(str(tmp_path), now=lambda: 0.0), zk=zk, cluster=cluster,
                             clock=clock, lag_time_max_ms=10_000, min_insync_replicas=1, session="c1")
    manager._resynced()  # the previous run's registration lingers: nothing published, no role
    replica = manager.replicas[("t", 0)]
    assert replica.role is Role.OFFLINE and paths.replica_ends_path(1) not in zk.nodes
    cluster.sessions = {1: "c1"}
    zk.refuse_writes = True  # the first write fails: still no role, and it is tried again
    manager._brokers_changed(set(), {1})
    assert replica.role is Role.OFFLINE
    zk.refuse_writes = False
    clock.advance(1.0)
    assert ReplicaEnds.decode(zk.nodes[paths.replica_ends_path(1)]) == ReplicaEnds("c1", {("t", 0): (-1, 0)})
    assert replica.role is Role.LEADER  # the roles are taken once the ends are out


def restarted_isr(leader=NO_LEADER, isr=(0, 1)):
    return PartitionState(leader, 5, isr, 1, "", tuple((b, f"c{b}-old") for b in isr))


def test_the_controller_reads_the_ends_of_restarted_isrs_only_and_of_the_current_registrations():
    zk = MemoryZooKeeper()
    cluster = ClusterState(zk)
    cluster.sessions = {0: "c0-new", 1: "c1-new", 2: "c2"}
    cluster.states[("t", 0)] = (restarted_isr(), 3)  # both members restarted: their ends decide
    cluster.states[("t", 1)] = (PartitionState(2, 1, (2, 0), 1, "c2", ((0, "c0-old"), (2, "c2"))), 3)
    changes = []
    reader = EndsReader(zk=zk, cluster=cluster, on_change=lambda: changes.append(1))
    assert reader.wanted() == {0, 1}  # t-1 has a member that did not restart
    zk.nodes[paths.replica_ends_path(0)] = ReplicaEnds("c0-new", {("t", 0): (4, 5963)}).encode()
    zk.nodes[paths.replica_ends_path(1)] = ReplicaEnds("c1-old", {("t", 0): (4, 6566)}).encode()  # a previous run's
    reader.read()
    assert reader.of("t", 0) == {0: (4, 5963)}
    zk._write(paths.replica_ends_path(1), ReplicaEnds("c1-new", {("t", 0): (4, 6566)}).encode())
    assert changes == [1]  # its watch: the controller reconciles again
    reader.read()
    assert reader.of("t", 0) == {0: (4, 5963), 1: (4, 6566)}
    assert reader.of("t", 9) == {0: (-1, 0), 1: (-1, 0)}  # not held there: an empty log
