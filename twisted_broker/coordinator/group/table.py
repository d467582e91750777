"""The groups one coordinator holds, and the rules for a group it does not hold yet (Kafka
2.1): a JoinGroup without a member id creates the group; a commit with generation -1 creates
it Empty (a consumer that assigns its own partitions and only stores offsets); everything
else about an unknown group is an unknown member (25), or an illegal generation (22) for a
commit. Group ids must be usable as a ZooKeeper node name (offsets are stored under
``/consumers/<group>``): others get INVALID_GROUP_ID (24). Pure: no clock, no I/O.

A group that becomes Empty is let go at once: its offsets are in the store, which lists
and describes it from then on (Kafka keeps it until its offsets expire). So short-lived
groups (console consumers with random ids) and JoinGroups refused for a group nobody held
leave nothing behind in memory. A member of its last generation then hears 22 instead of 25
from a commit: both make a client rejoin.
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Callable, Mapping

from twisted_broker.coordinator.group.messages import (
    NO_ANSWERS, Answers, GroupConfig, GroupDescription, JoinRequest, JoinResult, MemberDescription, Step,
    SyncResult,
)
from twisted_broker.coordinator.group.state import DEAD, EMPTY, STABLE, Group
from twisted_broker.codec.kafka import errors
from twisted_broker.registry.paths import is_valid_node_name


def valid_group_id(group_id: str) -> bool:
    return bool(group_id) and is_valid_node_name(group_id)


class GroupTable:
    """Groups by id. ``new_uuid`` makes the uuid part of member ids (a parameter for tests)."""

    def __init__(self, *, config: GroupConfig = GroupConfig(),
                 new_uuid: Callable[[], uuid_module.UUID] = uuid_module.uuid4) -> None:
        self.config = config
        self._new_uuid = new_uuid
        self.groups: dict[str, Group] = {}

    def _new_group(self, group_id: str) -> Group:
        group = self.groups[group_id] = Group(group_id, config=self.config, new_member_id=self._member_id)
        return group

    def _member_id(self, client_id: str) -> str:
        return f"{client_id}-{self._new_uuid()}"

    def join(self, group_id: str, request: JoinRequest, now_ms: int) -> Step:
        if not valid_group_id(group_id):
            return Step(JoinResult(errors.INVALID_GROUP_ID, member_id=request.member_id))
        group = self.groups.get(group_id)
        if group is None:
            if request.member_id:
                return Step(JoinResult(errors.UNKNOWN_MEMBER_ID, member_id=request.member_id))
            group = self._new_group(group_id)
        return self._settled(group, group.join(request, now_ms))

    def sync(self, group_id: str, member_id: str, generation: int, assignments: Mapping[str, bytes],
             now_ms: int) -> Step:
        if not valid_group_id(group_id):
            return Step(SyncResult(errors.INVALID_GROUP_ID))
        group = self.groups.get(group_id)
        if group is None:
            return Step(SyncResult(errors.UNKNOWN_MEMBER_ID))
        return group.sync(member_id, generation, assignments, now_ms)

    def heartbeat(self, group_id: str, member_id: str, generation: int, now_ms: int) -> int:
        if not valid_group_id(group_id):
            return errors.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return errors.UNKNOWN_MEMBER_ID
        return group.heartbeat(member_id, generation, now_ms)

    def leave(self, group_id: str, member_id: str, now_ms: int) -> Step:
        if not valid_group_id(group_id):
            return Step(errors.INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        if group is None:
            return Step(errors.UNKNOWN_MEMBER_ID)
        return self._settled(group, group.leave(member_id, now_ms))

    def check_commit(self, group_id: str, member_id: str, generation: int, now_ms: int) -> int:
        if not valid_group_id(group_id):
            return errors.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0:  # a member of a generation this coordinator never made
                return errors.ILLEGAL_GENERATION
            group = self._new_group(group_id)
        return self._settled(group, group.check_commit(member_id, generation, now_ms))

    def _settled(self, group: Group, result):
        """``result``, after letting ``group`` go if it is Empty."""
        if group.state == EMPTY and self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        return result

    def tick(self, group_id: str, now_ms: int) -> Answers:
        group = self.groups.get(group_id)
        return NO_ANSWERS if group is None else self._settled(group, group.tick(now_ms))

    def next_deadline_ms(self, group_id: str) -> int | None:
        group = self.groups.get(group_id)
        return None if group is None else group.next_deadline_ms()

    def describe(self, group_id: str) -> GroupDescription:
        """The group's state and members; a group this coordinator does not hold is Dead."""
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, errors.NONE, DEAD)
        stable = group.state == STABLE
        members = tuple(MemberDescription(m.member_id, m.client_id, m.client_host,
                                          m.metadata(group.protocol) if stable else b"",
                                          m.assignment if stable else b"")
                        for m in group.members.values())
        return GroupDescription(group_id, errors.NONE, group.state, group.protocol_type,
                                group.protocol if stable else "", members)

    def listing(self) -> dict[str, str]:
        """``{group id: protocol type}`` of every group held."""
        return {group_id: group.protocol_type for group_id, group in self.groups.items()}

    def clear(self) -> dict[str, Answers]:
        """Let every group go (this broker is no longer the coordinator): the answers to
        every waiting JoinGroup and SyncGroup, NOT_COORDINATOR, by group."""
        answers = {group_id: group.dead() for group_id, group in self.groups.items()}
        self.groups.clear()
        return {group_id: a for group_id, a in answers.items() if a}
