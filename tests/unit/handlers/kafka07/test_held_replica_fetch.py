"""A follower's fetch held for new data, in its fetch session (docs/replication.md §5).

Issue 22, defect 7, second half: woken after its follower has moved on, it must not record the
follower's old offset, which is below the high watermark by then and would drop a healthy
follower from the ISR. Issue 23: an idle session's round reads no partition, and an
incremental fetch answers only the partitions with something new.

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
    NEW_SESSION, ReplicaFetchPartition, ReplicaFetchRequest, decode_replica_fetch_response,
)
from twisted_broker.handlers.kafka07.replication_requests import ReplicationRequests
from twisted_broker.registry.replication_paths import PartitionState
from twisted_broker.replication.fetch_sessions import FetchSessions
from twisted_broker.replication.replica import Replica
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_directory import open_log_directory
from twisted_broker.storage.replica_log import ReplicaLog

EPOCH = 3


class Manager:
    """ReplicaManager's follower_fetch, appended and fetch_sessions for one leader replica, under
    log.visibility=flushed (the high watermark counts the followers' fsynced ends, which move
    with no new data: the follower's next fetch says it fsynced)."""

    def __init__(self, replica: Replica, clock: Clock) -> None:
        self.replicas = {(replica.topic, replica.partition): replica}
        self.cluster = None
        self.clock = clock
        self.fetch_sessions = FetchSessions(clock)
        self.proposals: list[tuple[int, ...]] = []

    def follower_fetch(self, replica_id, topic, partition, leader_epoch, offset, flushed_offset):
        replica = self.replicas[(topic, partition)]
        position = min(flushed_offset, replica.leader.log_end)
        self._apply(replica, replica.leader.follower_fetched(replica_id, position, int(self.clock.seconds() * 1000)))
        return replica

    def appended(self, replica: Replica) -> None:
        self._apply(replica, replica.leader.appended(replica.log.flushed_end))
        self.fetch_sessions.changed((replica.topic, replica.partition))

    def _apply(self, replica, decision) -> None:
        if decision.high_watermark is not None:
            self.fetch_sessions.changed((replica.topic, replica.partition), wake=False)
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


def fetch(handler, offset: int | None, flushed: int | None, session: tuple[int, int] = (0, NEW_SESSION),
          forgotten=()):
    """A fetch of partition r-0 from ``offset`` (None: not listed) in ``session`` (id, epoch)."""
    listed = () if offset is None else (ReplicaFetchPartition("r", 0, EPOCH, offset, 1 << 20, flushed),)
    return handler.replica_fetch(ReplicaFetchRequest(1, 500, 1, listed, *session, forgotten))


def answer_of(pieces) -> list:
    data = b"".join(p if isinstance(p, bytes) else p.read() for p in pieces)
    assert data[4:6] == b"\x00\x00", "the session's error"
    return decode_replica_fetch_response(data[6:])[1]


def session_error(pieces) -> int:
    [data] = pieces
    return int.from_bytes(data[4:6], "big", signed=True)


def held_then_moved_on(tmp_path):
    """The follower holds "one" unflushed: its session's fetch at the end is held. Its
    connection goes unseen; it fsyncs, and its fetch in a new session says so: the high
    watermark passes "one"."""
    replica, manager, handler, clock = leader_with_a_follower(tmp_path)
    replica.log.append(validate_message_set(encode_message_set([b"one"])))
    manager.appended(replica)
    end = replica.log.written_end
    assert answer_of(fetch(handler, 0, 0))[0].messages  # the session's first fetch: the data
    session = manager.fetch_sessions.session_of(1)
    held = fetch(handler, end, 0, (session.id, 1))
    assert isinstance(held, Deferred) and replica.log.end_offset == 0
    clock.advance(0.1)
    again = fetch(handler, end, end)  # a new session
    assert isinstance(again, Deferred) and replica.log.end_offset == end
    return replica, manager, handler, clock, held, again


def test_a_held_fetch_cancelled_with_its_connection_is_dropped_and_records_nothing(tmp_path):
    replica, manager, handler, clock, held, again = held_then_moved_on(tmp_path)
    held.addErrback(lambda failure: None)
    held.cancel()  # its connection closed (network/connection.py cancels the answer)
    assert manager.fetch_sessions.waiting(("r", 0)) == 1  # the new session's
    clock.advance(0.5)  # every wait ends
    assert manager.proposals == []  # the follower stays in the ISR
    assert replica.leader.followers[1].end == replica.log.end_offset
    assert [a.error for a in answer_of(again.result)] == [0]


def test_a_held_fetch_of_a_replaced_session_is_answered_empty_and_records_nothing(tmp_path):
    replica, manager, handler, clock, held, again = held_then_moved_on(tmp_path)  # the old one died unseen
    clock.advance(0)  # the replaced session's fetch is woken: nobody reads its answer
    assert answer_of(held.result) == []
    clock.advance(0.5)  # every wait ends
    assert manager.proposals == []  # before issue 22's fix: [(0,)], the follower proposed out of the ISR
    assert replica.leader.followers[1].end == replica.log.end_offset
    assert [a.error for a in answer_of(again.result)] == [0]


def counting_reads(manager) -> list:
    calls = []
    real = manager.follower_fetch

    def follower_fetch(*args):
        calls.append(args)
        return real(*args)
    manager.follower_fetch = follower_fetch
    return calls


def idle_session(tmp_path):
    """A follower at the leader's end of an empty log, in a session (its first fetch answered
    at its wait's end)."""
    replica, manager, handler, clock = leader_with_a_follower(tmp_path)
    first = fetch(handler, 0, 0)
    clock.advance(0.5)
    [answer] = answer_of(first.result)
    assert (answer.error, answer.high_watermark, answer.log_end) == (0, 0, 0)
    return replica, manager, handler, clock, manager.fetch_sessions.session_of(1)


def test_an_idle_sessions_fetch_reads_no_partition_and_is_answered_with_none_when_its_wait_runs_out(tmp_path):
    # Issue 23: an idle follower's fetch of many partitions was read in full every round.
    replica, manager, handler, clock, session = idle_session(tmp_path)
    reads = counting_reads(manager)
    for epoch in (1, 2, 3):
        held = fetch(handler, None, None, (session.id, epoch))
        assert isinstance(held, Deferred)
        clock.advance(0.5)
        assert answer_of(held.result) == []
    assert reads == []


def test_an_idle_follower_in_a_session_stays_in_sync_by_its_fetches_alone(tmp_path):
    replica, manager, handler, clock, session = idle_session(tmp_path)
    for epoch in range(1, 41):  # 20 s of idle rounds, twice the lag time
        fetch(handler, None, None, (session.id, epoch))
        clock.advance(0.5)
        replica.leader.follower_seen(1, session.last_fetch_ms)  # what ReplicaManager's tick does
        assert replica.leader.tick(int(clock.seconds() * 1000)).propose_isr is None
    # Without fetches the same follower falls out once the lag time has passed.
    clock.advance(10.5)
    replica.leader.follower_seen(1, session.last_fetch_ms)
    assert replica.leader.tick(int(clock.seconds() * 1000)).propose_isr == (0,)


def test_a_held_fetch_wakes_for_an_append_to_its_partition_and_reads_it(tmp_path):
    replica, manager, handler, clock, session = idle_session(tmp_path)
    held = fetch(handler, None, None, (session.id, 1))
    replica.log.append(validate_message_set(encode_message_set([b"one"])))
    manager.appended(replica)
    clock.advance(0)  # the wake comes after the reactor step, before the wait runs out
    [answer] = answer_of(held.result)
    assert (answer.topic, answer.partition, answer.error) == ("r", 0, 0) and len(answer.messages) > 0


def test_a_high_watermark_move_is_told_in_the_next_answer_once(tmp_path):
    replica, manager, handler, clock, session = idle_session(tmp_path)
    replica.log.append(validate_message_set(encode_message_set([b"one"])))
    manager.appended(replica)
    end = replica.log.written_end
    [data] = answer_of(fetch(handler, None, None, (session.id, 1)))
    assert (data.high_watermark, data.log_end) == (0, end) and data.messages
    # The follower has it and has fsynced it: its listed end moves the high watermark.
    told = fetch(handler, end, end, (session.id, 2))
    clock.advance(0.5)
    [answer] = answer_of(told.result)
    assert (answer.high_watermark, answer.log_end, len(answer.messages)) == (end, end, 0)
    quiet = fetch(handler, None, None, (session.id, 3))
    clock.advance(0.5)
    assert answer_of(quiet.result) == []  # told already


def test_a_forgotten_partition_is_no_longer_answered(tmp_path):
    replica, manager, handler, clock, session = idle_session(tmp_path)
    held = fetch(handler, None, None, (session.id, 1), forgotten=(("r", 0),))
    replica.log.append(validate_message_set(encode_message_set([b"one"])))
    manager.appended(replica)
    clock.advance(0)
    assert not held.called and manager.fetch_sessions.waiting(("r", 0)) == 0
    clock.advance(0.5)
    assert answer_of(held.result) == []


def test_a_fetch_of_a_session_not_the_leaders_or_out_of_turn_gets_the_sessions_error(tmp_path):
    replica, manager, handler, clock, session = idle_session(tmp_path)
    assert session_error(fetch(handler, None, None, (session.id + 1, 1))) == 70  # FETCH_SESSION_ID_NOT_FOUND
    assert session_error(fetch(handler, None, None, (session.id, 5))) == 71  # INVALID_FETCH_SESSION_EPOCH
    held = fetch(handler, None, None, (session.id, 1))  # its next epoch is still good
    clock.advance(0.5)
    assert answer_of(held.result) == []
