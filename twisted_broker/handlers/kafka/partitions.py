"""Which log of this broker a modern request for (topic, partition) reads or writes, or the
Kafka error code that says why none (docs/kafka-protocol.md §4).

A replicated topic's partition is its replica here, which must lead (Kafka's clients fetch
and produce at the leader only); a 0.7 topic's modern partition is one (broker, local
partition) pair, which must be this broker's. Reactor thread only.
"""

from __future__ import annotations

from dataclasses import dataclass

from twisted.internet.defer import inlineCallbacks

from twisted_broker.errors import InvalidTopic, KafkaError, PartitionNotReady, WrongPartition
from twisted_broker.codec.kafka import errors as kafka_errors
from twisted_broker.replication.replica import Replica, Role
from twisted_broker.replication.replica_manager import ReplicaManager
from twisted_broker.handlers.kafka.topics import KafkaClusterView
from twisted_broker.storage.log import Log


class PartitionError(Exception):
    """A partition this broker cannot serve; ``code`` is the Kafka error the answer carries."""

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(reason or kafka_errors.error_name(code))
        self.code = code


@dataclass(frozen=True, slots=True)
class Target:
    log: Log | None  # None: a 0.7 partition with no log yet (nothing produced to it)
    replica: Replica | None  # a replicated topic's leader replica
    leader_epoch: int  # stamped into produced batches; 0 for 0.7 topics


class PartitionFinder:
    def __init__(self, view: KafkaClusterView, replicas: ReplicaManager | None = None) -> None:
        self.view = view
        self.replicas = replicas  # this broker's replicas; None without ZooKeeper

    def is_replicated(self, topic: str) -> bool:
        return self.view.cluster is not None and self.view.cluster.is_replicated(topic)

    @inlineCallbacks
    def for_write(self, topic: str, partition: int, acks: int):
        """The Target a produce appends to (its log created if needed). Raises PartitionError."""
        target = self.for_write_now(topic, partition, acks)
        if target is not None:
            return target
        local = yield self._local(topic, partition)
        return self._local_for_write(topic, local)

    def layout_known(self, topic: str, partition: int) -> bool:
        """Whether ``for_write_now`` answers at once (does not return None), with no effect."""
        return self.is_replicated(topic) or self.view.local_partition_now(topic, partition) is not None

    def for_write_now(self, topic: str, partition: int, acks: int) -> Target | None:
        """As ``for_write`` without waiting; None when the partition layout must be read first."""
        if self.is_replicated(topic):
            try:
                replica = self.replicas.leader_for_write(topic, partition, acks)
            except KafkaError as exc:  # 3 (WrongPartition), 6 and 19 carry Kafka's numbers
                raise PartitionError(exc.code, str(exc)) from None
            return Target(replica.log, replica, replica.leader_epoch)
        if self.view.cluster is not None and not self.view.cluster.synced and not self.view.logs.has_topic(topic):
            # Just started: a topic not known here may be a replicated one all the same.
            raise PartitionError(kafka_errors.NOT_LEADER_FOR_PARTITION,
                                 f"{topic}: replication's state not read from ZooKeeper yet")
        local = self.view.local_partition_now(topic, partition)
        if local is None:
            return None
        if local < 0:
            raise PartitionError(-local, f"partition {partition} of {topic!r}")
        return self._local_for_write(topic, local)

    def _local_for_write(self, topic: str, local: int) -> Target:
        try:
            return Target(self.view.logs.get_or_create_log(topic, local), None, 0)
        except (InvalidTopic, WrongPartition) as exc:
            raise PartitionError(kafka_errors.UNKNOWN_TOPIC_OR_PARTITION, str(exc)) from None
        except PartitionNotReady as exc:
            raise PartitionError(kafka_errors.NOT_LEADER_FOR_PARTITION, str(exc)) from None

    @inlineCallbacks
    def for_read(self, topic: str, partition: int):
        """The Target a fetch or offsets request reads (its log None if never written)."""
        if self.is_replicated(topic):
            return self.replica_for_read(topic, partition)
        local = yield self._local(topic, partition)
        return self.local_target(topic, local)

    def for_read_now(self, topic: str, partition: int) -> Target | None:
        """As ``for_read`` without waiting; None when the partition layout must be read first."""
        if self.is_replicated(topic):
            return self.replica_for_read(topic, partition)
        local = self.view.local_partition_now(topic, partition)
        if local is None:
            return None
        if local < 0:
            raise PartitionError(-local)
        return self.local_target(topic, local)

    def replica_for_read(self, topic: str, partition: int) -> Target:
        try:
            replica = self.replicas.replica(topic, partition)
        except WrongPartition as exc:
            raise PartitionError(kafka_errors.UNKNOWN_TOPIC_OR_PARTITION, str(exc)) from None
        if replica.role is not Role.LEADER:
            raise PartitionError(kafka_errors.NOT_LEADER_FOR_PARTITION, f"{replica.name} is not led here")
        return Target(replica.log, replica, replica.leader_epoch)

    def local_target(self, topic: str, local: int) -> Target:
        try:
            return Target(self.view.logs.get_log(topic, local), None, 0)
        except (InvalidTopic, WrongPartition) as exc:
            raise PartitionError(kafka_errors.UNKNOWN_TOPIC_OR_PARTITION, str(exc)) from None

    @inlineCallbacks
    def _local(self, topic: str, partition: int):
        local = yield self.view.local_partition(topic, partition)
        if local < 0:
            raise PartitionError(-local, f"partition {partition} of {topic!r}")
        return local


def partition_answers(topics: list, answers: list, defaults: dict, *, asked: str = "partitions",
                      index: str = "partition_index", answered: str = "partitions"):
    """Yield ``(topic, part, answer)`` for each partition a request asks for (``topics``: dicts
    with "name" and the list ``asked``), appending to ``answers`` the ``[{"name", answered:
    [answer, ...]}]`` that Produce and ListOffsets responses carry; each answer starts as
    ``{index: the partition, "error_code": 0, **defaults}`` for the caller to fill in. (The
    key names are Kafka's, which differ between the two APIs.)"""
    for topic in topics:
        partitions: list[dict] = []
        answers.append({"name": topic["name"], answered: partitions})
        for part in topic[asked]:
            answer = {index: part[index], "error_code": kafka_errors.NONE, **defaults}
            partitions.append(answer)
            yield topic, part, answer
