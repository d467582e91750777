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


class ListenedZooKeeper(NoZooKeeper):
    def __init__(self) -> None:
        self.listeners = []

    def add_state_listener(self, listener) -> None:
        self.listeners.append(listener)

    def event(self, state) -> None:
        self.connected = state == "CONNECTED"
        for listener in self.listeners:
            listener(state)


def test_a_leader_stays_fenced_after_a_new_session_until_the_states_are_read_again(tmp_path):
    # Simulation seed 572942119: broker 1, cut from ZooKeeper, lost its session while the
    # controller moved t-0 to broker 2 at epoch 4. On reconnecting, the brokers' list is read
    # before the states, and its event re-ran the roles on the cached state (broker 1 leads at
    # epoch 3): "leader again", writes taken and committed at a deposed epoch.
    zk = ListenedZooKeeper()
    zk.connected = True
    cluster = ClusterState(zk)
    cluster.brokers = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002)}
    cluster.assignments = {"t": TopicAssignment({0: (1, 2)})}
    cluster.states[("t", 0)] = (PartitionState(1, 3, (1,), 1), 0)
    manager = ReplicaManager(broker_id=1, logs=LogManager(str(tmp_path), now=lambda: 0.0), zk=zk, cluster=cluster,
                             clock=Clock(), lag_time_max_ms=10_000, min_insync_replicas=1)
    manager.start()
    manager._resynced()
    replica = manager.replicas[("t", 0)]
    assert replica.role is Role.LEADER and not replica.fenced
    zk.event("LOST")
    assert replica.fenced
    zk.event("CONNECTED")
    manager._brokers_changed(set(), {1})  # the brokers' list, read first after the new session
    assert replica.role is Role.LEADER and replica.fenced  # not "leader again" on the old state
    cluster.states[("t", 0)] = (PartitionState(2, 4, (2,), 2), 1)
    manager._resynced()
    assert replica.role is not Role.LEADER
    manager.stop()


def test_an_isr_the_controller_shrank_or_grew_counts_on_the_leader(tmp_path):
    # On a follower's loss the controller and the leader race to take it out of the ISR; when
    # the controller wins, the leader's write is refused, and the shrink its /metrics show must
    # still be counted (CI run of 2026-12-06: 20 s without an ISR shrink on the leader).
    zk = NoZooKeeper()
    cluster = ClusterState(zk)
    cluster.brokers = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002)}
    cluster.assignments = {"t": TopicAssignment({0: (1, 2)})}
    cluster.states[("t", 0)] = (PartitionState(1, 3, (1, 2), 1), 0)
    manager = ReplicaManager(broker_id=1, logs=LogManager(str(tmp_path), now=lambda: 0.0), zk=zk, cluster=cluster,
                             clock=Clock(), lag_time_max_ms=10_000, min_insync_replicas=1)
    manager._resynced()
    assert manager.replicas[("t", 0)].role is Role.LEADER
    cluster.states[("t", 0)] = (PartitionState(1, 3, (1,), 2), 1)  # the controller's write
    manager._state_changed("t", 0)
    assert (manager.isr_shrinks, manager.isr_expands) == (1, 0)
    assert tuple(manager.replicas[("t", 0)].leader.isr) == (1,)
    cluster.states[("t", 0)] = (PartitionState(1, 3, (1, 2), 2), 2)
    manager._state_changed("t", 0)
    assert (manager.isr_shrinks, manager.isr_expands) == (1, 1)


def test_taking_up_a_topics_replicas_costs_no_fsync_and_the_next_checkpoint_names_them(tmp_path, monkeypatch):
    # Issue 23: 600 replicas a broker, each marked with two fsyncs and truncated (or led) with
    # two more, took creation past 10 s. Their epoch files become durable before their first
    # append (storage/replica_log.py); the checkpoint names them within a second.
    import os

    from twisted_broker.storage.checkpoints import read_high_watermarks
    zk = NoZooKeeper()
    cluster = ClusterState(zk)
    cluster.brokers = {1: ("127.0.0.1", 9001), 2: ("127.0.0.1", 9002)}
    cluster.assignments = {"t": TopicAssignment({p: ((2, 1) if p % 2 else (1, 2)) for p in range(10)})}
    for partition in range(10):
        cluster.states[("t", partition)] = (PartitionState(2 if partition % 2 else 1, 0, (2, 1), 1), 0)
    logs = LogManager(str(tmp_path), now=lambda: 0.0)
    manager = ReplicaManager(broker_id=1, logs=logs, zk=zk, cluster=cluster, clock=Clock(), lag_time_max_ms=10_000,
                             min_insync_replicas=1)
    fsyncs = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real(fd)))
    manager._assignment_changed("t")
    for partition in range(1, 10, 2):
        manager.replicas[("t", partition)].truncate(0)  # what the fetcher does first
    assert fsyncs == []
    assert [manager.replicas[("t", p)].role for p in (0, 1)] == [Role.LEADER, Role.FOLLOWING]
    manager.checkpoint_high_watermarks()
    assert set(read_high_watermarks(str(tmp_path))) == {("t", p) for p in range(10)}
