"""A group's membership rules (Kafka 2.1's GroupCoordinator), event by event, through the table.

Over 400 lines: one state machine's transitions, read best in the order a group lives them
(join, sync, heartbeat, leave, expiry, commit); the model-based tests are in their own module.
"""

import itertools
import uuid

import pytest

from twisted_broker.coordinator.group.messages import GroupConfig, JoinRequest, JoinResult, SyncResult
from twisted_broker.coordinator.group.state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from twisted_broker.coordinator.group.table import GroupTable
from twisted_broker.codec.kafka import errors

SESSION, REBALANCE = 10_000, 30_000
RANGE = (("range", b"range-meta"),)


def table(delay_ms: int = 0) -> GroupTable:
    counter = itertools.count(1)
    return GroupTable(config=GroupConfig(min_session_timeout_ms=1_000, max_session_timeout_ms=60_000,
                                         initial_rebalance_delay_ms=delay_ms),
                      new_uuid=lambda: uuid.UUID(int=next(counter)))


def req(member_id="", client="c", protocols=RANGE, session=SESSION, rebalance=REBALANCE, ptype="consumer"):
    return JoinRequest(member_id, client, "/127.0.0.1", session, rebalance, ptype, tuple(protocols))


def joined(t, now=0, group="g", **kwargs) -> str:
    """A new member that joins; returns its id (it waits unless the join phase ends at once)."""
    step = t.join(group, req(**kwargs), now)
    assert step.reply is None
    return step.member_id


def stable_pair(t):
    """Two members a (the leader) and b of a Stable group at generation 2, assigned b"A", b"B"."""
    a = joined(t, client="a")
    assert t.next_deadline_ms("g") == 0  # no initial delay: the join phase ends at once
    assert t.tick("g", 0).joins[a].generation == 1
    t.sync("g", a, 1, {a: b"A"}, 0)
    b_step = t.join("g", req(client="b"), 1)
    rejoin = t.join("g", req(member_id=a, client="a"), 2)
    assert set(rejoin.answers.joins) == {a, b_step.member_id}
    b = b_step.member_id
    t.sync("g", b, 2, {}, 3)
    t.sync("g", a, 2, {a: b"A", b: b"B"}, 3)
    assert t.groups["g"].state == STABLE
    return a, b


def test_the_first_member_leads_and_gets_a_client_id_uuid_member_id_and_every_members_metadata():
    t = table()
    step = t.join("g", req(client="app"), 0)
    member = f"app-{uuid.UUID(int=1)}"
    assert step.member_id == member and step.reply is None
    assert t.tick("g", 0).joins == {member: JoinResult(errors.NONE, 1, "range", member, member,
                                                     ((member, b"range-meta"),))}
    assert t.groups["g"].state == COMPLETING_REBALANCE


def test_the_leaders_sync_answers_every_waiting_member_and_makes_the_group_stable():
    t = table()
    a, b = stable_pair(t)
    assert t.sync("g", b, 2, {}, 4).reply == SyncResult(errors.NONE, b"B")  # again, in Stable
    group = t.groups["g"]
    assert group.generation == 2 and group.leader_id == a and group.state == STABLE


def test_a_follower_waits_for_the_leaders_sync_and_a_member_left_out_gets_an_empty_assignment():
    t = table()
    a, b = stable_pair(t)
    t.leave("g", b, 10)  # a stable group with one member rebalances
    c = joined(t, now=11, client="c")
    step = t.join("g", req(member_id=a, client="a"), 12)
    assert set(step.answers.joins) == {a, c}
    follower = t.sync("g", c, 3, {}, 13)
    assert follower.reply is None and not follower.answers
    leader = t.sync("g", a, 3, {a: b"all", "someone-else": b"x"}, 14)
    assert leader.answers.syncs == {a: SyncResult(errors.NONE, b"all"), c: SyncResult(errors.NONE, b"")}


