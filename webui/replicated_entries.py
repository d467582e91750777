"""Replicated topics as the console holds them: each topic's decoded assignment and partition
states (``ReplicatedTopicEntry``), what they count (offline and under-replicated partitions,
each broker's replicas, leaderships and under-replicated leaderships), and ``ReplicatedEntries``,
which keeps each entry until one of the topic's own nodes changes.

The mirror (zk_mirror.py) replaces a node's value object when the node changes and keeps it
otherwise, so an entry is still good while the mirror holds the very objects it was decoded
from: an ISR change in a cluster of a thousand topics costs one topic's decoding, and the
counts of the others, computed once per entry, are summed as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from twisted_broker.registry import replication_paths
from twisted_broker.registry.replication_paths import PartitionState, TopicAssignment

log = logging.getLogger(__name__)


def partition_offline(state: PartitionState | None) -> bool:
    """No leader: the state says -1, or no state is written yet (as the controller counts it)."""
    return state is None or not state.online


def partition_under_replicated(replicas: Sequence[int], state: PartitionState | None) -> bool:
    """A leader, and an ISR smaller than the replica list (Kafka's definition)."""
    return state is not None and state.online and len(state.isr) < len(replicas)


@dataclass(frozen=True)
class BrokerReplicaCounts:
    """What one broker holds of a replicated topic, or of all of them."""

    replicas: int = 0  # partitions with a replica on the broker
    leaderships: int = 0  # partitions it leads, as ZooKeeper's states say
    under_replicated: int = 0  # of those it leads, the under-replicated ones


@dataclass(frozen=True)
class ReplicatedTopicCounts:
    partitions: int
    under_replicated: int
    offline: int
    brokers: Mapping[int, BrokerReplicaCounts]  # every broker named in the assignment


@dataclass(frozen=True)
class ReplicatedTopicEntry:
    """A replicated topic as ZooKeeper holds it: the assignment (None with ``error`` when it
    does not parse) and each partition's state (None: not written yet, or unreadable)."""

    topic: str
    assignment: TopicAssignment | None
    states: dict[int, PartitionState | None] = field(default_factory=dict)
    error: str | None = None

    @property
    def replication_factor(self) -> int:
        return max((len(r) for r in self.assignment.replicas.values()), default=0) if self.assignment else 0

    @cached_property
    def counts(self) -> ReplicatedTopicCounts:
        """Its partitions' marks and each broker's share, computed once per entry."""
        replicas = self.assignment.replicas if self.assignment else {}
        held: dict[int, list[int]] = {}  # broker -> [replicas, leaderships, under-replicated]
        under = offline = 0
        for partition, brokers in replicas.items():
            state = self.states.get(partition)
            for broker in brokers:
                held.setdefault(broker, [0, 0, 0])[0] += 1
            if partition_offline(state):
                offline += 1
                continue
            lagging = partition_under_replicated(brokers, state)
            under += lagging
            figures = held.setdefault(state.leader, [0, 0, 0])
            figures[1] += 1
            figures[2] += lagging
        return ReplicatedTopicCounts(len(replicas), under, offline,
                                     {b: BrokerReplicaCounts(*held[b]) for b in sorted(held)})



class ReplicatedEntries:
    """Decoded entries by topic, each kept with the node objects it came from."""

    def __init__(self) -> None:
        # topic -> (its assignment's node, its entry, its states' nodes in partition order)
        self._known: dict[str, tuple[object, ReplicatedTopicEntry, tuple]] = {}

    def entry(self, data: Mapping[str, object], topic: str) -> ReplicatedTopicEntry:
        """``topic``'s entry from the mirror's ``data``: the one kept, if its nodes are the same."""
        node = data.get(replication_paths.topic_path(topic))
        known = self._known.get(topic)
        if known is not None and known[0] is node and _state_nodes(data, topic, known[1].assignment) == known[2]:
            return known[1]
        try:
            if node is None:
                raise ValueError("its assignment is not read yet")
            assignment = TopicAssignment.decode(node.value)
        except ValueError as exc:
            entry = ReplicatedTopicEntry(topic, None, error=str(exc))
            self._known[topic] = (node, entry, ())
            return entry
        nodes = _state_nodes(data, topic, assignment)
        states: dict[int, PartitionState | None] = {}
        for partition, state in zip(sorted(assignment.replicas), nodes):
            try:
                states[partition] = None if state is None else PartitionState.decode(state.value)
            except ValueError as exc:
                log.debug("%s-%d: %s", topic, partition, exc)
                states[partition] = None
        entry = ReplicatedTopicEntry(topic, assignment, states)
        self._known[topic] = (node, entry, nodes)
        return entry

    def keep_only(self, topics: Iterable[str]) -> None:
        """Forget the entries of topics that are gone."""
        for gone in set(self._known).difference(topics):
            del self._known[gone]


def _state_nodes(data: Mapping[str, object], topic: str, assignment: TopicAssignment | None) -> tuple:
    if assignment is None:
        return ()
    return tuple(data.get(replication_paths.state_path(topic, p)) for p in sorted(assignment.replicas))
