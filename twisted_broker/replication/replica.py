"""One partition's replica on this broker: its log, leader epochs and role (docs/replication.md §3).

The role follows the partition's state in ZooKeeper: ``LEADER`` (with the pure
``LeaderPartition`` deciding ISR and high watermark), ``TRUNCATING`` then ``FOLLOWING`` (the
fetcher drives those), ``OFFLINE`` (no leader), and ``fenced`` on a leader whose session is in
doubt. This module keeps the state and the log and epoch files in step; it does no network
I/O (produce requests waiting for acks=all wait here as Deferreds, fired by the manager).
"""

from __future__ import annotations

import logging
from enum import Enum

from twisted.internet.defer import Deferred

from twisted_broker.replication.epochs import LeaderEpochCache
from twisted_broker.codec.kafka07.replication_errors import NotEnoughReplicasAfterAppend, RequestTimedOut
from twisted_broker.replication.leader import LeaderPartition
from twisted_broker.registry.replication_paths import PartitionState
from twisted_broker.storage.checkpoints import read_leader_epochs
from twisted_broker.storage.log import Log

log = logging.getLogger(__name__)


class Role(Enum):
    OFFLINE = "offline"
    LEADER = "leader"
    TRUNCATING = "truncating"
    FOLLOWING = "following"


