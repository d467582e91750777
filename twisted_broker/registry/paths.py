"""Kafka 0.7's ZooKeeper paths and node values (spec 5.2-5.3). Pure: no I/O.

Node data is the value string as raw UTF-8. Broker values are ``creatorId:host:port`` with
``creatorId = host-startupMs``; readers split on ``:`` and use fields 1 and 2.

Consumer groups (``/consumers/<group>/...``):

==============================  ==========================================================
``ids/<consumerId>``            the consumer's subscription: ``{ "t1": 2,"t2": 1 }`` (static),
                                ``*<n>*<regex>`` (whitelist), ``!<n>!<regex>`` (blacklist)
``owners/<topic>/<b>-<p>``      the owning consumer thread's id
``offsets/<topic>/<b>-<p>``     the next offset to consume, decimal
``offsets_metadata/<t>/<name>`` a modern client's commit metadata string (UTF-8), only if
                                non-empty; beside ``offsets`` so 0.7 readers of
                                ``offsets/<topic>`` find partition names only
==============================  ==========================================================

The ids are ``<group>_<hostname>-<ms>-<8 hex>`` for a consumer and ``<consumerId>-<i>`` for
its streams (0.7 calls them threads); a partition is named ``<brokerId>-<partId>`` (a
replicated topic's partition: ``<partId>``). Groups of modern clients (coordinator/group/) keep their
committed offsets at the same paths, so 0.7's tools see them.
"""

from __future__ import annotations

import json
import re
import uuid as uuid_module
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"


def broker_id_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def broker_topic_path(topic: str, broker_id: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/{broker_id}"


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    creator_id: str
    host: str
    port: int

    def encode(self) -> bytes:
        return f"{self.creator_id}:{self.host}:{self.port}".encode()

    @classmethod
    def decode(cls, broker_id: int, value: bytes) -> "BrokerInfo":
        """Parse a ``/brokers/ids/<id>`` value. Raises ValueError if it is not creator:host:port."""
        fields = value.decode("utf-8").split(":")
        if len(fields) != 3 or not (fields[2].isascii() and fields[2].isdigit()):
            raise ValueError(f"broker {broker_id} registration {value!r} is not creatorId:host:port")
        return cls(broker_id, fields[0], fields[1], int(fields[2]))


def creator_id(host: str, startup_ms: int) -> str:
    return f"{host}-{startup_ms}"


def encode_partition_count(count: int) -> bytes:
    return str(count).encode()


def decode_partition_count(value: bytes) -> int:
    return int(value.decode("ascii"))


# -- consumer groups (spec 5.2, 5.3) -------------------------------------------------------

WHITELIST_MARKER = "*"
BLACKLIST_MARKER = "!"
# 0.7's TopicCount patterns, matched whole: \p{Digit} is ASCII in Java, and Java's "."
# stops at any of its line terminators, not only at "\n".
_ANY = "[^\n\r\u0085\u2028\u2029]*"
_WILDCARD = {WHITELIST_MARKER: re.compile(f"\\*([0-9]+)\\*({_ANY})"),
             BLACKLIST_MARKER: re.compile(f"!([0-9]+)!({_ANY})")}
_LONG = re.compile("[+-]?[0-9]+")  # Long.parseLong: a sign, digits, nothing else
_JAVA_INT_MAX = 2**31 - 1
_JAVA_LONG_MAX = 2**63 - 1


def consumer_group_path(group: str) -> str:
    return f"{CONSUMERS}/{group}"


def consumer_ids_path(group: str) -> str:
    return f"{CONSUMERS}/{group}/ids"


def consumer_id_path(group: str, consumer_id: str) -> str:
    return f"{CONSUMERS}/{group}/ids/{consumer_id}"


def owners_path(group: str, topic: str) -> str:
    return f"{CONSUMERS}/{group}/owners/{topic}"


def owner_path(group: str, topic: str, partition: str) -> str:
    """``/consumers/<group>/owners/<topic>/<b>-<p>``; ``partition`` is a partition name."""
    return f"{CONSUMERS}/{group}/owners/{topic}/{partition}"


def offsets_path(group: str, topic: str) -> str:
    return f"{CONSUMERS}/{group}/offsets/{topic}"


def offset_path(group: str, topic: str, partition: str) -> str:
    """``/consumers/<group>/offsets/<topic>/<b>-<p>``; ``partition`` is a partition name."""
    return f"{CONSUMERS}/{group}/offsets/{topic}/{partition}"


def offset_metadata_path(group: str, topic: str, partition: str) -> str:
    """``/consumers/<group>/offsets_metadata/<topic>/<name>``: a commit's metadata string."""
    return f"{CONSUMERS}/{group}/offsets_metadata/{topic}/{partition}"


# ZooKeeper's PathUtils.validatePath: code points a node name may not hold.
_INVALID_NODE_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff/]")


def is_valid_node_name(name: str) -> bool:
    """Whether ZooKeeper accepts ``name`` as one path component (not ``.``, ``..``, no ``/``)."""
    return bool(name) and name not in (".", "..") and not _INVALID_NODE_CHARS.search(name)


def partition_name(broker_id: int | str, partition: int) -> str:
    """``<brokerId>-<partId>`` (0.7's ``Partition.name``)."""
    return f"{broker_id}-{partition}"


def parse_partition_name(name: str) -> tuple[int, int]:
    """``(broker id, partition)`` of ``<b>-<p>``. Raises ValueError for anything else."""
    broker, sep, partition = name.partition("-")
    if not (sep and broker.isascii() and broker.isdigit() and partition.isascii() and partition.isdigit()):
        raise ValueError(f"partition name {name!r} is not <brokerId>-<partId>")
    return int(broker), int(partition)


