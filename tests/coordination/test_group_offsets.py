"""Committed offsets of modern groups in ZooKeeper, at 0.7's paths, where 0.7's tools read them."""

import pytest_twisted
from twisted.internet import task

from twisted_broker.coordinator.group.coordinator import GroupCoordinator
from twisted_broker.coordinator.group.messages import FetchedOffset, GroupConfig, JoinRequest, OffsetCommit
from twisted_broker.coordinator.group.offset_store import ZooKeeperOffsets
from twisted_broker.codec.kafka import errors
from twisted_broker.registry.cluster_view import ClusterView
from twisted_broker.registry.zookeeper import ZooKeeper

NAMES = {"old": {0: "0-0", 1: "1-0"}, "rep": {0: "0", 1: "1"}}


def coordinator(bridge):
    return GroupCoordinator(clock=task.Clock(), offsets=ZooKeeperOffsets(bridge), partition_names=NAMES.get)


@pytest_twisted.inlineCallbacks
def test_a_commit_lands_at_the_0_7_paths_and_0_7_readers_see_it(bridge, zk, zk_connect):
    done = yield coordinator(bridge).commit_offsets("g", "", -1, [
        OffsetCommit("old", 1, 1234, "checkpoint-7"), OffsetCommit("rep", 0, 99)])
    assert done == {("old", 1): errors.NONE, ("rep", 0): errors.NONE}
    assert zk.get("/consumers/g/offsets/old/1-0")[0] == b"1234"
    assert zk.get("/consumers/g/offsets/rep/0")[0] == b"99"
    assert zk.get("/consumers/g/offsets_metadata/old/1-0")[0] == b"checkpoint-7"
    assert zk.get_children("/consumers/g/offsets/old") == ["1-0"]  # nothing else among the partitions
    with ClusterView(zk_connect) as view:
        assert "g" in view.groups() and view.offsets("g", "old") == {"1-0": 1234}


@pytest_twisted.inlineCallbacks
def test_offsets_are_fetched_back_by_partition_or_all_and_metadata_follows_the_latest_commit(bridge, zk):
    c = coordinator(bridge)
    yield c.commit_offsets("g", "", -1, [OffsetCommit("old", 0, 10, "m1"), OffsetCommit("rep", 1, 20)])
    yield c.commit_offsets("g", "", -1, [OffsetCommit("old", 0, 11)])  # no metadata: the old one goes
    zk.create("/consumers/g/offsets/old/9-9", b"5")  # a partition whose broker is gone
    zk.create("/consumers/g/offsets/rep/0", b"not a number")
    fetched = yield coordinator(bridge).fetch_offsets("g", [("old", 0), ("old", 1), ("rep", 0), ("rep", 1)])
    assert fetched.error == errors.NONE
    assert fetched.offsets == {("old", 0): FetchedOffset(11), ("old", 1): FetchedOffset(-1),
                               ("rep", 0): FetchedOffset(-1), ("rep", 1): FetchedOffset(20)}
    everything = yield c.fetch_offsets("g", None)
    assert everything.offsets == {("old", 0): FetchedOffset(11), ("rep", 1): FetchedOffset(20)}


@pytest_twisted.inlineCallbacks
def test_a_0_7_consumers_offsets_are_read_and_its_group_listed(bridge, zk):
    zk.create("/consumers/legacy/offsets/old/0-0", b"777", makepath=True)
    c = coordinator(bridge)
    fetched = yield c.fetch_offsets("legacy", [("old", 0)])
    assert fetched.offsets[("old", 0)] == FetchedOffset(777)
    listed = yield c.list_groups()
    assert listed.groups == (("legacy", ""),)
    described = yield c.describe_groups(["legacy"])
    assert described[0].state == "Empty"


@pytest_twisted.inlineCallbacks
def test_without_zookeeper_commits_and_fetches_answer_coordinator_not_available(zk_connect):
    from twisted.internet import reactor
    own = ZooKeeper(zk_connect, reactor=reactor)
    yield own.start(10)
    c = coordinator(own)
    yield own.stop()
    done = yield c.commit_offsets("g", "", -1, [OffsetCommit("old", 0, 1)])
    assert done == {("old", 0): errors.COORDINATOR_NOT_AVAILABLE}
    fetched = yield c.fetch_offsets("g", [("old", 0)])
    assert fetched.error == errors.COORDINATOR_NOT_AVAILABLE


def request(client, member_id=""):
    return JoinRequest(member_id, client, "/127.0.0.1", 10_000, 10_000, "consumer", (("range", b""),))


@pytest_twisted.inlineCallbacks
def test_after_a_coordinator_change_members_rejoin_and_resume_from_their_commits(bridge):
    clock, coordinating = task.Clock(), [True]
    first = GroupCoordinator(clock=clock, offsets=ZooKeeperOffsets(bridge), partition_names=NAMES.get,
                             is_coordinator=lambda: coordinating[0], config=GroupConfig(initial_rebalance_delay_ms=0))
    joining = first.join_group("g", request("a"))
    clock.advance(0)
    a = yield joining
    yield first.sync_group("g", a.member_id, a.generation, {a.member_id: b"old:0,1"})
    done = yield first.commit_offsets("g", a.member_id, a.generation, [OffsetCommit("old", 0, 500),
                                                                       OffsetCommit("old", 1, 600)])
    assert set(done.values()) == {errors.NONE}
    waiting = first.join_group("g", request("b"))  # a rebalance is under way when the controller moves
    coordinating[0] = False
    assert first.heartbeat("g", a.member_id, a.generation) == errors.NOT_COORDINATOR
    assert (yield waiting).error == errors.NOT_COORDINATOR

    second = GroupCoordinator(clock=clock, offsets=ZooKeeperOffsets(bridge), partition_names=NAMES.get,
                              config=GroupConfig(initial_rebalance_delay_ms=0))
    assert second.heartbeat("g", a.member_id, a.generation) == errors.UNKNOWN_MEMBER_ID
    rejoining = second.join_group("g", request("a"))
    clock.advance(0)
    assert (yield rejoining).generation == 1
    fetched = yield second.fetch_offsets("g", [("old", 0), ("old", 1)])
    assert fetched.offsets == {("old", 0): FetchedOffset(500), ("old", 1): FetchedOffset(600)}