class Replica:
    def __init__(self, topic: str, partition: int, log_: Log) -> None:
        self.topic, self.partition, self.log = topic, partition, log_
        data = read_leader_epochs(log_.directory)
        try:
            self.epochs = LeaderEpochCache.decode(data) if data else LeaderEpochCache()
        except ValueError as exc:
            # Without its epochs the replica truncates to its high watermark when it next
            # follows (epochs.first_question): safe, if it may copy a little again.
            log.error("%s: %s; starting with no leader epochs", log_.name, exc)
            self.epochs = LeaderEpochCache()
        if self.epochs.cut_to_log_end(log_.written_end):
            # The epoch file is rewritten at once on a leader change, the log's tail only on
            # flush: after a crash the file may name epochs the recovered log never reached.
            log.warning("%s: leader epochs past the recovered log end %d dropped", log_.name, log_.written_end)
            self.save_epochs()
        self.role = Role.OFFLINE
        self.leader_id: int | None = None
        self.leader_epoch = -1
        self.leader: LeaderPartition | None = None  # while LEADER
        self.ack_waiters: list = []  # (end offset, deadline ms, Deferred) of produce requests with acks=-1
        self.refusal_logged_at = float("-inf")  # the last "not enough replicas" line

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def fenced(self) -> bool:
        return self.leader is not None and self.leader.fenced

    # -- produce requests waiting for acks=all --------------------------------------------

    def wait_for_commit(self, end_offset: int, deadline_ms: int) -> Deferred:
        """Fires once the high watermark reaches ``end_offset`` with at least
        min.insync.replicas copies counted; fails with NotEnoughReplicasAfterAppend if it
        reaches it with fewer, ``expire_waiters`` with RequestTimedOut after ``deadline_ms``,
        ``fail_waiters`` with the leadership's end. Cancelling it (the producer's connection
        went) drops the wait."""
        waiter: tuple = ()
        d: Deferred = Deferred(lambda _d: self._drop_waiter(waiter))
        if self.log.end_offset >= end_offset:
            self._settle(d, None)
        else:
            waiter = (end_offset, deadline_ms, d)
            self.ack_waiters.append(waiter)
        return d

    def _drop_waiter(self, waiter: tuple) -> None:
        if waiter in self.ack_waiters:
            self.ack_waiters.remove(waiter)

    def release_waiters(self, copies: int | None = None) -> None:
        """The high watermark moved, counting ``copies`` replicas (the leader's last move's
        by default): settle the waits it passed."""
        hw = self.log.end_offset
        done = [w for w in self.ack_waiters if w[0] <= hw]
        if done:
            self.ack_waiters = [w for w in self.ack_waiters if w[0] > hw]
            for _end, _deadline, d in done:
                self._settle(d, copies)

    def _settle(self, d: Deferred, copies: int | None) -> None:
        if self.leader is None or self.leader.enough_copies(copies):
            d.callback(None)
        else:
            d.errback(NotEnoughReplicasAfterAppend(
                f"{self.name}: committed on {self.leader.holders() if copies is None else copies} replica(s), "
                f"min.insync.replicas={self.leader.min_insync_replicas}"))

    def expire_waiters(self, now_ms: int) -> None:
        late = [w for w in self.ack_waiters if w[1] <= now_ms]
        if late:
            self.ack_waiters = [w for w in self.ack_waiters if w[1] > now_ms]
            for _end, _deadline, d in late:
                d.errback(RequestTimedOut(f"{self.name}: not on every in-sync replica in time"))

    def fail_waiters(self, error: Exception) -> None:
        waiters, self.ack_waiters = self.ack_waiters, []
        for _end, _deadline, d in waiters:
            d.errback(error)

    # -- leader epochs and roles -----------------------------------------------------------

    def save_epochs(self) -> None:
        self.log.write_epochs(self.epochs.encode())

    def become_leader(self, state: PartitionState, replicas: tuple[int, ...], *, broker_id: int, now_ms: int,
                      lag_time_max_ms: int, min_insync_replicas: int, log_end: int) -> None:
        """Take office at ``state.leader_epoch``: the epoch starts at this log's end.
        ``log_end`` is what the high watermark counts of this log (written, or flushed)."""
        end = self.log.written_end
        if self.epochs.assign(state.leader_epoch, end):
            self.save_epochs()
        self.role, self.leader_id, self.leader_epoch = Role.LEADER, broker_id, state.leader_epoch
        self.leader = LeaderPartition(
            broker_id=broker_id, leader_epoch=state.leader_epoch, epoch_start_offset=end, replicas=replicas,
            isr=state.isr, log_end=log_end, high_watermark=self.log.end_offset, now_ms=now_ms,
            lag_time_max_ms=lag_time_max_ms, min_insync_replicas=min_insync_replicas)
        decision = self.leader.appended(log_end)  # alone in its ISR, it commits what it has
        if decision.high_watermark is not None:
            self.log.publish_to(decision.high_watermark)
        log.info("%s: leader at epoch %d, ISR %s, log end %d, high watermark %d", self.name, state.leader_epoch,
                 list(state.isr), end, self.log.end_offset)

    def become_follower(self, state: PartitionState) -> None:
        """Follow ``state.leader``: truncate first (the fetcher asks the leader where)."""
        self.role, self.leader_id, self.leader_epoch, self.leader = Role.TRUNCATING, state.leader, state.leader_epoch, None
        log.info("%s: following broker %d at epoch %d", self.name, state.leader, state.leader_epoch)

    def go_offline(self, state: PartitionState) -> None:
        self.role, self.leader_id, self.leader_epoch, self.leader = Role.OFFLINE, None, state.leader_epoch, None

    def go_offline_for_good(self) -> None:
        """Its log failed (replication/log_failures.py): no role until the broker restarts."""
        self.role, self.leader_id, self.leader = Role.OFFLINE, None, None

    def truncate(self, offset: int) -> None:
        """Cut the log and the epochs at ``offset`` (the fetcher found it with the leader)."""
        self.log.truncate_to(offset)
        self.epochs.truncate_from_end(offset)
        self.save_epochs()
        self.role = Role.FOLLOWING

    def copy_epochs(self, entries) -> None:
        """Record the leader's epochs for a fetched range (before appending it)."""
        changed = False
        for epoch, start in entries:
            if epoch > self.epochs.latest_epoch:
                changed |= self.epochs.assign(epoch, start)
        if changed:
            self.save_epochs()
