"""One partition's failing event does not stop the replica manager from handling the others
(issue 22, defect 2). The manager runs over a real log directory; its ZooKeeper cache is filled
by hand (no ZooKeeper is asked: the partitions' states name this broker leader of an ISR of
one, which needs no write)."""

from twisted.internet.task import Clock

from twisted_broker.registry.replication_paths import PartitionState, TopicAssignment
from twisted_broker.replication.cluster_state import ClusterState
from twisted_broker.replication.replica import Replica, Role
from twisted_broker.replication.replica_manager import ReplicaManager
from twisted_broker.storage.log_manager import LogManager


class NoZooKeeper:
    connected = True

    def add_state_listener(self, listener) -> None:
        pass


def test_a_partition_whose_epoch_file_cannot_be_written_does_not_stop_the_others(tmp_path, monkeypatch):
    zk = NoZooKeeper()
    cluster = ClusterState(zk)
    cluster.brokers = {1: ("127.0.0.1", 9001)}
    cluster.assignments = {"t": TopicAssignment({0: (1,), 1: (1,), 2: (1,)})}
    for partition in range(3):
        cluster.states[("t", partition)] = (PartitionState(1, 3, (1,), 1), 0)
    manager = ReplicaManager(broker_id=1, logs=LogManager(str(tmp_path), now=lambda: 0.0), zk=zk, cluster=cluster,
                             clock=Clock(), lag_time_max_ms=10_000, min_insync_replicas=1)
    real_save = Replica.save_epochs

    def save(replica):
        if replica.partition == 1:
            raise OSError(5, "Input/output error")  # the disk under t-1's epoch file
        real_save(replica)

    monkeypatch.setattr(Replica, "save_epochs", save)
    manager._resynced()
    roles = {p: manager.replicas[("t", p)].role for p in range(3)}
    assert roles[0] is Role.LEADER and roles[2] is Role.LEADER
    assert manager.event_errors == 1
