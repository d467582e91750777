"""The leader's side of its followers' requests: their fetches (each records the follower's
position, which moves the ISR and the high watermark) and their "where does my epoch end"
questions, checked against this broker's roles; 
A mixin of ReplicaManager (replica_manager.py), which holds the replicas, the cluster cache,
the clock and ``_apply``/``_state_changed``; it is apart only to keep each module readable.
The followers' fetch sessions, and their held fetches, are in fetch_sessions.py.
"""

from __future__ import annotations

from twisted_broker.codec.kafka07.replication_errors import (
    FencedLeaderEpoch, NotAReplica, NotLeaderForPartition, UnknownLeaderEpoch,
)
from twisted_broker.errors import OffsetOutOfRange, WrongPartition
from twisted_broker.replication.epochs import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from twisted_broker.replication.replica import Replica, Role


class FollowerRequests:
    def follower_fetch(self, replica_id: int, topic: str, partition: int, leader_epoch: int, offset: int,
                       flushed_offset: int):
        """Check a follower's fetch and record its position (its durable one under
        log.visibility=flushed); returns the leader's replica. Raises the error its answer
        carries."""
        replica = self._asked_by_follower(replica_id, topic, partition)
        if replica.role is not Role.LEADER:
            if leader_epoch > replica.leader_epoch:
                raise UnknownLeaderEpoch(f"{replica.name}: epoch {leader_epoch} is newer than {replica.leader_epoch}")
            raise NotLeaderForPartition(f"{replica.name} is not led by broker {self.broker_id}")
        leader = replica.leader
        if leader_epoch > leader.leader_epoch:
            # A follower knows of a newer leader (from ZooKeeper): stop taking writes until
            # ZooKeeper, read now, says whether this broker still leads at this epoch.
            leader.fence()
            self.cluster.reread_state(topic, partition).addBoth(lambda _: self._state_changed(topic, partition))
            raise UnknownLeaderEpoch(f"{replica.name}: epoch {leader_epoch} is newer than {leader.leader_epoch}")
        if leader_epoch < leader.leader_epoch:
            raise FencedLeaderEpoch(f"{replica.name}: epoch {leader_epoch} is older than {leader.leader_epoch}")
        if leader.fenced:
            raise NotLeaderForPartition(f"{replica.name}: broker {self.broker_id} is fenced")
        if not 0 <= offset <= replica.log.written_end:
            raise OffsetOutOfRange(f"follower {replica_id} fetches {replica.name} from {offset}, past its end "
                                   f"{replica.log.written_end}")
        position = min(flushed_offset, leader.log_end) if self.count_flushed else offset
        decision = leader.follower_fetched(replica_id, max(position, 0), self._now_ms(),
                                           may_join=replica_id in self.cluster.brokers)
        self._apply(replica, decision)
        return replica

    def _asked_by_follower(self, replica_id: int, topic: str, partition: int) -> Replica:
        replica = self.replicas.get((topic, partition))
        if replica is None:
            raise WrongPartition(f"{topic}-{partition} has no replica on broker {self.broker_id}")
        if replica_id not in self.cluster.replicas(topic, partition) or replica_id == self.broker_id:
            raise NotAReplica(f"broker {replica_id} is not a follower of {replica.name}")
        return replica

    def epoch_end_offset(self, replica_id: int, topic: str, partition: int, current_leader_epoch: int,
                         epoch: int) -> tuple[int, int]:
        """Where ``epoch`` ends on this leader's log (epochs.end_offset_for). Raises like
        ``follower_fetch``."""
        replica = self._asked_by_follower(replica_id, topic, partition)
        if replica.role is not Role.LEADER or replica.fenced:
            raise NotLeaderForPartition(f"{replica.name} is not led by broker {self.broker_id}")
        if current_leader_epoch < replica.leader_epoch:
            raise FencedLeaderEpoch(f"{replica.name}: epoch {current_leader_epoch} is older than {replica.leader_epoch}")
        if current_leader_epoch > replica.leader_epoch:
            raise UnknownLeaderEpoch(f"{replica.name}: epoch {current_leader_epoch} is newer")
        found = replica.epochs.end_offset_for(epoch, replica.log.written_end)
        return found if found[0] != UNDEFINED_EPOCH else (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
