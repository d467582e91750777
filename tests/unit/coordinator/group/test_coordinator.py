"""The coordinator's edge on task.Clock: waiting answers as Deferreds, timers, offsets in the
file store (the ZooKeeper store is tested against a real ZooKeeper in tests/coordination/)."""

import itertools
import json
import uuid

import pytest
from twisted.internet import task

from twisted_broker.coordinator.group.coordinator import GroupCoordinator
from twisted_broker.coordinator.group.messages import FetchedOffset, GroupConfig, JoinRequest, OffsetCommit
from twisted_broker.coordinator.group.offset_store import FileOffsets
from twisted_broker.codec.kafka import errors

NAMES = {"t": {0: "0-0", 1: "0-1"}, "r": {0: "0"}}  # a 0.7 topic with two partitions, a replicated one


def coordinator(tmp_path, clock=None, delay_ms=3_000, is_coordinator=lambda: True):
    counter = itertools.count(1)
    return GroupCoordinator(clock=clock or task.Clock(), offsets=FileOffsets(str(tmp_path)),
                            partition_names=NAMES.get, is_coordinator=is_coordinator,
                            config=GroupConfig(initial_rebalance_delay_ms=delay_ms),
                            new_uuid=lambda: uuid.UUID(int=next(counter)))


def request(client, member_id=""):
    return JoinRequest(member_id, client, "/127.0.0.1", 10_000, 30_000, "consumer", (("range", client.encode()),))


def results(deferred):
    box = []
    deferred.addBoth(box.append)
    return box


def test_joins_wait_for_the_initial_delay_then_the_leaders_sync_answers_the_follower(tmp_path):
    clock = task.Clock()
    c = coordinator(tmp_path, clock)
    a, b = results(c.join_group("g", request("a"))), results(c.join_group("g", request("b")))
    clock.advance(2.999)
    assert a == b == []
    clock.advance(0.001)
    assert a == b == []  # a member came during the first delay: one more
    clock.advance(3)
    assert a[0].generation == b[0].generation == 1 and a[0].leader_id == a[0].member_id
    follower = results(c.sync_group("g", b[0].member_id, 1, {}))
    assert follower == []
    leader = results(c.sync_group("g", a[0].member_id, 1, {b[0].member_id: b"p0"}))
    assert follower[0].assignment == b"p0" and leader[0].assignment == b""
    assert c.heartbeat("g", b[0].member_id, 1) == errors.NONE


def test_a_silent_member_expires_on_the_clock_and_the_other_is_told_to_rejoin(tmp_path):
    clock = task.Clock()
    c = coordinator(tmp_path, clock, delay_ms=0)
    a = results(c.join_group("g", request("a")))
    clock.advance(0)
    a_id = a[0].member_id
    c.sync_group("g", a_id, 1, {})
    b = results(c.join_group("g", request("b")))
    c.join_group("g", request("a", a_id))
    b_id = b[0].member_id
    c.sync_group("g", b_id, 2, {})
    c.sync_group("g", a_id, 2, {})
    for _ in range(3):  # b heartbeats every 3 s; a never does
        clock.advance(3)
        assert c.heartbeat("g", b_id, 2) == errors.NONE
    clock.advance(0.999)
    assert len(c.table.groups["g"].members) == 2
    clock.advance(0.001)  # a's session (10 s) ends
    assert c.heartbeat("g", b_id, 2) == errors.REBALANCE_IN_PROGRESS
    assert list(c.table.groups["g"].members) == [b_id]


def test_a_cancelled_join_is_forgotten_and_the_rest_are_answered(tmp_path):
    clock = task.Clock()
    c = coordinator(tmp_path, clock)
    first = c.join_group("g", request("a"))
    first.addErrback(lambda failure: None)
    first.cancel()
    b = results(c.join_group("g", request("b")))
    clock.advance(3)
    clock.advance(3)
    assert b[0].error == errors.NONE and len(c.table.groups["g"].members) == 2
    assert not c._join_waiters


def test_when_no_longer_coordinator_waiting_requests_get_not_coordinator_and_groups_go(tmp_path):
    clock, coordinating = task.Clock(), [True]
    c = coordinator(tmp_path, clock, is_coordinator=lambda: coordinating[0])
    waiting = results(c.join_group("g", request("a")))
    coordinating[0] = False
    assert c.heartbeat("g", "x", 1) == errors.NOT_COORDINATOR
    assert waiting[0].error == errors.NOT_COORDINATOR and not c.table.groups
    assert not clock.getDelayedCalls()
    assert results(c.join_group("g", request("a")))[0].error == errors.NOT_COORDINATOR
    assert results(c.fetch_offsets("g", None))[0].error == errors.NOT_COORDINATOR