def uuid_prefix(uuid: uuid_module.UUID) -> str:
    """The 8 hex digits 0.7 puts in a consumer id: Java's
    ``Long.toHexString(uuid.getMostSignificantBits()).substring(0, 8)``.

    toHexString writes the 64 bits unsigned and without leading zeros, so when the top nibble
    is 0 the prefix starts at the first non-zero digit: kept, so the ids look like Java's.
    """
    return format(uuid.int >> 64, "x")[:8]


def consumer_id(group: str, *, consumerid: str | None, hostname: str, now_ms: int,
                uuid: uuid_module.UUID) -> str:
    """``<group>_<hostname>-<now_ms>-<uuid_prefix>``; ``consumerid`` (the config key, for
    tests) replaces everything after ``<group>_``."""
    if consumerid is None:
        consumerid = f"{hostname}-{now_ms}-{uuid_prefix(uuid)}"
    return f"{group}_{consumerid}"


def thread_id(consumer_id: str, index: int) -> str:
    """The id of a consumer's stream ``index``: ``<consumerId>-<index>``."""
    return f"{consumer_id}-{index}"


@dataclass(frozen=True)
class StaticSubscription:
    """A consumer registered for named topics: topic -> number of streams (each >= 1).

    Encoded in the mapping's order, as 0.7 writes its Map (for up to four topics Scala keeps
    insertion order; beyond that its hash order, which readers must not depend on).
    """

    topic_counts: Mapping[str, int]

    def __post_init__(self) -> None:
        for topic, count in self.topic_counts.items():
            if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= _JAVA_INT_MAX:
                raise ValueError(f"stream count for topic {topic!r} is {count!r}, not an integer >= 1")
        object.__setattr__(self, "topic_counts", MappingProxyType(dict(self.topic_counts)))

    def encode(self) -> bytes:
        """``{ "t1": 2,"t2": 1 }``: 0.7's TopicCount.dbString, byte for byte."""
        entries = ",".join(f'"{topic}": {count}' for topic, count in self.topic_counts.items())
        return f"{{ {entries} }}".encode()


@dataclass(frozen=True)
class WildcardSubscription:
    """A consumer registered by topic filter: ``streams`` streams shared by every topic that
    the filter allows. ``regex`` is the filter's normalized regex (see client/topic_filter.py)."""

    whitelist: bool
    streams: int
    regex: str = field(default="")

    def __post_init__(self) -> None:
        if not 1 <= self.streams <= _JAVA_INT_MAX:
            raise ValueError(f"stream count {self.streams} is not >= 1")

    def encode(self) -> bytes:
        """``*<n>*<regex>`` for a whitelist, ``!<n>!<regex>`` for a blacklist."""
        marker = WHITELIST_MARKER if self.whitelist else BLACKLIST_MARKER
        return f"{marker}{self.streams}{marker}{self.regex}".encode()


Subscription = StaticSubscription | WildcardSubscription


def decode_subscription(value: bytes) -> Subscription:
    """Parse a ``/consumers/<g>/ids/<id>`` value. Raises ValueError if 0.7 could not read it.

    As 0.7's TopicCount: a value starting with ``*`` or ``!`` must match the wildcard form
    whole; anything else is a JSON object of topic -> integer. 0.7's JSON lexer skips any
    character up to U+0020 between tokens; Python's skips only four of them, so the others
    are blanked first (topic names cannot hold them, 4.9). Numbers must be integers (0.7
    parsed them with toInt), at least 1 (0.7 asserted that); a repeated topic keeps its last
    count, as Scala's toMap does.
    """
    text = value.decode("utf-8")
    marker = text[:1]
    if marker in _WILDCARD:
        match = _WILDCARD[marker].fullmatch(text)
        if match is None:
            raise ValueError(f"consumer registration {text!r} is not {marker}<streams>{marker}<regex>")
        streams = int(match.group(1))
        if streams > _JAVA_INT_MAX:
            raise ValueError(f"consumer registration {text!r}: stream count is not an int")
        return WildcardSubscription(marker == WHITELIST_MARKER, streams, match.group(2))
    blanked = "".join(" " if char < " " else char for char in text)
    try:
        parsed = json.loads(blanked, parse_float=_not_an_int, parse_constant=_not_an_int)
    except json.JSONDecodeError as exc:
        raise ValueError(f"consumer registration {text!r} is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"consumer registration {text!r} is not a JSON object")
    for topic, count in parsed.items():
        if not isinstance(count, int) or isinstance(count, bool):
            raise ValueError(f"consumer registration {text!r}: count of {topic!r} is not an integer")
    return StaticSubscription(parsed)


def _not_an_int(token: str) -> int:
    raise ValueError(f"{token} is not an integer")


def encode_owner(thread_id: str) -> bytes:
    return thread_id.encode()


def decode_owner(value: bytes) -> str:
    return value.decode("utf-8")


def encode_offset(offset: int) -> bytes:
    """Decimal text, as Java's ``Long.toString``."""
    return str(offset).encode()


def decode_offset(value: bytes) -> int:
    """Parse an offsets node as Java's ``Long.parseLong``: optional sign, ASCII digits, no
    blanks. Raises ValueError otherwise (0.7's consumer failed its rebalance on such a node)."""
    text = value.decode("ascii", errors="replace")
    if not _LONG.fullmatch(text) or not -_JAVA_LONG_MAX - 1 <= int(text) <= _JAVA_LONG_MAX:
        raise ValueError(f"offset {value!r} is not a decimal long")
    return int(text)