def test_a_new_member_starts_a_rebalance_and_the_others_hear_of_it_through_heartbeats():
    t = table()
    a, b = stable_pair(t)
    c = joined(t, now=100, client="c")
    assert t.groups["g"].state == PREPARING_REBALANCE
    assert t.heartbeat("g", a, 2, 101) == errors.REBALANCE_IN_PROGRESS
    t.join("g", req(member_id=a, client="a"), 102)
    step = t.join("g", req(member_id=b, client="b"), 103)
    answers = step.answers.joins
    assert set(answers) == {a, b, c}
    assert {r.generation for r in answers.values()} == {3} and {r.leader_id for r in answers.values()} == {a}
    assert [m for m, _ in answers[a].members] == [a, b, c] and answers[b].members == answers[c].members == ()


def test_members_that_do_not_rejoin_by_the_rebalance_timeout_are_dropped_and_the_leader_moves_on():
    t = table()
    a, b = stable_pair(t)
    t.join("g", req(member_id=b, client="b", protocols=[("range", b"v2")]), 100)  # a, the leader, does not
    group = t.groups["g"]
    assert group.join_deadline_ms == 100 + REBALANCE
    for now in range(100, 100 + REBALANCE, 5_000):  # heartbeats do not replace rejoining
        assert t.heartbeat("g", a, 2, now) == errors.REBALANCE_IN_PROGRESS
        assert not t.tick("g", now)
    assert not t.tick("g", 100 + REBALANCE - 1)
    answers = t.tick("g", 100 + REBALANCE)
    assert answers.joins == {b: JoinResult(errors.NONE, 3, "range", b, b, ((b, b"v2"),))}
    assert list(group.members) == [b] and group.leader_id == b


def test_the_largest_rebalance_timeout_bounds_the_join_phase():
    t = table()
    a = joined(t, client="a", rebalance=5_000)
    t.tick("g", 0)
    t.sync("g", a, 1, {}, 0)
    joined(t, now=10, client="b", rebalance=40_000)
    assert t.groups["g"].join_deadline_ms == 10 + 40_000


def test_a_stable_member_not_heard_from_for_its_session_timeout_leaves_and_the_group_rebalances():
    t = table()
    a, b = stable_pair(t)
    t.heartbeat("g", a, 2, 1_000)
    assert t.next_deadline_ms("g") == 3 + SESSION  # b, answered by the sync at 3
    assert not t.tick("g", 3 + SESSION - 1)
    t.tick("g", 3 + SESSION)
    group = t.groups["g"]
    assert list(group.members) == [a] and group.state == PREPARING_REBALANCE
    assert t.heartbeat("g", b, 2, 3 + SESSION) == errors.UNKNOWN_MEMBER_ID


def test_a_member_waiting_for_its_join_or_sync_answer_does_not_expire():
    t = table()
    a, b = stable_pair(t)
    t.join("g", req(member_id=a, client="a"), 100)  # a waits for b to rejoin
    t.tick("g", 100 + SESSION + 1)
    assert a in t.groups["g"].members  # b, not heard from and not rejoining, went at 3 + SESSION
    assert b not in t.groups["g"].members


def test_a_follower_waiting_for_a_sync_outlives_its_session():
    t = table()
    a = joined(t, client="a")
    t.tick("g", 0)
    t.sync("g", a, 1, {}, 0)
    b = joined(t, now=1, client="b", session=2_000)
    t.join("g", req(member_id=a, client="a"), 2)
    assert t.sync("g", b, 2, {}, 3).reply is None
    assert not t.tick("g", 5_000)  # b's session (2 s) ended while it waited: kept
    assert t.sync("g", a, 2, {b: b"late"}, 5_000).answers.syncs[b] == SyncResult(errors.NONE, b"late")


def test_a_leader_that_never_syncs_goes_and_the_waiting_followers_hear_rebalance_in_progress():
    t = table()
    a = joined(t, client="a")
    t.tick("g", 0)
    t.sync("g", a, 1, {}, 0)
    b = joined(t, now=1, client="b")
    t.join("g", req(member_id=a, client="a"), 2)
    assert t.sync("g", b, 2, {}, 3).reply is None
    answers = t.tick("g", 2 + SESSION)
    assert answers.syncs == {b: SyncResult(errors.REBALANCE_IN_PROGRESS)}
    assert list(t.groups["g"].members) == [b]


