"""ReplicationView: the command line's blocking reads and writes of ``/replication``.

A ClusterView (same session, same errors: ZooKeeperUnavailable) that also reads replicated
topics' assignments and partition states, creates a topic's assignment, and writes the admin
requests the controller carries out (docs/replication.md §2); ``assignments_of`` and
``partition_states`` read many topics' nodes in bulk (ClusterView's ``_data_many``). Values
go through registry/replication_paths.py's codecs; a value that does not decode raises
ValueError naming its path.
Every write is a ``create``: a node that exists already is reported (False), never
overwritten, so a tool cannot replace a topic or a request that is still pending.
"""

from __future__ import annotations

from collections.abc import Sequence

from kazoo.exceptions import NodeExistsError

from twisted_broker.registry import paths as registry_paths
from twisted_broker.registry.cluster_view import ClusterView
from twisted_broker.registry import replication_paths as paths
from twisted_broker.registry.replication_paths import PartitionState, TopicAssignment


class ReplicationView(ClusterView):
    """ClusterView plus replication's nodes. Blocking; one thread at a time."""

    def replicated_topics(self) -> list[str]:
        """Every topic with an assignment under /replication/topics, sorted."""
        return sorted(self._children(paths.TOPICS))

    def is_07_topic(self, topic: str) -> bool:
        """Whether ``topic`` is registered the 0.7 way (/brokers/topics/<t> exists)."""
        return self._call(lambda: self._client.exists(registry_paths.topic_path(topic))) is not None

    def assignment(self, topic: str) -> TopicAssignment | None:
        """The topic's replica lists, or None when it is not a replicated topic."""
        value = self._data(paths.topic_path(topic))
        return None if value is None else _decoded(TopicAssignment.decode, value, paths.topic_path(topic))

    def assignments_of(self, topics: Sequence[str]) -> dict[str, TopicAssignment | None]:
        """``assignment`` of each of ``topics``, read in bulk (ValueError for the first that
        does not decode)."""
        values = self._data_many([paths.topic_path(topic) for topic in topics])
        return {topic: None if value is None else _decoded(TopicAssignment.decode, value, paths.topic_path(topic))
                for topic, value in zip(topics, values)}

    def partition_states(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], PartitionState | None]:
        """``partition_state`` of each ``(topic, partition)``, read in bulk."""
        nodes = [paths.state_path(topic, partition) for topic, partition in partitions]
        return {key: None if value is None else _decoded(PartitionState.decode, value, path)
                for key, path, value in zip(partitions, nodes, self._data_many(nodes))}

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """Leader, epoch and ISR, or None before the controller wrote the first state."""
        path = paths.state_path(topic, partition)
        value = self._data(path)
        return None if value is None else _decoded(PartitionState.decode, value, path)

    def create_topic(self, topic: str, assignment: TopicAssignment) -> bool:
        """Write a new replicated topic's assignment; False if the topic exists already."""
        return self._create(paths.topic_path(topic), assignment.encode())

    def admin_request(self, path: str) -> bytes | None:
        """The pending admin request at ``path`` (paths.REASSIGN_PARTITIONS or
        paths.PREFERRED_REPLICA_ELECTION), or None once the controller deleted it (done)."""
        return self._data(path)

    def create_admin_request(self, path: str, value: bytes) -> bool:
        """Write an admin request; False (and nothing written) if one is pending there."""
        return self._create(path, value)

    def _create(self, path: str, value: bytes) -> bool:
        def create() -> bool:
            try:
                self._client.create(path, value, makepath=True)
            except NodeExistsError:
                return False
            return True

        return self._call(create)


def _decoded(decode, value: bytes, path: str):
    try:
        return decode(value)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
