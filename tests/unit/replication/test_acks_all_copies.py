"""acks=all means at least min.insync.replicas copies (issue 22, defect 1): a produce waiting
for its commit is acknowledged only if the high watermark passed it counting that many
replicas; if the ISR shrank below the minimum after the append, it is answered
NotEnoughReplicasAfterAppend (Kafka's error 20), on both protocols (they carry the code)."""

import time

from twisted_broker.codec.kafka07.message_set import encode_message_set, validate_message_set
from twisted_broker.codec.kafka07.replication_errors import NotEnoughReplicasAfterAppend
from twisted_broker.registry.replication_paths import PartitionState
from twisted_broker.replication.leader import Decision, LeaderPartition
from twisted_broker.replication.replica import Replica
from twisted_broker.storage.log import LogPolicy
from twisted_broker.storage.log_directory import open_log_directory
from twisted_broker.storage.replica_log import ReplicaLog

LAG_MS = 10_000


def leader(min_insync=2):
    return LeaderPartition(broker_id=0, leader_epoch=3, epoch_start_offset=0, replicas=(0, 1, 2), isr=(0, 1, 2),
                           log_end=0, high_watermark=0, now_ms=0, lag_time_max_ms=LAG_MS,
                           min_insync_replicas=min_insync)


def test_the_high_watermark_says_how_many_replicas_it_counted():
    p = leader()
    p.appended(100)
    p.follower_fetched(1, 100, now_ms=1)
    decision = p.follower_fetched(2, 100, now_ms=1)
    assert decision == Decision(high_watermark=100) and decision.copies == 3 and p.enough_copies()


def test_a_write_committed_after_the_isr_shrank_to_the_leader_has_too_few_copies():
    p = leader()
    p.appended(100)  # appended with 3 in the ISR: check_write let it in
    p.follower_fetched(1, 0, now_ms=1)
    p.follower_fetched(2, 0, now_ms=1)
    assert p.tick(LAG_MS + 2).propose_isr == (0,)  # both followers stopped
    decision = p.isr_written((0,))
    assert decision.high_watermark == 100 and decision.copies == 1
    assert not p.enough_copies(decision.copies) and not p.enough_copies()


def test_a_write_committed_by_the_minimum_is_enough():
    p = leader()
    p.appended(100)
    p.follower_fetched(1, 100, now_ms=1)
    p.follower_fetched(2, 0, now_ms=1)
    p.tick(LAG_MS + 2)
    decision = p.isr_written((0, 1))
    assert decision.high_watermark == 100 and decision.copies == 2 and p.enough_copies(decision.copies)


def replica(tmp_path, min_insync):
    path = str(tmp_path / "r-0")
    import os
    os.makedirs(path)
    log_ = ReplicaLog(path, "r", 0, open_log_directory(path, time.time()), policy=LogPolicy(), now=time.time)
    r = Replica("r", 0, log_)
    r.become_leader(PartitionState(0, 3, (0, 1, 2), 1), (0, 1, 2), broker_id=0, now_ms=0, lag_time_max_ms=LAG_MS,
                    min_insync_replicas=min_insync, log_end=0)
    return r


def outcome(d):
    results = []
    d.addCallbacks(lambda _: results.append("acknowledged"), lambda f: results.append(f.value))
    return results


def commit(r, decision):
    """What the replica manager does with a leader's decision."""
    r.log.publish_to(decision.high_watermark)
    r.release_waiters(decision.copies)


def committed_on_the_leader_alone(r):
    """Append one message and wait for its commit while both followers fall out of the ISR:
    the HW passes it counting the leader alone. Returns its end and the wait's outcome."""
    r.log.append(validate_message_set(encode_message_set([b"x"])))
    end = r.log.written_end
    r.leader.appended(end)
    waiting = outcome(r.wait_for_commit(end, deadline_ms=60_000))
    r.leader.follower_fetched(1, 0, now_ms=1)
    r.leader.follower_fetched(2, 0, now_ms=1)
    r.leader.tick(LAG_MS + 2)
    commit(r, r.leader.isr_written((0,)))
    return end, waiting


def test_a_waiting_produce_passed_on_fewer_copies_than_the_minimum_fails_after_append(tmp_path):
    r = replica(tmp_path, min_insync=2)
    _end, waiting = committed_on_the_leader_alone(r)
    assert len(waiting) == 1 and isinstance(waiting[0], NotEnoughReplicasAfterAppend)
    assert waiting[0].code == 20
    assert r.ack_waiters == []