def test_the_protocol_most_members_prefer_among_those_all_support_is_chosen():
    t = table(delay_ms=1_000)
    a = joined(t, client="a", protocols=[("range", b"1"), ("roundrobin", b"2"), ("sticky", b"3")])
    b = joined(t, client="b", protocols=[("roundrobin", b"4"), ("range", b"5")])
    c = joined(t, client="c", protocols=[("sticky", b"6"), ("roundrobin", b"7"), ("range", b"8")])
    assert not t.tick("g", 1_000)  # members came during the delay: one more
    answers = t.tick("g", 2_000).joins
    assert answers[a].protocol == "roundrobin"  # sticky is not b's; range 1 vote, roundrobin 2
    assert answers[a].members == ((a, b"2"), (b, b"4"), (c, b"7"))


def test_a_tie_between_protocols_goes_to_the_leaders_preference():
    t = table(delay_ms=1_000)
    a = joined(t, client="a", protocols=[("range", b""), ("roundrobin", b"")])
    joined(t, client="b", protocols=[("roundrobin", b""), ("range", b"")])
    t.tick("g", 1_000)
    assert t.tick("g", 2_000).joins[a].protocol == "range"


@pytest.mark.parametrize("protocol_type, protocols", [
    ("connect", RANGE),  # another protocol type
    ("consumer", [("sticky", b"")]),  # no protocol in common
])
def test_a_member_the_group_cannot_share_a_protocol_with_is_refused(protocol_type, protocols):
    t = table()
    stable_pair(t)
    step = t.join("g", req(client="x", ptype=protocol_type, protocols=protocols), 10)
    assert step.reply == JoinResult(errors.INCONSISTENT_GROUP_PROTOCOL)
    assert len(t.groups["g"].members) == 2


@pytest.mark.parametrize("protocol_type, protocols", [("", RANGE), ("consumer", [])])
def test_the_first_member_must_name_a_protocol_type_and_a_protocol(protocol_type, protocols):
    assert table().join("g", req(ptype=protocol_type, protocols=protocols), 0).reply.error == \
        errors.INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.parametrize("session", [999, 60_001])
def test_a_session_timeout_outside_the_groups_bounds_is_refused(session):
    assert table().join("g", req(session=session), 0).reply == JoinResult(errors.INVALID_SESSION_TIMEOUT)


def test_unknown_member_ids_are_refused_by_every_request():
    t = table()
    assert t.join("g", req(member_id="ghost"), 0).reply == JoinResult(errors.UNKNOWN_MEMBER_ID, member_id="ghost")
    assert t.sync("g", "ghost", 0, {}, 0).reply == SyncResult(errors.UNKNOWN_MEMBER_ID)
    assert t.heartbeat("g", "ghost", 0, 0) == errors.UNKNOWN_MEMBER_ID
    assert t.leave("g", "ghost", 0).reply == errors.UNKNOWN_MEMBER_ID
    stable_pair(t)
    assert t.join("g", req(member_id="ghost"), 0).reply.error == errors.UNKNOWN_MEMBER_ID
    assert t.sync("g", "ghost", 2, {}, 0).reply.error == errors.UNKNOWN_MEMBER_ID
    assert t.heartbeat("g", "ghost", 2, 0) == errors.UNKNOWN_MEMBER_ID
    assert t.leave("g", "ghost", 0).reply == errors.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("group_id", ["", "a/b", ".", "..", "bad\x00"])
def test_a_group_id_zookeeper_cannot_name_is_invalid(group_id):
    t = table()
    assert t.join(group_id, req(), 0).reply.error == errors.INVALID_GROUP_ID
    assert t.sync(group_id, "m", 1, {}, 0).reply.error == errors.INVALID_GROUP_ID
    assert t.heartbeat(group_id, "m", 1, 0) == errors.INVALID_GROUP_ID
    assert t.leave(group_id, "m", 0).reply == errors.INVALID_GROUP_ID
    assert t.check_commit(group_id, "", -1, 0) == errors.INVALID_GROUP_ID
    assert not t.groups


