"""Replication's ZooKeeper paths and JSON values (docs/replication.md §2). Pure: no I/O.

0.7's paths (registry/paths.py) keep their meaning; everything here lives under
``/replication``. Every value carries ``"version": 1`` so a later layout can be told apart;
a decoder refuses a value it cannot read with ValueError naming the path's kind.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

ROOT = "/replication"
CONTROLLER = f"{ROOT}/controller"
CONTROLLER_EPOCH = f"{ROOT}/controller_epoch"
TOPICS = f"{ROOT}/topics"
ADMIN = f"{ROOT}/admin"
REASSIGN_PARTITIONS = f"{ADMIN}/reassign_partitions"
PREFERRED_REPLICA_ELECTION = f"{ADMIN}/preferred_replica_election"
SHUTDOWN = f"{ADMIN}/shutdown"
# <id>: ephemeral, the partitions whose log failed on that broker (a failed fsync, a full
# disk): the controller moves their leadership away and keeps the broker out of their ISR
# while the node lists them (Kafka's log-dir failure handling, KIP-112). Value: a partition
# list (encode_partition_list without replicas).
OFFLINE_REPLICAS = f"{ROOT}/offline_replicas"
# <id>: ephemeral, each replica's recovered (last leader epoch, log end) on that broker, for
# the controller's election when every ISR member of a partition restarted (ReplicaEnds).
REPLICA_ENDS = f"{ROOT}/replica_ends"
LISTENERS = f"{ROOT}/listeners"  # <id>: each live broker's modern listener (docs/kafka-protocol.md §4)

NO_LEADER = -1  # in ZooKeeper, as Kafka writes it; the CLI's JSON says null


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def shutdown_path(broker_id: int) -> str:
    return f"{SHUTDOWN}/{broker_id}"


def offline_replicas_path(broker_id: int) -> str:
    return f"{OFFLINE_REPLICAS}/{broker_id}"


def replica_ends_path(broker_id: int) -> str:
    return f"{REPLICA_ENDS}/{broker_id}"


def _load(value: bytes, what: str) -> dict[str, Any]:
    try:
        data = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"{what} {value[:80]!r} is not JSON") from None
    if not isinstance(data, dict) or data.get("version") != 1:
        raise ValueError(f"{what} {value[:80]!r} is not a version 1 object")
    return data


def _broker_ids(raw: Any, what: str) -> tuple[int, ...]:
    if not isinstance(raw, list) or not all(type(b) is int and b >= 0 for b in raw):
        raise ValueError(f"{what}: {raw!r} is not a list of broker ids")
    if len(set(raw)) != len(raw):
        raise ValueError(f"{what}: {raw!r} names a broker twice")
    return tuple(raw)


def _dump(data: Mapping[str, Any]) -> bytes:
    return json.dumps({"version": 1, **data}, separators=(",", ":")).encode()


@dataclass(frozen=True)
class ControllerInfo:
    """``/replication/controller``: who controls, and under which controller epoch."""

    broker_id: int
    epoch: int

    def encode(self) -> bytes:
        return _dump({"brokerid": self.broker_id, "epoch": self.epoch})

    @classmethod
    def decode(cls, value: bytes) -> ControllerInfo:
        data = _load(value, "controller")
        broker_id, epoch = data.get("brokerid"), data.get("epoch")
        if type(broker_id) is not int or type(epoch) is not int:
            raise ValueError(f"controller {value[:80]!r} lacks brokerid or epoch")
        return cls(broker_id, epoch)


@dataclass(frozen=True)
class TopicAssignment:
    """``/replication/topics/<t>``: each partition's replicas, the preferred leader first."""

    replicas: Mapping[int, tuple[int, ...]]

    def __post_init__(self) -> None:
        if sorted(self.replicas) != list(range(len(self.replicas))) or not self.replicas:
            raise ValueError(f"partitions {sorted(self.replicas)} are not numbered 0..N-1")
        for partition, replicas in self.replicas.items():
            if not replicas:
                raise ValueError(f"partition {partition} has no replica")
        object.__setattr__(self, "replicas", MappingProxyType(dict(self.replicas)))

    @property
    def partition_count(self) -> int:
        return len(self.replicas)

    def encode(self) -> bytes:
        return _dump({"partitions": {str(p): list(r) for p, r in sorted(self.replicas.items())}})

    @classmethod
    def decode(cls, value: bytes) -> TopicAssignment:
        data = _load(value, "topic assignment")
        raw = data.get("partitions")
        if not isinstance(raw, dict):
            raise ValueError(f"topic assignment {value[:80]!r} has no partitions object")
        try:
            replicas = {int(p): _broker_ids(r, f"partition {p}") for p, r in raw.items()}
        except ValueError as exc:
            raise ValueError(f"topic assignment: {exc}") from None
        return cls(replicas)