def test_offsets_committed_without_a_generation_are_fetched_back_after_a_restart(tmp_path):
    c = coordinator(tmp_path)
    done = results(c.commit_offsets("g", "", -1, [OffsetCommit("t", 1, 42, "meta"), OffsetCommit("r", 0, 7)]))
    assert done[0] == {("t", 1): errors.NONE, ("r", 0): errors.NONE}
    again = coordinator(tmp_path)  # a new broker process reads the file
    fetched = results(again.fetch_offsets("g", [("t", 0), ("t", 1), ("r", 0), ("gone", 0)]))[0]
    assert fetched.error == errors.NONE
    assert fetched.offsets == {("t", 0): FetchedOffset(-1), ("t", 1): FetchedOffset(42, "meta"),
                               ("r", 0): FetchedOffset(7), ("gone", 0): FetchedOffset(-1)}
    assert results(again.fetch_offsets("g", None))[0].offsets == {("t", 1): FetchedOffset(42, "meta"),
                                                                   ("r", 0): FetchedOffset(7)}
    stored = json.loads((tmp_path / "group-offsets").read_text())
    assert stored["groups"]["g"] == {"t": {"0-1": [42, "meta"]}, "r": {"0": [7, ""]}}


def test_commits_of_unknown_partitions_or_large_metadata_are_refused_one_by_one(tmp_path):
    c = coordinator(tmp_path)
    done = results(c.commit_offsets("g", "", -1, [OffsetCommit("t", 9, 1), OffsetCommit("t", 0, 1, "x" * 4097),
                                                  OffsetCommit("t", 1, 5)]))[0]
    assert done == {("t", 9): errors.UNKNOWN_TOPIC_OR_PARTITION, ("t", 0): errors.OFFSET_METADATA_TOO_LARGE,
                    ("t", 1): errors.NONE}


def test_a_commit_from_a_stale_generation_stores_nothing(tmp_path):
    clock = task.Clock()
    c = coordinator(tmp_path, clock, delay_ms=0)
    a = results(c.join_group("g", request("a")))
    clock.advance(0)
    c.sync_group("g", a[0].member_id, 1, {})
    done = results(c.commit_offsets("g", a[0].member_id, 0, [OffsetCommit("t", 0, 5)]))[0]
    assert done == {("t", 0): errors.ILLEGAL_GENERATION}
    assert results(c.fetch_offsets("g", [("t", 0)]))[0].offsets[("t", 0)].offset == -1


def test_list_and_describe_show_groups_held_and_groups_only_stored(tmp_path):
    clock = task.Clock()
    c = coordinator(tmp_path, clock)
    c.commit_offsets("old", "", -1, [OffsetCommit("t", 0, 1)])
    restarted = coordinator(tmp_path, clock)
    restarted.join_group("live", request("a"))
    assert results(restarted.list_groups())[0].groups == (("live", "consumer"), ("old", ""))
    described = results(restarted.describe_groups(["live", "old", "never"]))[0]
    assert [(d.group_id, d.state) for d in described] == [
        ("live", "PreparingRebalance"), ("old", "Empty"), ("never", "Dead")]


def test_an_unreadable_offsets_file_is_refused_not_overwritten(tmp_path):
    (tmp_path / "group-offsets").write_text("{not json")
    with pytest.raises(ValueError, match="not a group offsets file"):
        FileOffsets(str(tmp_path))
    assert (tmp_path / "group-offsets").read_text() == "{not json"


def test_partition_names_may_be_read_first_for_offsets_of_every_topic(tmp_path):
    from twisted.internet.defer import Deferred
    reads = {}

    def names_after_a_read(topic):  # as a listener that must read a 0.7 topic's layout first
        reads[topic] = Deferred()
        return reads[topic]

    c = GroupCoordinator(clock=task.Clock(), offsets=FileOffsets(str(tmp_path)), partition_names=names_after_a_read)
    committing = results(c.commit_offsets("g", "", -1, [OffsetCommit("t", 1, 42)]))
    reads["t"].callback(NAMES["t"])
    assert committing == [{("t", 1): errors.NONE}]
    fetching = results(c.fetch_offsets("g", None))
    assert fetching == []
    reads["t"].callback(NAMES["t"])
    assert fetching[0].offsets == {("t", 1): FetchedOffset(42)}
