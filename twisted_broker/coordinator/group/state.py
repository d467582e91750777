"""One consumer group's membership, as Kafka 2.1's GroupCoordinator runs it. Pure: the caller
feeds events with ``now_ms`` and delivers the answers they release; no clock, no I/O.

How this works. A group moves through five states:

======================  ===============================================================
state                   meaning
======================  ===============================================================
Empty                   no members (committed offsets are kept: they live in the store)
PreparingRebalance      members (re)join; the join phase ends when every member has
                        rejoined, or at the rebalance deadline (the largest rebalance
                        timeout among the members), which drops those that did not
CompletingRebalance     a new generation is chosen; members wait for the leader's SyncGroup
Stable                  every member has its assignment
Dead                    the group left this coordinator (every request: unknown member)
======================  ===============================================================

The rules, event by event (Kafka's error numbers):

========================  ================================================================
event                     rule
========================  ================================================================
join, new member          member id ``<client_id>-<uuid>``; the first member of a group is
                          its leader; a rebalance starts unless one is being prepared
join, known member        while preparing: its protocols are updated, it waits. While
                          completing: the same protocols get the current generation again,
                          others start a rebalance. Stable: the leader, or a member whose
                          protocols changed, starts a rebalance; others get the current
                          generation again
join errors               session timeout outside the group bounds: 26; a protocol type or
                          protocol set the group cannot share: 23; an unknown id: 25
join phase ends           members that did not rejoin leave; generation + 1; the protocol
                          every member supports that most members prefer; each waiting
                          member is answered, the leader with every member's metadata.
                          No member left: Empty (generation + 1 all the same)
sync                      unknown member 25; other generation 22; preparing 27; completing:
                          it waits, and the leader's assignments (missing members get none)
                          answer every waiting member and make the group Stable; Stable:
                          its assignment again
heartbeat                 unknown member 25; completing 27; other generation 22; preparing
                          27 (the session is renewed); Stable 0
leave                     unknown member 25; else the member goes (as a failed member)
session expiry            a member that neither waits for a join or sync answer nor was
                          heard from for its session timeout goes
a member goes             Stable or completing: a rebalance starts (waiting syncs get 27);
                          preparing: the join phase may now be complete
commit                    Dead 25; generation -1 to an Empty group: allowed (a consumer
                          that only stores offsets); completing 27; unknown member 25;
                          other generation 22; else allowed, the session renewed
========================  ================================================================

The first rebalance of an Empty group waits ``initial_rebalance_delay_ms`` before ending
the join phase, and again while new members keep arriving, up to the rebalance timeout
(Kafka's group.initial.rebalance.delay.ms): a group starting with many members settles in
one generation instead of one per member.

Departures from Kafka, both so a caller never holds an answer forever: a member removed
while a JoinGroup or SyncGroup of its own waits gets 25 for it (Kafka drops the callback);
a JoinGroup repeated while one waits gets the same answer (the caller answers both).
Kafka breaks a tie between equally preferred protocols by hash order; here the leader's
order of preference decides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from twisted_broker.coordinator.group.messages import (
    NO_ANSWERS, Answers, GroupConfig, JoinRequest, JoinResult, Step, SyncResult,
)
from twisted_broker.codec.kafka import errors

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    last_heard_ms: int
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        return next(metadata for name, metadata in self.protocols if name == protocol)

    @property
    def session_deadline_ms(self) -> int | None:
        """When the member expires, or None while it waits for an answer (Kafka keeps it)."""
        if self.awaiting_join or self.awaiting_sync:
            return None
        return self.last_heard_ms + self.session_timeout_ms


class Group:
    """One group's members and generation. ``new_member_id(client_id)`` makes member ids."""

    def __init__(self, group_id: str, *, config: GroupConfig, new_member_id: Callable[[str], str]) -> None:
        self.group_id = group_id
        self.config = config
        self._new_member_id = new_member_id
        self.state = EMPTY
        self.generation = 0
        self.protocol_type = ""
        self.protocol = ""
        self.leader_id = ""
        self.members: dict[str, Member] = {}  # in joining order: the next leader is the oldest
        self.join_deadline_ms: int | None = None
        # the initial delay's bookkeeping (Kafka's InitialDelayedJoin)
        self._initial_delay = False
        self._delay_ms = 0
        self._remaining_ms = 0
        self._new_member_added = False

    # -- events ------------------------------------------------------------------------------

    def join(self, request: JoinRequest, now_ms: int) -> Step:
        if not self.config.min_session_timeout_ms <= request.session_timeout_ms <= self.config.max_session_timeout_ms:
            return Step(JoinResult(errors.INVALID_SESSION_TIMEOUT, member_id=request.member_id))
        if self.state == DEAD:
            return Step(JoinResult(errors.UNKNOWN_MEMBER_ID, member_id=request.member_id))
        if not self._supports(request.protocol_type, [name for name, _ in request.protocols]):
            return Step(JoinResult(errors.INCONSISTENT_GROUP_PROTOCOL, member_id=request.member_id))
        if request.member_id and request.member_id not in self.members:
            return Step(JoinResult(errors.UNKNOWN_MEMBER_ID, member_id=request.member_id))
        if not request.member_id:
            member = Member(self._new_member_id(request.client_id), request.client_id, request.client_host,
                            request.session_timeout_ms, request.rebalance_timeout_ms, request.protocol_type,
                            tuple(request.protocols), last_heard_ms=now_ms, awaiting_join=True)
            if self.state == PREPARING_REBALANCE and self.generation == 0:
                self._new_member_added = True
            if not self.members:
                self.protocol_type = member.protocol_type
            self.members[member.member_id] = member
            self.leader_id = self.leader_id or member.member_id
            return Step(None, member.member_id, self._rebalance(now_ms))
        member = self.members[request.member_id]
        unchanged = tuple(request.protocols) == member.protocols
        if self.state == COMPLETING_REBALANCE and unchanged:
            return Step(self._join_result(member.member_id))
        if self.state == STABLE and unchanged and member.member_id != self.leader_id:
            return Step(self._join_result(member.member_id))
        # the leader rejoining a stable group asks for a new assignment (its topics changed)
        member.protocols = tuple(request.protocols)
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.awaiting_join = True
        return Step(None, member.member_id, self._rebalance(now_ms))

    def sync(self, member_id: str, generation: int, assignments: Mapping[str, bytes], now_ms: int) -> Step:
        member = self.members.get(member_id)
        if member is None:
            return Step(SyncResult(errors.UNKNOWN_MEMBER_ID))
        if generation != self.generation:
            return Step(SyncResult(errors.ILLEGAL_GENERATION))
        if self.state == PREPARING_REBALANCE:
            return Step(SyncResult(errors.REBALANCE_IN_PROGRESS))
        if self.state == STABLE:
            member.last_heard_ms = now_ms
            return Step(SyncResult(errors.NONE, member.assignment))
        member.awaiting_sync = True
        if member_id != self.leader_id:
            return Step(None, member_id)
        answers = {}
        for other in self.members.values():
            other.assignment = bytes(assignments.get(other.member_id, b""))
            if other.awaiting_sync:
                answers[other.member_id] = SyncResult(errors.NONE, other.assignment)
                other.awaiting_sync, other.last_heard_ms = False, now_ms
        self.state = STABLE
        return Step(None, member_id, Answers(syncs=answers))

    def heartbeat(self, member_id: str, generation: int, now_ms: int) -> int:
        member = self.members.get(member_id)
        if member is None:
            return errors.UNKNOWN_MEMBER_ID
        if self.state == COMPLETING_REBALANCE:
            return errors.REBALANCE_IN_PROGRESS
        if generation != self.generation:
            return errors.ILLEGAL_GENERATION
        member.last_heard_ms = now_ms
        return errors.REBALANCE_IN_PROGRESS if self.state == PREPARING_REBALANCE else errors.NONE

    def leave(self, member_id: str, now_ms: int) -> Step:
        member = self.members.get(member_id)
        if member is None:
            return Step(errors.UNKNOWN_MEMBER_ID)
        return Step(errors.NONE, member_id, self._member_gone(member, now_ms))

    def check_commit(self, member_id: str, generation: int, now_ms: int) -> int:
        """0 if a commit of offsets by ``member_id`` at ``generation`` may be stored now, else the
        error every partition of the commit gets."""
        if self.state == DEAD:
            return errors.UNKNOWN_MEMBER_ID
        if generation < 0 and self.state == EMPTY:
            return errors.NONE
        if self.state == COMPLETING_REBALANCE:
            return errors.REBALANCE_IN_PROGRESS
        member = self.members.get(member_id)
        if member is None:
            return errors.UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return errors.ILLEGAL_GENERATION
        member.last_heard_ms = now_ms
        return errors.NONE

    def tick(self, now_ms: int) -> Answers:
        """Apply what is due at ``now_ms`` (session expiries, the end of the join phase), in
        the order of their deadlines."""
        answers = NO_ANSWERS
        while (due := self._next_due()) is not None and due[0] <= now_ms:
            deadline, member = due
            if member is not None:
                answers += self._member_gone(member, now_ms)
            elif self._initial_delay and self._new_member_added and self._remaining_ms:
                self._new_member_added = False
                delay = min(self.config.initial_rebalance_delay_ms, self._remaining_ms)
                self._remaining_ms = max(self._remaining_ms - self._delay_ms, 0)
                self._delay_ms = delay
                self.join_deadline_ms = now_ms + delay
            else:
                answers += self._complete_join(now_ms)
        return answers

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` next has something to do (None: nothing is pending)."""
        due = self._next_due()
        return None if due is None else due[0]

    def dead(self) -> Answers:
        """The group leaves this coordinator: every waiting request gets NOT_COORDINATOR."""
        answers = Answers({m.member_id: JoinResult(errors.NOT_COORDINATOR, member_id=m.member_id)
                           for m in self.members.values() if m.awaiting_join},
                          {m.member_id: SyncResult(errors.NOT_COORDINATOR)
                           for m in self.members.values() if m.awaiting_sync})
        self.members.clear()
        self.state, self.leader_id, self.join_deadline_ms = DEAD, "", None
        return answers

    # -- the rules' parts ----------------------------------------------------------------------

    def _supports(self, protocol_type: str, names: Sequence[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and any(name in self._candidates() for name in names)

    def _candidates(self) -> list[str]:
        """Protocols every member supports, in the leader's order of preference."""
        leader = self.members.get(self.leader_id) or next(iter(self.members.values()))
        shared = set(leader.protocol_names)
        for member in self.members.values():
            shared &= set(member.protocol_names)
        return [name for name in leader.protocol_names if name in shared]

    def _select_protocol(self) -> str:
        candidates = self._candidates()
        votes = dict.fromkeys(candidates, 0)
        for member in self.members.values():
            votes[next(name for name in member.protocol_names if name in votes)] += 1
        return max(candidates, key=lambda name: votes[name])  # max keeps the first of a tie

    def _rebalance(self, now_ms: int) -> Answers:
        """Start a rebalance if none is being prepared; end the join phase if it is complete."""
        answers = self._maybe_prepare_rebalance(now_ms)
        if self.state == PREPARING_REBALANCE and not self._initial_delay:
            answers += self._try_complete_join(now_ms)
        return answers

    def _maybe_prepare_rebalance(self, now_ms: int) -> Answers:
        if self.state not in (EMPTY, STABLE, COMPLETING_REBALANCE):
            return NO_ANSWERS
        answers = {}
        if self.state == COMPLETING_REBALANCE:
            for member in self.members.values():
                member.assignment = b""
                if member.awaiting_sync:
                    answers[member.member_id] = SyncResult(errors.REBALANCE_IN_PROGRESS)
                    member.awaiting_sync, member.last_heard_ms = False, now_ms
        rebalance_timeout_ms = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        self._initial_delay = self.state == EMPTY
        if self._initial_delay:
            self._delay_ms = self.config.initial_rebalance_delay_ms
            self._remaining_ms = max(rebalance_timeout_ms - self._delay_ms, 0)
            self.join_deadline_ms = now_ms + self._delay_ms
        else:
            self.join_deadline_ms = now_ms + rebalance_timeout_ms
        self.state = PREPARING_REBALANCE
        return Answers(syncs=answers)

    def _try_complete_join(self, now_ms: int) -> Answers:
        if all(m.awaiting_join for m in self.members.values()):
            return self._complete_join(now_ms)
        return NO_ANSWERS

    def _complete_join(self, now_ms: int) -> Answers:
        for member in [m for m in self.members.values() if not m.awaiting_join]:
            self._remove(member)
        self.generation += 1
        self.join_deadline_ms, self._initial_delay, self._new_member_added = None, False, False
        if not self.members:
            self.state, self.protocol = EMPTY, ""
            return NO_ANSWERS
        self.state, self.protocol = COMPLETING_REBALANCE, self._select_protocol()
        answers = {}
        for member in self.members.values():
            answers[member.member_id] = self._join_result(member.member_id)
            member.awaiting_join, member.last_heard_ms = False, now_ms
        return Answers(joins=answers)

    def _join_result(self, member_id: str) -> JoinResult:
        members = ()
        if member_id == self.leader_id:
            members = tuple((m.member_id, m.metadata(self.protocol)) for m in self.members.values())
        return JoinResult(errors.NONE, self.generation, self.protocol, self.leader_id, member_id, members)

    def _member_gone(self, member: Member, now_ms: int) -> Answers:
        answers = Answers({member.member_id: JoinResult(errors.UNKNOWN_MEMBER_ID, member_id=member.member_id)}
                          if member.awaiting_join else {},
                          {member.member_id: SyncResult(errors.UNKNOWN_MEMBER_ID)} if member.awaiting_sync else {})
        self._remove(member)
        if self.state in (STABLE, COMPLETING_REBALANCE, PREPARING_REBALANCE):
            return answers + self._rebalance(now_ms)
        return answers

    def _remove(self, member: Member) -> None:
        del self.members[member.member_id]
        if member.member_id == self.leader_id:
            self.leader_id = next(iter(self.members), "")

    def _next_due(self) -> tuple[int, Member | None] | None:
        """The earliest deadline: (when, the member whose session ends) or (when, None) for the
        end of the join phase."""
        due: tuple[int, Member | None] | None = None
        if self.join_deadline_ms is not None:
            due = (self.join_deadline_ms, None)
        for member in self.members.values():
            deadline = member.session_deadline_ms
            if deadline is not None and (due is None or deadline < due[0]):
                due = (deadline, member)
        return due