@dataclass(frozen=True)
class PartitionState:
    """``.../partitions/<p>/state``: leader (NO_LEADER when offline), its epoch, the ISR, the
    controller epoch of the last controller that wrote it, and the leader's session: the
    ``creatorId`` of the leader's ``/brokers/ids`` registration when it was elected. A broker
    restarted since (a new creatorId) lost what it had not flushed, so it must not go on
    leading at that epoch: the controller elects again (docs/replication.md §3).
    ``isr_sessions``: each ISR member's creatorId when it joined the ISR (sorted pairs), so
    that a member whose process restarted since is told from one whose session was only
    renewed (same process, same page cache)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    leader_session: str = ""
    isr_sessions: tuple[tuple[int, str], ...] = ()

    @property
    def online(self) -> bool:
        return self.leader != NO_LEADER

    def encode(self) -> bytes:
        return _dump({"leader": self.leader, "leader_epoch": self.leader_epoch, "isr": list(self.isr),
                      "controller_epoch": self.controller_epoch, "leader_session": self.leader_session,
                      **({"isr_sessions": {str(b): s for b, s in self.isr_sessions}} if self.isr_sessions else {})})

    @classmethod
    def decode(cls, value: bytes) -> PartitionState:
        data = _load(value, "partition state")
        leader, epoch, ce = data.get("leader"), data.get("leader_epoch"), data.get("controller_epoch")
        if type(leader) is not int or type(epoch) is not int or type(ce) is not int:
            raise ValueError(f"partition state {value[:80]!r} lacks leader, leader_epoch or controller_epoch")
        session = data.get("leader_session", "")
        if not isinstance(session, str):
            raise ValueError(f"partition state {value[:80]!r}: leader_session is not a string")
        sessions = data.get("isr_sessions", {})
        if not isinstance(sessions, dict) or not all(k.isdigit() and isinstance(v, str) for k, v in sessions.items()):
            raise ValueError(f"partition state {value[:80]!r}: isr_sessions is not a map of broker ids to strings")
        return cls(leader, epoch, _broker_ids(data.get("isr"), "partition state isr"), ce, session,
                   tuple(sorted((int(k), v) for k, v in sessions.items())))


@dataclass(frozen=True)
class ReplicaEnds:
    """``/replication/replica_ends/<id>``: the broker's registration (its ``creatorId``) and,
    per replica it holds, ``(last leader epoch, log end offset)`` as recovered at its start
    (docs/replication.md §3, "Every ISR member restarted"). A replica not listed: none held
    (an empty log, epoch -1)."""

    session: str
    ends: Mapping[tuple[str, int], tuple[int, int]]

    def end_of(self, topic: str, partition: int) -> tuple[int, int]:
        return self.ends.get((topic, partition), (-1, 0))

    def encode(self) -> bytes:
        topics: dict[str, dict[str, list[int]]] = {}
        for (topic, partition), (epoch, end) in sorted(self.ends.items()):
            topics.setdefault(topic, {})[str(partition)] = [epoch, end]
        return _dump({"session": self.session, "topics": topics})

    @classmethod
    def decode(cls, value: bytes) -> ReplicaEnds:
        data = _load(value, "replica ends")
        session, topics = data.get("session"), data.get("topics")
        if not isinstance(session, str) or not isinstance(topics, dict):
            raise ValueError(f"replica ends {value[:80]!r} lack a session or topics")
        ends = {}
        for topic, partitions in topics.items():
            pairs = partitions.items() if isinstance(partitions, dict) else ()
            if not pairs or not all(p.isdigit() and isinstance(pair, list) and len(pair) == 2
                                    and all(type(n) is int for n in pair) for p, pair in pairs):
                raise ValueError(f"replica ends of {topic!r}: {partitions!r} is not a map of partitions to [epoch, end]")
            ends.update(((topic, int(p)), (pair[0], pair[1])) for p, pair in pairs)
        return cls(session, ends)


@dataclass(frozen=True)
class PartitionMove:
    topic: str
    partition: int
    replicas: tuple[int, ...] = ()


def encode_partition_list(moves: Sequence[PartitionMove], *, with_replicas: bool) -> bytes:
    """The admin requests' value: reassignment (with replicas) or preferred election."""
    items = [{"topic": m.topic, "partition": m.partition, **({"replicas": list(m.replicas)} if with_replicas else {})}
             for m in moves]
    return _dump({"partitions": items})


def decode_partition_list(value: bytes, *, with_replicas: bool) -> list[PartitionMove]:
    data = _load(value, "admin request")
    items = data.get("partitions")
    if not isinstance(items, list):
        raise ValueError("admin request has no partitions list")
    moves = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("topic"), str) or type(item.get("partition")) is not int:
            raise ValueError(f"admin request item {item!r} lacks topic or partition")
        replicas = _broker_ids(item.get("replicas"), "reassignment") if with_replicas else ()
        if with_replicas and not replicas:
            raise ValueError(f"reassignment of {item['topic']}-{item['partition']} names no replica")
        moves.append(PartitionMove(item["topic"], item["partition"], replicas))
    return moves