def test_a_stale_generation_is_illegal_for_sync_heartbeat_and_commit():
    t = table()
    a, b = stable_pair(t)
    assert t.sync("g", b, 1, {}, 5).reply == SyncResult(errors.ILLEGAL_GENERATION)
    assert t.heartbeat("g", b, 1, 5) == errors.ILLEGAL_GENERATION
    assert t.check_commit("g", b, 1, 5) == errors.ILLEGAL_GENERATION
    assert t.heartbeat("g", b, 2, 5) == errors.NONE


def completing_trio(t):
    """a, b and a new member c at generation 3, waiting for the leader a's SyncGroup; returns
    the answers to the joins."""
    a, b = stable_pair(t)
    joined(t, now=10, client="c")
    t.join("g", req(member_id=a, client="a"), 11)
    answers = t.join("g", req(member_id=b, client="b"), 12).answers.joins
    assert t.groups["g"].state == COMPLETING_REBALANCE
    return a, b, answers


def test_during_completing_rebalance_heartbeats_and_commits_get_rebalance_in_progress():
    t = table()
    a, b, _ = completing_trio(t)
    assert t.heartbeat("g", b, 3, 13) == errors.REBALANCE_IN_PROGRESS
    assert t.check_commit("g", b, 3, 13) == errors.REBALANCE_IN_PROGRESS


def test_during_preparing_rebalance_syncs_wait_for_no_one_and_commits_of_the_current_generation_are_kept():
    t = table()
    a, b = stable_pair(t)
    joined(t, now=10, client="c")
    assert t.sync("g", b, 2, {}, 11).reply == SyncResult(errors.REBALANCE_IN_PROGRESS)
    assert t.check_commit("g", b, 2, 11) == errors.NONE  # offsets consumed before the rebalance


def test_a_repeated_join_while_completing_gets_the_current_generation_again():
    t = table()
    a, b, first = completing_trio(t)
    again = t.join("g", req(member_id=a, client="a"), 13)
    assert again.reply == first[a]  # the leader's answer, with every member's metadata


def test_a_join_with_new_metadata_while_completing_rebalances_and_answers_waiting_syncs():
    t = table()
    a, b = stable_pair(t)
    t.join("g", req(member_id=a, client="a"), 10)
    t.join("g", req(member_id=b, client="b"), 11)
    assert t.sync("g", b, 3, {}, 12).reply is None
    step = t.join("g", req(member_id=a, client="a", protocols=[("range", b"new topics")]), 13)
    assert step.answers.syncs == {b: SyncResult(errors.REBALANCE_IN_PROGRESS)}
    assert t.groups["g"].state == PREPARING_REBALANCE


def test_in_a_stable_group_a_follower_rejoining_unchanged_gets_the_generation_and_the_leader_rebalances():
    t = table()
    a, b = stable_pair(t)
    step = t.join("g", req(member_id=b, client="b"), 10)
    assert step.reply == JoinResult(errors.NONE, 2, "range", a, b, ())
    assert t.groups["g"].state == STABLE
    assert t.join("g", req(member_id=a, client="a"), 11).reply is None
    assert t.groups["g"].state == PREPARING_REBALANCE


def test_a_follower_rejoining_with_changed_metadata_rebalances():
    t = table()
    a, b = stable_pair(t)
    assert t.join("g", req(member_id=b, client="b", protocols=[("range", b"v2")]), 10).reply is None
    assert t.groups["g"].state == PREPARING_REBALANCE


def test_the_last_member_leaving_lets_the_group_go_and_a_generation_minus_one_commit_is_then_allowed():
    t = table()
    a, b = stable_pair(t)
    assert t.leave("g", b, 10).reply == errors.NONE
    group = t.groups["g"]
    assert t.leave("g", a, 11).reply == errors.NONE
    assert group.state == EMPTY and group.generation == 3 and group.leader_id == ""
    assert "g" not in t.groups  # its offsets are in the store, which lists it from now on
    assert t.check_commit("g", "", -1, 12) == errors.NONE
    assert t.check_commit("g", a, 3, 12) == errors.ILLEGAL_GENERATION  # the client rejoins
    assert not t.groups


def test_a_commit_to_a_group_not_held_is_allowed_for_generation_minus_one_only():
    t = table()
    assert t.check_commit("g", "m", 3, 0) == errors.ILLEGAL_GENERATION
    assert t.check_commit("g", "", -1, 0) == errors.NONE
    assert not t.groups


