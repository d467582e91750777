"""Blocking questions to the brokers' modern listeners (docs/kafka-protocol.md) for the groups
tool and the console: each partition's modern end and a group's live members.

A modern group's committed offsets are modern offsets (a stored entry's first offset plus the
record's index in it), so its lag is ``modern end - committed``, the figure Kafka's own
clients compute: the end is ListOffsets ``latest`` from the partition's leader, which Metadata
names. 0.7's Offsets(-1) answers the byte end of the log instead, which lies past the modern
end by the last entry's size less its record count, so it would show a caught-up modern group
as lagging. Members live only in the coordinator's memory: FindCoordinator, then
DescribeGroups there, with the "consumer" protocol's assignments decoded.

Requests are codec/kafka's codecs on plain sockets, one at a time per connection, one
connection per broker kept until ``close``. A broker that is down or answers with an error
leaves its partitions' ends unknown (None); nothing here retries.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from twisted_broker.client.connection import Address
from twisted_broker.codec.kafka import api_keys
from twisted_broker.codec.kafka.consumer_protocol import assigned_partitions
from twisted_broker.codec.kafka.errors import NONE as NO_ERROR
from twisted_broker.codec.kafka.log_schemas import LATEST_TIMESTAMP
from twisted_broker.codec.kafka.primitives import Malformed, Truncated
from twisted_broker.codec.kafka.protocol import decode_response, encode_request

CLIENT_ID = "twisted-broker-lookup"
METADATA_VERSION = 4  # the first with allow_auto_topic_creation: looking must not create topics
LIST_OFFSETS_VERSION = 1
_SIZE = struct.Struct(">i")
_ERRORS = (OSError, Truncated, Malformed)  # OSError covers ConnectionError and socket.timeout


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    client_id: str
    client_host: str
    assignment: dict[str, list[int]]  # topic -> modern partitions; empty unless the group is Stable


@dataclass(frozen=True)
class GroupMembers:
    """A group as its coordinator describes it: Kafka's state name and the live members."""

    state: str
    members: tuple[GroupMember, ...] = ()

    def owners(self, topic: str) -> dict[int, str]:
        """``{modern partition: member id}`` of ``topic``'s assigned partitions."""
        return {partition: member.member_id for member in self.members
                for partition in member.assignment.get(topic, ())}


class ModernLookup:
    """Lookups through the listeners at ``bootstrap`` (any live broker's answers Metadata and
    FindCoordinator). Blocking; one thread at a time; ``timeout_s`` per connect and read."""

    def __init__(self, bootstrap: Sequence[Address], *, timeout_s: float = 5.0) -> None:
        self._bootstrap = list(bootstrap)
        self._timeout_s = timeout_s
        self._sockets: dict[Address, socket.socket] = {}
        self._correlation_id = 0

    @property
    def has_listeners(self) -> bool:
        return bool(self._bootstrap)

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()

    def __enter__(self) -> "ModernLookup":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- questions -------------------------------------------------------------------------------

    def latest(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        """The modern end (ListOffsets latest: the last record's offset + 1) of each
        ``(topic, modern partition)``; None where it cannot be known (no leader, a broker down,
        an error answered)."""
        wanted = sorted(set(partitions))
        ends: dict[tuple[str, int], int | None] = dict.fromkeys(wanted)
        if not wanted:
            return ends
        metadata = self._any_bootstrap(api_keys.METADATA, METADATA_VERSION, {
            "topics": [{"name": topic} for topic in sorted({topic for topic, _ in wanted})],
            "allow_auto_topic_creation": False})
        if metadata is None:
            return ends
        brokers = {b["node_id"]: (b["host"], b["port"]) for b in metadata["brokers"]}
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for topic in metadata["topics"]:
            for partition in topic["partitions"]:
                key = (topic["name"], partition["partition_index"])
                if key in ends and partition["error_code"] == NO_ERROR and partition["leader_id"] in brokers:
                    by_leader.setdefault(partition["leader_id"], []).append(key)
        for leader, keys in sorted(by_leader.items()):
            topics: dict[str, list[int]] = {}
            for topic, partition in keys:
                topics.setdefault(topic, []).append(partition)
            answer = self._request(brokers[leader], api_keys.LIST_OFFSETS, LIST_OFFSETS_VERSION, {
                "replica_id": -1,
                "topics": [{"name": topic, "partitions": [{"partition_index": p, "timestamp": LATEST_TIMESTAMP}
                                                          for p in found]} for topic, found in topics.items()]})
            for topic in answer["topics"] if answer is not None else ():
                for partition in topic["partitions"]:
                    key = (topic["name"], partition["partition_index"])
                    if key in ends and partition["error_code"] == NO_ERROR:
                        ends[key] = partition["offset"]
        return ends

    def members(self, group: str) -> GroupMembers | None:
        """The group's state and members from its coordinator; None if no broker answers."""
        found = self._any_bootstrap(api_keys.FIND_COORDINATOR, 0, {"key": group})
        if found is None or found["error_code"] != NO_ERROR:
            return None
        answer = self._request((found["host"], found["port"]), api_keys.DESCRIBE_GROUPS, 0, {"groups": [group]})
        if answer is None or not answer["groups"] or answer["groups"][0]["error_code"] != NO_ERROR:
            return None
        described = answer["groups"][0]
        members = []
        for member in described["members"]:
            try:
                assignment = (assigned_partitions(member["member_assignment"])
                              if described["protocol_type"] == "consumer" else {})
            except (Truncated, Malformed):
                assignment = {}  # a client's own bytes: shown without its partitions
            members.append(GroupMember(member["member_id"], member["client_id"], member["client_host"],
                                       assignment))
        return GroupMembers(described["group_state"], tuple(members))

    # -- plumbing ----------------------------------------------------------------------------------

    def _any_bootstrap(self, api_key: int, version: int, body: dict) -> dict | None:
        for address in self._bootstrap:
            answer = self._request(address, api_key, version, body)
            if answer is not None:
                return answer
        return None

    def _request(self, address: Address, api_key: int, version: int, body: dict) -> dict | None:
        """The response body, or None (the connection dropped) if the broker cannot answer."""
        self._correlation_id += 1
        try:
            sock = self._sockets.get(address)
            if sock is None:
                sock = self._sockets[address] = socket.create_connection(address, timeout=self._timeout_s)
            sock.sendall(encode_request(api_key, version, self._correlation_id, CLIENT_ID, body))
            (size,) = _SIZE.unpack(self._read(sock, _SIZE.size))
            correlation_id, answer = decode_response(api_key, version, self._read(sock, size))
            if correlation_id != self._correlation_id:
                raise Malformed(0, f"correlation id {correlation_id}, expected {self._correlation_id}")
            return answer
        except _ERRORS:
            dropped = self._sockets.pop(address, None)
            if dropped is not None:
                dropped.close()
            return None

    @staticmethod
    def _read(sock: socket.socket, count: int) -> bytes:
        data = bytearray()
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            data += chunk
        return bytes(data)
