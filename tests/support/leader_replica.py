"""A leader replica on disk with the real ReplicationRequests in front of it, for handler tests
that need replication's leader side without ZooKeeper or a ReplicaManager.

The replica, its LeaderPartition and the log are real; ``Manager`` is reduced to what the
handlers ask of a ReplicaManager, doing what it does: record a follower's fetch in the leader,
publish its high watermark, keep the proposed ISR changes, and check a leader may be written."""

from __future__ import annotations

import os
import time

from twisted.internet.task import Clock

from twisted_broker.codec.kafka07.replication_errors import NotEnoughReplicas
from twisted_broker.handlers.kafka07.replication_requests import ReplicationRequests
from twisted_broker.registry.replication_paths import PartitionState
from twisted_broker.replication.fetch_sessions import FetchSessions
from twisted_broker.replication.replica import Replica, Role
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_directory import open_log_directory
from twisted_broker.storage.replica_log import ReplicaLog

EPOCH = 3


class Cluster:
    """ClusterState's answer to "is this topic replicated?": the manager's topics are."""

    def __init__(self, topics: set[str]) -> None:
        self.topics = topics
        self.synced = True

    def is_replicated(self, topic: str) -> bool:
        return topic in self.topics


class Manager:
    """ReplicaManager's follower_fetch, appended, leader_for_write and fetch_sessions for one
    leader replica, under log.visibility=flushed (the high watermark counts the followers'
    fsynced ends, which move with no new data: the follower's next fetch says it fsynced)."""

    def __init__(self, replica: Replica, clock: Clock) -> None:
        self.replicas = {(replica.topic, replica.partition): replica}
        self.cluster = Cluster({replica.topic})
        self.clock = clock
        self.fetch_sessions = FetchSessions(clock)
        self.proposals: list[tuple[int, ...]] = []
        self.not_enough_replicas = 0  # writes refused by min.insync.replicas, as ReplicaManager counts

    def follower_fetch(self, replica_id, topic, partition, leader_epoch, offset, flushed_offset):
        replica = self.replicas[(topic, partition)]
        position = min(flushed_offset, replica.leader.log_end)
        self._apply(replica, replica.leader.follower_fetched(replica_id, position, int(self.clock.seconds() * 1000)))
        return replica

    def appended(self, replica: Replica) -> None:
        self._apply(replica, replica.leader.appended(replica.log.flushed_end))
        self.fetch_sessions.changed((replica.topic, replica.partition))

    def leader_for_write(self, topic: str, partition: int, required_acks: int, *, counted: bool = True) -> Replica:
        replica = self.replicas[(topic, partition)]
        assert replica.role is Role.LEADER
        try:
            replica.leader.check_write(required_acks=required_acks)
        except NotEnoughReplicas:
            self.not_enough_replicas += counted
            raise
        return replica

    def _apply(self, replica, decision) -> None:
        if decision.high_watermark is not None:
            self.fetch_sessions.changed((replica.topic, replica.partition), wake=False)
            replica.log.publish_to(decision.high_watermark)
            replica.release_waiters(decision.copies)
        if decision.propose_isr is not None:
            self.proposals.append(decision.propose_isr)
            replica.leader.isr_write_refused()  # no ZooKeeper here: nothing written


def leader_replica(tmp_path, *, isr: tuple[int, ...] = (0, 1), min_insync_replicas: int = 1, stats=None,
                   topic: str = "r", flush_interval: int = 1) -> tuple[Replica, Manager, ReplicationRequests, Clock]:
    """Broker 0 leading ``topic`` partition 0 at EPOCH with ``isr``, its log in ``tmp_path``."""
    path = str(tmp_path / f"{topic}-0")
    os.makedirs(path)
    log_ = ReplicaLog(path, topic, 0, open_log_directory(path, time.time()),
                      policy=LogPolicy(flush_interval_messages=flush_interval), now=time.time)
    replica = Replica(topic, 0, log_)
    replica.become_leader(PartitionState(0, EPOCH, isr, 1), isr, broker_id=0, now_ms=0,
                          lag_time_max_ms=10_000, min_insync_replicas=min_insync_replicas, log_end=0)
    clock = Clock()
    manager = Manager(replica, clock)
    handler = ReplicationRequests(manager, stats=stats, max_message_size=1 << 20, default_replication_factor=3,
                                  num_partitions=1, clock=clock)
    return replica, manager, handler, clock