def test_a_refused_first_join_leaves_nothing_held():
    t = table()
    for i in range(100):
        assert t.join(f"g{i}", req(ptype=""), 0).reply.error == errors.INCONSISTENT_GROUP_PROTOCOL
    assert not t.groups


def test_a_commit_without_generation_to_a_group_with_members_is_from_an_unknown_member():
    t = table()
    stable_pair(t)
    assert t.check_commit("g", "", -1, 5) == errors.UNKNOWN_MEMBER_ID


def test_a_commit_by_a_member_renews_its_session():
    t = table()
    a, b = stable_pair(t)
    assert t.check_commit("g", b, 2, 9_000) == errors.NONE
    t.heartbeat("g", a, 2, 9_000)
    t.tick("g", 3 + SESSION)
    assert set(t.groups["g"].members) == {a, b}


def test_a_member_leaving_while_its_join_waits_gets_unknown_member_for_it():
    t = table()
    a, b = stable_pair(t)
    t.join("g", req(member_id=b, client="b", protocols=[("range", b"v2")]), 10)
    step = t.leave("g", b, 11)
    assert step.answers.joins[b] == JoinResult(errors.UNKNOWN_MEMBER_ID, member_id=b)
    assert step.reply == errors.NONE


def test_leaving_a_preparing_group_may_complete_the_join_phase():
    t = table()
    a, b = stable_pair(t)
    t.join("g", req(member_id=a, client="a"), 10)
    step = t.leave("g", b, 11)
    assert step.answers.joins[a].generation == 3 and step.answers.joins[a].members == ((a, b"range-meta"),)


def test_the_initial_delay_gathers_members_of_a_new_group_into_one_generation():
    t = table(delay_ms=3_000)
    a = joined(t, client="a")
    assert t.groups["g"].join_deadline_ms == 3_000
    b = joined(t, now=2_000, client="b")
    assert not t.tick("g", 2_999)
    assert not t.tick("g", 3_000)  # a member came: one more delay
    answers = t.tick("g", 6_000).joins
    assert set(answers) == {a, b} and answers[a].generation == 1


def test_the_initial_delay_is_bounded_by_the_rebalance_timeout():
    t = table(delay_ms=3_000)
    now = 0
    joined(t, now=now, client="m", rebalance=7_000)
    while not (answers := t.tick("g", now)):
        joined(t, now=now, client="m", rebalance=7_000)  # a new member in every delay
        now += 1_000
    assert 6_000 <= now <= 10_000 and answers.joins  # not a delay per member for ever


def test_without_an_initial_delay_a_lone_first_member_gets_its_generation_at_once():
    t = table(delay_ms=0)
    step = t.join("g", req(), 5)
    assert t.next_deadline_ms("g") == 5
    assert t.tick("g", 5).joins[step.member_id].generation == 1


def test_describe_shows_members_metadata_and_assignments_only_when_stable():
    t = table()
    a, b = stable_pair(t)
    description = t.describe("g")
    assert (description.state, description.protocol_type, description.protocol) == (STABLE, "consumer", "range")
    assert [(m.member_id, m.client_id, m.metadata, m.assignment) for m in description.members] == [
        (a, "a", b"range-meta", b"A"), (b, "b", b"range-meta", b"B")]
    joined(t, now=10, client="c")
    description = t.describe("g")
    assert description.state == PREPARING_REBALANCE and description.protocol == ""
    assert {(m.metadata, m.assignment) for m in description.members} == {(b"", b"")}
    assert t.describe("nope").state == DEAD and t.describe("nope").members == ()


def test_clearing_the_table_answers_every_waiting_request_not_coordinator():
    t = table()
    a, b = stable_pair(t)
    t.join("g", req(member_id=a, client="a"), 10)
    z = t.join("g2", req(client="z"), 10).member_id
    answers = t.clear()
    assert answers["g"].joins[a].error == errors.NOT_COORDINATOR
    assert answers["g2"].joins[z].error == errors.NOT_COORDINATOR
    assert not t.groups
