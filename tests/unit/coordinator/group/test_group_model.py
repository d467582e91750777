"""Model-based test of a group: clients join, sync, heartbeat, commit and leave in any order
while time passes; every waiting request is answered exactly once, and the answers agree."""

import itertools
import uuid

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from twisted_broker.coordinator.group.messages import GroupConfig, JoinRequest, JoinResult, SyncResult
from twisted_broker.coordinator.group.state import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE
from twisted_broker.coordinator.group.table import GroupTable
from twisted_broker.codec.kafka import errors

CLIENTS = ("a", "b", "c")
PROTOCOLS = {  # what each client may offer: each variant shares "range" with every other
    "a": [(("range", b"1"),), (("roundrobin", b"1"), ("range", b"2"))],
    "b": [(("range", b"1"),), (("range", b"3"), ("roundrobin", b"2"))],
    "c": [(("roundrobin", b"4"), ("range", b"5"))],
}
REBALANCE_TIMEOUT_MS = {"a": 3_000, "b": 20_000, "c": 8_000}  # shorter and longer than sessions (6 s)


class GroupModel(RuleBasedStateMachine):
    @initialize(delay_ms=st.sampled_from([0, 2_000]))
    def start(self, delay_ms):
        counter = itertools.count()
        self.table = GroupTable(config=GroupConfig(min_session_timeout_ms=1_000, initial_rebalance_delay_ms=delay_ms),
                                new_uuid=lambda: uuid.UUID(int=next(counter)))
        self.now = 0
        self.member = dict.fromkeys(CLIENTS, "")
        self.next_step = dict.fromkeys(CLIENTS, "join")  # what a well-behaved client does next
        self.generation = dict.fromkeys(CLIENTS, -1)
        self.waiting_joins: set[str] = set()
        self.waiting_syncs: set[str] = set()
        self.generations: dict[int, tuple[str, str]] = {}  # generation -> (leader, protocol)
        self.members_of: dict[int, tuple[str, ...]] = {}  # from the leader's answer
        self.sent_assignments: dict[int, dict[str, bytes]] = {}
        self.highest_generation = 0

    # -- answers -------------------------------------------------------------------------------

    def deliver(self, answers):
        for member_id, result in answers.joins.items():
            assert member_id in self.waiting_joins, f"answer to a join nobody waits for: {member_id}"
            self.waiting_joins.discard(member_id)
            self.on_join(member_id, result)
        for member_id, result in answers.syncs.items():
            assert member_id in self.waiting_syncs, f"answer to a sync nobody waits for: {member_id}"
            self.waiting_syncs.discard(member_id)
            self.on_sync(member_id, result)

    def client_of(self, member_id):
        return member_id.split("-", 1)[0]

    def on_join(self, member_id, result: JoinResult):
        client = self.client_of(member_id)
        if result.error == errors.UNKNOWN_MEMBER_ID:
            if self.member[client] == member_id:
                self.member[client] = ""
            return
        assert result.error == errors.NONE, result
        assert result.member_id == member_id
        known = self.generations.setdefault(result.generation, (result.leader_id, result.protocol))
        assert known == (result.leader_id, result.protocol), "two leaders or protocols in one generation"
        if member_id == result.leader_id:
            self.members_of[result.generation] = tuple(m for m, _ in result.members)
            for m, metadata in result.members:  # each member's metadata for the chosen protocol
                assert metadata in {md for offer in PROTOCOLS[self.client_of(m)] for name, md in offer
                                    if name == result.protocol}
        else:
            assert result.members == ()
        self.generation[client] = result.generation
        self.next_step[client] = "sync"

    def on_sync(self, member_id, result: SyncResult):
        self.next_step[self.client_of(member_id)] = "heartbeat" if result.error == errors.NONE else "join"
        if result.error != errors.NONE:
            assert result.error in (errors.REBALANCE_IN_PROGRESS, errors.UNKNOWN_MEMBER_ID, errors.NOT_COORDINATOR)
            return
        generation = self.generation[self.client_of(member_id)]
        assert result.assignment == self.sent_assignments[generation].get(member_id, b"")

    def on_error(self, client, error):
        if error == errors.UNKNOWN_MEMBER_ID:
            self.member[client] = ""
        if error in (errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.REBALANCE_IN_PROGRESS):
            self.next_step[client] = "join"

    # -- rules ---------------------------------------------------------------------------------

    @rule(client=st.sampled_from(CLIENTS), variant=st.integers(0, 1))
    def join(self, client, variant):
        offers = PROTOCOLS[client]
        request = JoinRequest(self.member[client], client, "h", 6_000, REBALANCE_TIMEOUT_MS[client], "consumer", offers[variant % len(offers)])
        step = self.table.join("g", request, self.now)
        if step.reply is not None:
            assert step.reply.error in (errors.NONE, errors.UNKNOWN_MEMBER_ID), step.reply
            self.on_join(step.member_id or request.member_id, step.reply) if step.reply.error == errors.NONE \
                else self.on_error(client, step.reply.error)
        else:
            self.member[client] = step.member_id
            self.waiting_joins.add(step.member_id)
        self.deliver(step.answers)

    @precondition(lambda self: any(self.member.values()))
    @rule(client=st.sampled_from(CLIENTS))
    def sync(self, client):
        member_id, generation = self.member[client], self.generation[client]
        if not member_id:
            return
        assignments = {}
        if self.generations.get(generation, ("",))[0] == member_id:
            assignments = {m: f"{m}@{generation}".encode() for m in self.members_of[generation]}
            self.sent_assignments.setdefault(generation, assignments)
        step = self.table.sync("g", member_id, generation, assignments, self.now)
        if step.reply is None:
            self.waiting_syncs.add(member_id)
        else:
            self.on_error(client, step.reply.error)
            if step.reply.error == errors.NONE:
                self.on_sync(member_id, step.reply)
        self.deliver(step.answers)

    @rule(client=st.sampled_from(CLIENTS), variant=st.integers(0, 1))
    def proceed(self, client, variant):
        """What a client does next (join, sync, heartbeat), unless it waits for an answer."""
        if self.member[client] in self.waiting_joins | self.waiting_syncs:
            return
        {"join": lambda: self.join(client, variant), "sync": lambda: self.sync(client),
         "heartbeat": lambda: self.heartbeat(client)}[self.next_step[client]]()

    @rule(client=st.sampled_from(CLIENTS))
    def heartbeat(self, client):
        if self.member[client]:
            self.on_error(client, self.table.heartbeat("g", self.member[client], self.generation[client], self.now))

    @rule(client=st.sampled_from(CLIENTS))
    def commit(self, client):
        error = self.table.check_commit("g", self.member[client], self.generation[client], self.now)
        assert error in (errors.NONE, errors.UNKNOWN_MEMBER_ID, errors.ILLEGAL_GENERATION, errors.REBALANCE_IN_PROGRESS)
        self.on_error(client, error)

    @rule(client=st.sampled_from(CLIENTS))
    def leave(self, client):
        if self.member[client]:
            step = self.table.leave("g", self.member[client], self.now)
            self.member[client] = ""
            self.deliver(step.answers)

    @rule(ms=st.sampled_from([1, 500, 2_000, 5_999, 6_000, 20_000]))
    def advance(self, ms):
        self.now += ms
        self.deliver(self.table.tick("g", self.now))

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def the_group_agrees_with_its_waiting_requests(self):
        group = self.table.groups.get("g")
        if group is None:  # let go once Empty: the next group of that name starts at generation 0
            assert not self.waiting_joins and not self.waiting_syncs
            self.generations.clear()
            self.members_of.clear()
            self.sent_assignments.clear()
            self.highest_generation = 0
            return
        assert {m for m, member in group.members.items() if member.awaiting_join} == self.waiting_joins
        assert {m for m, member in group.members.items() if member.awaiting_sync} == self.waiting_syncs
        assert group.generation >= self.highest_generation
        self.highest_generation = group.generation
        if group.state == EMPTY:
            assert not group.members and not group.leader_id
        if group.members:
            assert group.leader_id in group.members
        if group.state in (STABLE, COMPLETING_REBALANCE):
            assert group.members and group.join_deadline_ms is None
            for member in group.members.values():
                assert group.protocol in member.protocol_names
        if group.state == STABLE:
            assert not self.waiting_joins and not self.waiting_syncs
        if group.state == PREPARING_REBALANCE:
            assert group.join_deadline_ms is not None and not self.waiting_syncs

    def teardown(self):
        if not hasattr(self, "table"):
            return
        for _ in range(6):  # with nobody heard from, every member expires and every request is answered
            self.now += 100_000
            self.deliver(self.table.tick("g", self.now))
        assert not self.waiting_joins and not self.waiting_syncs
        assert "g" not in self.table.groups or self.table.groups["g"].state == EMPTY


GroupModel.TestCase.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)
test_group_model = GroupModel.TestCase
