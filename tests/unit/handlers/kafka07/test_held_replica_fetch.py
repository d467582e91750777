"""A follower's fetch held for new data (issue 22, defect 7, second half): woken after its
follower has moved on, it must not record the follower's old offset, which is below the high
watermark by then and would drop a healthy follower from the ISR.

The leader's side is real (ReplicationRequests, Replica, LeaderPartition, a replica log on
disk); the manager is reduced to what the handler asks of it, doing what ReplicaManager does:
record the fetch in the leader, publish its high watermark, keep the proposed ISR changes."""

from __future__ import annotations

import os
import time

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from twisted_broker.codec.kafka07.message_set import encode_message_set, validate_message_set
from twisted_broker.codec.kafka07.replication import (
    ReplicaFetchPartition, ReplicaFetchRequest, decode_replica_fetch_response,
)
from twisted_broker.handlers.kafka07.replication_requests import ReplicationRequests
from twisted_broker.registry.replication_paths import PartitionState
from twisted_broker.replication.fetch_waiters import FetchWaiters
from twisted_broker.replication.replica import Replica
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_directory import open_log_directory
from twisted_broker.storage.replica_log import ReplicaLog

EPOCH = 3


class Manager:
    """ReplicaManager's follower_fetch, appended and fetch_waiters for one leader replica, under
    log.visibility=flushed (the high watermark counts the followers' fsynced ends, which move
    with no new data: the follower's next fetch says it fsynced)."""

    def __init__(self, replica: Replica, clock: Clock) -> None:
        self.replicas = {(replica.topic, replica.partition): replica}
        self.cluster = None
        self.clock = clock
        self.fetch_waiters = FetchWaiters(clock)
        self.proposals: list[tuple[int, ...]] = []

    def follower_fetch(self, replica_id, topic, partition, leader_epoch, offset, flushed_offset):
        replica = self.replicas[(topic, partition)]
        position = min(flushed_offset, replica.leader.log_end)
        self._apply(replica, replica.leader.follower_fetched(replica_id, position, int(self.clock.seconds() * 1000)))
        return replica

    def appended(self, replica: Replica) -> None:
        self._apply(replica, replica.leader.appended(replica.log.flushed_end))
        self.fetch_waiters.appended((replica.topic, replica.partition))

    def _apply(self, replica, decision) -> None:
        if decision.high_watermark is not None:
            self.fetch_waiters.changed()
            replica.log.publish_to(decision.high_watermark)
            replica.release_waiters(decision.copies)
        if decision.propose_isr is not None:
            self.proposals.append(decision.propose_isr)
            replica.leader.isr_write_refused()  # no ZooKeeper here: nothing written


def leader_with_a_follower(tmp_path):
    path = str(tmp_path / "r-0")
    os.makedirs(path)
    log_ = ReplicaLog(path, "r", 0, open_log_directory(path, time.time()), policy=LogPolicy(flush_interval_messages=1),
                      now=time.time)
    replica = Replica("r", 0, log_)
    replica.become_leader(PartitionState(0, EPOCH, (0, 1), 1), (0, 1), broker_id=0, now_ms=0,
                          lag_time_max_ms=10_000, min_insync_replicas=1, log_end=0)
    clock = Clock()
    manager = Manager(replica, clock)
    handler = ReplicationRequests(manager, stats=None, max_message_size=1 << 20, default_replication_factor=3,
                                  num_partitions=1, clock=clock)
    return replica, manager, handler, clock


def fetch(handler, offset: int, flushed: int):
    return handler.replica_fetch(ReplicaFetchRequest(1, 500, 1, (
        ReplicaFetchPartition("r", 0, EPOCH, offset, 1 << 20, flushed),)))


def answer_of(pieces) -> list:
    data = b"".join(p if isinstance(p, bytes) else p.read() for p in pieces)
    return decode_replica_fetch_response(data[6:])


def held_then_moved_on(tmp_path):
    """The follower holds "one" unflushed: its fetch at the end is held. Its connection goes;
    it fsyncs, and its fetch through a new connection says so: the high watermark passes "one"."""
    replica, manager, handler, clock = leader_with_a_follower(tmp_path)
    replica.log.append(validate_message_set(encode_message_set([b"one"])))
    manager.appended(replica)
    end = replica.log.written_end
    fetch(handler, 0, 0)
    held = fetch(handler, end, 0)
    assert isinstance(held, Deferred) and replica.log.end_offset == 0
    clock.advance(0.1)
    again = fetch(handler, end, end)
    assert isinstance(again, Deferred) and replica.log.end_offset == end
    return replica, manager, handler, clock, held, again


def test_a_held_fetch_cancelled_with_its_connection_is_dropped_and_records_nothing(tmp_path):
    replica, manager, handler, clock, held, again = held_then_moved_on(tmp_path)
    held.addErrback(lambda failure: None)
    held.cancel()  # its connection closed (network/connection.py cancels the answer)
    assert manager.fetch_waiters.waiting(("r", 0)) == 1  # the new connection's
    clock.advance(0.5)  # every wait ends
    assert manager.proposals == []  # the follower stays in the ISR
    assert replica.leader.followers[1].end == replica.log.end_offset
    assert [a.error for a in answer_of(again.result)] == [0]


def test_a_held_fetch_whose_follower_fetched_since_is_answered_empty_and_records_nothing(tmp_path):
    replica, manager, handler, clock, held, again = held_then_moved_on(tmp_path)  # the old one died unseen
    clock.advance(0.5)  # every wait ends: the old fetch's first
    assert manager.proposals == []  # before the fix: [(0,)], the follower proposed out of the ISR
    assert replica.leader.followers[1].end == replica.log.end_offset
    [stale] = answer_of(held.result)
    assert (stale.error, stale.high_watermark, len(stale.messages)) == (0, replica.log.end_offset, 0)
    assert [a.error for a in answer_of(again.result)] == [0]


def counting_reads(manager) -> list:
    calls = []
    real = manager.follower_fetch

    def follower_fetch(*args):
        calls.append(args)
        return real(*args)
    manager.follower_fetch = follower_fetch
    return calls


def test_a_held_fetch_whose_wait_runs_out_with_nothing_new_is_answered_without_reading_again(tmp_path):
    # Issue 23: an idle follower's fetch of many partitions was read in full twice per wait.
    replica, manager, handler, clock = leader_with_a_follower(tmp_path)
    reads = counting_reads(manager)
    held = fetch(handler, 0, 0)
    assert isinstance(held, Deferred) and len(reads) == 1
    clock.advance(0.5)
    assert len(reads) == 1
    [answer] = answer_of(held.result)
    assert (answer.error, answer.high_watermark, answer.log_end, len(answer.messages)) == (0, 0, 0, 0)


def test_a_held_fetch_wakes_for_an_append_to_its_partition_and_reads_it(tmp_path):
    replica, manager, handler, clock = leader_with_a_follower(tmp_path)
    held = fetch(handler, 0, 0)
    replica.log.append(validate_message_set(encode_message_set([b"one"])))
    manager.appended(replica)
    clock.advance(0)  # the wake comes after the reactor step, before the wait runs out
    [answer] = answer_of(held.result)
    assert answer.error == 0 and len(answer.messages) > 0
