"""What goes in and out of a group's state machine (state.py) and the coordinator: plain values,
errors as Kafka's error codes (codec/kafka/errors.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class GroupConfig:
    """Kafka's group.* broker settings (Kafka 2.1 defaults)."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 300_000
    initial_rebalance_delay_ms: int = 3_000


@dataclass(frozen=True)
class JoinRequest:
    member_id: str  # "" for a member joining for the first time
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int  # JoinGroup v0 has none: pass the session timeout
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (protocol name, member metadata), preferred first


@dataclass(frozen=True)
class JoinResult:
    error: int
    generation: int = -1
    protocol: str = ""
    leader_id: str = ""
    member_id: str = ""
    members: tuple[tuple[str, bytes], ...] = ()  # (member id, metadata): only in the leader's answer


@dataclass(frozen=True)
class SyncResult:
    error: int
    assignment: bytes = b""


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class Answers:
    """Answers released by an event to JoinGroup and SyncGroup requests waiting, by member id."""

    joins: Mapping[str, JoinResult] = field(default_factory=dict)
    syncs: Mapping[str, SyncResult] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "joins", _frozen(self.joins))
        object.__setattr__(self, "syncs", _frozen(self.syncs))

    def __bool__(self) -> bool:
        return bool(self.joins or self.syncs)

    def __add__(self, other: Answers) -> Answers:
        return Answers({**self.joins, **other.joins}, {**self.syncs, **other.syncs})


NO_ANSWERS = Answers()


@dataclass(frozen=True)
class Step:
    """What an event did: ``reply`` answers the caller now (an error code, a JoinResult or a
    SyncResult); None means the caller waits for its answer under ``member_id`` in this or
    a later event's ``answers``."""

    reply: JoinResult | SyncResult | int | None
    member_id: str = ""
    answers: Answers = NO_ANSWERS


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    client_id: str
    client_host: str
    metadata: bytes  # for the group's protocol; empty unless the group is Stable (as Kafka)
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    """DescribeGroups' answer for one group; an unknown group is Dead with no members."""

    group_id: str
    error: int
    state: str
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[MemberDescription, ...] = ()


@dataclass(frozen=True)
class OffsetCommit:
    """One partition of an OffsetCommit: ``partition`` is the modern partition number."""

    topic: str
    partition: int
    offset: int
    metadata: str = ""


@dataclass(frozen=True)
class FetchedOffset:
    offset: int  # -1: nothing committed
    metadata: str = ""
    error: int = 0


@dataclass(frozen=True)
class OffsetFetchResult:
    """OffsetFetch's answer: ``error`` for the whole request (v2+ has a field for it; earlier
    versions put it on every partition), else each partition's offset."""

    error: int
    offsets: Mapping[tuple[str, int], FetchedOffset] = field(default_factory=dict)


@dataclass(frozen=True)
class ListGroupsResult:
    error: int
    groups: tuple[tuple[str, str], ...] = ()  # (group id, protocol type)