def test_without_copies_given_the_replica_asks_its_leader(tmp_path):
    # The replica manager's call as it is (release_waiters() after publishing).
    r = replica(tmp_path, min_insync=2)
    r.log.append(validate_message_set(encode_message_set([b"x"])))
    end = r.log.written_end
    r.leader.appended(end)
    waiting = outcome(r.wait_for_commit(end, deadline_ms=60_000))
    r.leader.follower_fetched(1, 0, now_ms=1)
    r.leader.follower_fetched(2, 0, now_ms=1)
    r.leader.tick(LAG_MS + 2)
    r.log.publish_to(r.leader.isr_written((0,)).high_watermark)
    r.release_waiters()
    assert isinstance(waiting[0], NotEnoughReplicasAfterAppend)


def test_a_waiting_produce_passed_on_enough_copies_is_acknowledged(tmp_path):
    r = replica(tmp_path, min_insync=2)
    r.log.append(validate_message_set(encode_message_set([b"x"])))
    end = r.log.written_end
    r.leader.appended(end)
    waiting = outcome(r.wait_for_commit(end, deadline_ms=60_000))
    r.leader.follower_fetched(1, end, now_ms=1)
    commit(r, r.leader.follower_fetched(2, end, now_ms=1))
    assert waiting == ["acknowledged"]


def test_a_cancelled_wait_is_dropped(tmp_path):
    r = replica(tmp_path, min_insync=1)
    r.log.append(validate_message_set(encode_message_set([b"x"])))
    d = r.wait_for_commit(r.log.written_end, deadline_ms=60_000)
    d.addErrback(lambda f: None)
    d.cancel()
    assert r.ack_waiters == []


def test_a_retry_below_the_high_watermark_counts_the_replicas_that_hold_it_now(tmp_path):
    # The nemesis of 2026-12-07: the HW passed a batch while the ISR was the leader alone
    # (refused with 20, rightly); the followers came back and fetched it, but the HW did not
    # move again (nothing new was appended), and every retry of the batch, a duplicate found
    # below the HW, was refused with 20 by the count of that last move: 45 s, until the
    # client timed the batch out and re-sent it under a new producer epoch.
    r = replica(tmp_path, min_insync=2)
    end, first = committed_on_the_leader_alone(r)
    assert isinstance(first[0], NotEnoughReplicasAfterAppend)
    assert outcome(r.wait_for_commit(end, deadline_ms=60_000))[0].code == 20  # still one copy
    assert r.leader.follower_fetched(1, end, now_ms=LAG_MS + 3).propose_isr == (0, 1)
    assert r.leader.isr_written((0, 1)).high_watermark is None  # the HW stays where it was
    assert outcome(r.wait_for_commit(end, deadline_ms=60_000)) == ["acknowledged"]  # two copies now


def test_holders_are_the_leader_and_the_isr_members_that_reached_the_high_watermark():
    p = leader()
    p.appended(100)
    p.follower_fetched(1, 100, now_ms=1)
    assert p.high_watermark == 0 and p.holders() == 3  # follower 2 has not fetched: it held 0 at election
    p.follower_fetched(2, 100, now_ms=1)
    assert p.high_watermark == 100 and p.holders() == 3
    p.appended(200)
    p.follower_fetched(1, 200, now_ms=2)
    assert p.high_watermark == 100 and p.holders() == 3
    p.follower_fetched(2, 100, now_ms=2)
    p.follower_fetched(1, 200, now_ms=LAG_MS + 2)
    assert p.tick(LAG_MS + 3).propose_isr == (0, 1)  # follower 2 stopped at 100
    p.isr_written((0, 1))
    assert p.high_watermark == 200 and p.holders() == 2


def test_a_new_leader_counts_the_isr_it_took_office_with_until_its_followers_fetch():
    # The first stall of the nemesis of 2026-12-07: a leader elected with ISR [4] alone, then
    # joined by a follower, refused every retry of a batch its predecessor had committed.
    def new_leader(isr):
        return LeaderPartition(broker_id=0, leader_epoch=4, epoch_start_offset=100, replicas=(0, 1, 2), isr=isr,
                               log_end=100, high_watermark=100, now_ms=0, lag_time_max_ms=LAG_MS,
                               min_insync_replicas=2)
    assert new_leader((0, 1, 2)).enough_copies() and new_leader((0, 1, 2)).holders() == 3
    alone = new_leader((0,))
    assert not alone.enough_copies()
    assert alone.follower_fetched(1, 100, now_ms=1).propose_isr == (0, 1)
    alone.isr_written((0, 1))
    assert alone.high_watermark == 100 and alone.enough_copies()
