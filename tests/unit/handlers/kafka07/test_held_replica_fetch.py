"""A follower's fetch held for new data, in its fetch session (docs/replication.md §5).

Issue 22, defect 7, second half: woken after its follower has moved on, it must not record the
follower's old offset, which is below the high watermark by then and would drop a healthy
follower from the ISR. Issue 23: an idle session's round reads no partition, and an
incremental fetch answers only the partitions with something new.

The leader's side is real (ReplicationRequests, Replica, LeaderPartition, a replica log on
disk); the manager is reduced to what the handler asks of it (tests/support/leader_replica.py)."""

from __future__ import annotations

from twisted.internet.defer import Deferred

from twisted_broker.codec.kafka07.message_set import encode_message_set, validate_message_set
from twisted_broker.codec.kafka07.replication import (
    NEW_SESSION, ReplicaFetchPartition, ReplicaFetchRequest, decode_replica_fetch_response,
)

from tests.support.leader_replica import EPOCH, leader_replica


def leader_with_a_follower(tmp_path):
    return leader_replica(tmp_path)


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
